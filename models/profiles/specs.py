"""Physical constants of the modelled LLMs and GPUs, each with its source.

These are the *unfitted* inputs of a performance profile: KV-cache bytes per token and weight bytes
come from the model architecture, memory bandwidth and peak tensor throughput from NVIDIA's
datasheets. ``models.profiles.fit`` uses them as physical bounds; the runtime uses them to turn
context tokens into seconds.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ModelSpec:
    """Architecture of a dense decoder-only transformer (Llama family), as in its HF ``config.json``.

    Attributes:
        key: short name used in profile names, e.g. ``llama-3-8b``.
        num_layers: decoder layers.
        hidden_size: model width (d_model).
        num_attention_heads: query heads.
        num_kv_heads: key/value heads (grouped-query attention).
        intermediate_size: gated-MLP width.
        vocab_size: embedding / LM-head rows.
        bytes_per_param: bytes per weight and per KV element (2 for bf16/fp16).
        source: where the numbers come from.
    """

    key: str
    num_layers: int
    hidden_size: int
    num_attention_heads: int
    num_kv_heads: int
    intermediate_size: int
    vocab_size: int
    bytes_per_param: int
    source: str

    @property
    def head_dim(self) -> int:
        """Per-head width: ``hidden_size // num_attention_heads``."""
        return self.hidden_size // self.num_attention_heads

    @property
    def kv_bytes_per_token(self) -> int:
        """KV-cache bytes one token occupies (and one decode step reads): K and V, every layer."""
        return 2 * self.num_layers * self.num_kv_heads * self.head_dim * self.bytes_per_param

    @property
    def layer_linear_params(self) -> int:
        """Weights of the matmuls of one decoder layer (QKV, O, gate/up/down); norms excluded."""
        d, kv = self.hidden_size, self.num_kv_heads * self.head_dim
        return d * (d + 2 * kv) + d * d + 3 * d * self.intermediate_size

    @property
    def weight_bytes(self) -> int:
        """Bytes of all weights (layers, untied embedding and LM head, RMSNorm gains)."""
        norms = (2 * self.num_layers + 1) * self.hidden_size
        params = self.num_layers * self.layer_linear_params + 2 * self.vocab_size * self.hidden_size + norms
        return params * self.bytes_per_param

    @property
    def prefill_flops_per_token(self) -> float:
        """Matmul FLOPs per prompt token (2 per weight of every layer).

        The LM head is left out: vLLM computes logits only for the last token of each prompt.
        Attention score FLOPs (quadratic in prompt length) are also left out; they are <= 3% of
        this at 2k-token prompts.
        """
        return 2.0 * self.num_layers * self.layer_linear_params


@dataclass(frozen=True)
class GpuSpec:
    """Datasheet figures of one GPU.

    Attributes:
        key: short name used in profile names, e.g. ``h100-sxm``.
        name: marketing name.
        mem_bandwidth_bytes_per_s: peak HBM bandwidth, bytes/s.
        peak_dense_bf16_flops: peak dense (no 2:4 sparsity) BF16 tensor-core FLOP/s.
        source: datasheet the figures are taken from.
    """

    key: str
    name: str
    mem_bandwidth_bytes_per_s: float
    peak_dense_bf16_flops: float
    source: str


LLAMA_3_8B = ModelSpec(
    key="llama-3-8b",
    num_layers=32,
    hidden_size=4096,
    num_attention_heads=32,
    num_kv_heads=8,
    intermediate_size=14336,
    vocab_size=128256,
    bytes_per_param=2,
    source=(
        "huggingface.co/meta-llama/Meta-Llama-3-8B config.json (Llama-3.1-8B has the same shapes); "
        "bf16 weights and KV cache. 8,030,261,248 parameters; 131,072 KV bytes per token."
    ),
)
"""Llama-3-8B / Llama-3.1-8B."""

A100_80GB = GpuSpec(
    key="a100-80gb",
    name="NVIDIA A100 80GB SXM",
    mem_bandwidth_bytes_per_s=2.039e12,
    peak_dense_bf16_flops=312e12,
    source=(
        "NVIDIA A100 Tensor Core GPU datasheet: A100 80GB SXM, HBM2e 2,039 GB/s; "
        "BF16 tensor core 312 TFLOPS dense (624 with sparsity)"
    ),
)

H100_SXM = GpuSpec(
    key="h100-sxm",
    name="NVIDIA H100 SXM 80GB",
    mem_bandwidth_bytes_per_s=3.35e12,
    peak_dense_bf16_flops=989e12,
    source=(
        "NVIDIA H100 Tensor Core GPU datasheet: H100 SXM, 80 GB HBM3, 3.35 TB/s; "
        "BF16 tensor core 1,979 TFLOPS with sparsity, i.e. 989 dense"
    ),
)

GH200 = GpuSpec(
    key="gh200",
    name="NVIDIA GH200 Grace Hopper Superchip (96 GB HBM3)",
    mem_bandwidth_bytes_per_s=4.0e12,
    peak_dense_bf16_flops=989e12,
    source=(
        "NVIDIA GH200 Grace Hopper Superchip datasheet: 96 GB HBM3, 4 TB/s. Its GPU is a Hopper "
        "H100; peak BF16 taken as the H100 SXM datasheet's 989 TFLOPS dense"
    ),
)

MODELS: dict[str, ModelSpec] = {m.key: m for m in (LLAMA_3_8B,)}
"""Model specs by key."""

GPUS: dict[str, GpuSpec] = {g.key: g for g in (A100_80GB, H100_SXM, GH200)}
"""GPU specs by key."""
