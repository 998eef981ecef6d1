"""Fleet-file section ``simulator``: the embedded simulator's engine settings and injected faults."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, model_validator

from autoscaler.config.base import Strict


class EngineConfig(Strict):
    """vLLM scheduler settings the simulator reproduces (per replica).

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


class Crash(Strict):
    """One injected replica crash."""

    time_s: float = Field(ge=0)
    service: str | None = None
    variant: str


class SimulatorConfig(Strict):
    """Embedded fleet simulator settings.

    Attributes:
        router: ``least_outstanding`` (default) or ``prefix_affinity``.
        engine: per-replica vLLM scheduler settings.
        client_timeout_s: a request still unfinished this long after it arrived fails: its client
            gave up, wherever it was (waiting at the gateway, queued on a replica, or running, which
            vLLM then aborts). Default 600 s, the 10-minute read timeout of common LLM clients.
        scrape_interval_s: how often the simulated Prometheus samples every pod (seconds; a
            controller ticking faster is sampled at its own tick, as its anchor reads the pods).
        slowdown: variant name -> how many times longer its replicas' steps are than its profile says
            (a fault: GPUs slower than measured; the controllers still read the profile), in (0, 10];
        crashes: replica crashes to inject, as ``{time_s, variant}``; the oldest ready replica of
            that variant crashes.
    """

    router: Literal["least_outstanding", "prefix_affinity"] = "least_outstanding"
    engine: EngineConfig = EngineConfig()
    client_timeout_s: float = Field(default=600.0, gt=0)
    scrape_interval_s: float = Field(default=15.0, gt=0, le=300.0)
    crashes: list[Crash] = Field(default_factory=list)
    slowdown: dict[str, Annotated[float, Field(gt=0, le=10)]] = Field(default_factory=dict)
