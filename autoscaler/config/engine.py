"""Fleet-file section ``engine``: the vLLM scheduler limits each replica runs with.

The capacity model (``models.capacity``) plans a live fleet with them and the simulator reproduces
them, so they are not simulator settings; ``simulator.engine``, where they used to live, is still read
(``FleetConfig``) with a warning.
"""

from __future__ import annotations

from pydantic import Field, model_validator

from autoscaler.config.base import Strict


class EngineConfig(Strict):
    """vLLM scheduler settings of every replica: the limits the capacity model plans with, live and
    simulated, and that the simulator reproduces.

    Attributes:
        max_num_seqs: running-batch bound (vLLM ``--max-num-seqs``; its default is 256 on GPUs).
        max_num_batched_tokens: token budget per engine step (vLLM ``--max-num-batched-tokens``;
            8192 is vLLM V1's default for online serving on data-centre GPUs).
        block_size: KV-cache block size in tokens (vLLM default 16).
    """

    max_num_seqs: int = Field(default=256, ge=1)
    max_num_batched_tokens: int = Field(default=8192, ge=16)
    block_size: int = Field(default=16, ge=1)

    @model_validator(mode="after")
    def _budget(self) -> EngineConfig:
        # vLLM refuses to start when a step's token budget cannot hold one token per running sequence.
        if self.max_num_batched_tokens < self.max_num_seqs:
            raise ValueError(f"max_num_batched_tokens ({self.max_num_batched_tokens}) must be >= max_num_seqs "
                             f"({self.max_num_seqs}), as vLLM requires")
        return self
