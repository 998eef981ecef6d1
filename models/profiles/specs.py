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
    """Architecture of a decoder-only transformer (Llama family, dense or mixture of experts), as in
    its HF ``config.json``.

    Attributes:
        key: short name used in profile names, e.g. ``llama-3-8b``.
        num_layers: decoder layers (``num_hidden_layers``).
        hidden_size: model width (d_model).
        num_attention_heads: query heads.
        num_kv_heads: key/value heads (``num_key_value_heads``; grouped-query attention).
        head_size: per-head width (``hidden_size // num_attention_heads`` for every model here).
        intermediate_size: gated-MLP width (of one expert for a mixture of experts).
        vocab_size: embedding / LM-head rows (untied for every model here).
        max_position_embeddings: longest context the config allows, tokens (vLLM's default
            ``max_model_len``).
        num_parameters: published parameter count (the checkpoint's safetensors total); the
            ``parameters`` property recomputes it from the shapes.
        source: where the numbers come from.
        num_experts: MLP experts per layer (``num_local_experts``; 1 for a dense model).
        experts_per_token: experts each token is routed to (``num_experts_per_tok``; 1 if dense).
        attention_bias: the Q, K and V projections have biases (Qwen2).
        bytes_per_param: bytes per weight and per KV element (2 for bf16/fp16).
    """

    key: str
    num_layers: int
    hidden_size: int
    num_attention_heads: int
    num_kv_heads: int
    head_size: int
    intermediate_size: int
    vocab_size: int
    max_position_embeddings: int
    num_parameters: int
    source: str
    num_experts: int = 1
    experts_per_token: int = 1
    attention_bias: bool = False
    bytes_per_param: int = 2

    @property
    def head_dim(self) -> int:
        """Per-head width (``head_size``)."""
        return self.head_size

    @property
    def kv_bytes_per_token(self) -> int:
        """KV-cache bytes one token occupies (and one decode step reads): K and V, every layer."""
        return 2 * self.num_layers * self.num_kv_heads * self.head_size * self.bytes_per_param

    @property
    def _attention_params(self) -> int:
        """Weights (and biases) of one layer's Q, K, V and O projections."""
        d, q, kv = self.hidden_size, self.num_attention_heads * self.head_size, self.num_kv_heads * self.head_size
        bias = q + 2 * kv if self.attention_bias else 0
        return d * (q + 2 * kv) + bias + q * d

    @property
    def _expert_params(self) -> int:
        """Weights of one gated MLP (gate, up, down)."""
        return 3 * self.hidden_size * self.intermediate_size

    @property
    def _router_params(self) -> int:
        return self.hidden_size * self.num_experts if self.num_experts > 1 else 0

    @property
    def layer_linear_params(self) -> int:
        """Weights of the matmuls one token goes through in one decoder layer (QKV, O, its
        ``experts_per_token`` MLPs, the router); norms excluded."""
        return self._attention_params + self.experts_per_token * self._expert_params + self._router_params

    @property
    def parameters(self) -> int:
        """All parameters: layers (every expert), untied embedding and LM head, RMSNorm gains."""
        layer = self._attention_params + self.num_experts * self._expert_params + self._router_params
        norms = (2 * self.num_layers + 1) * self.hidden_size
        return self.num_layers * layer + 2 * self.vocab_size * self.hidden_size + norms

    @property
    def weight_bytes(self) -> int:
        """Bytes of all weights (what a replica holds in GPU memory)."""
        return self.parameters * self.bytes_per_param

    @property
    def active_weight_bytes(self) -> int:
        """Bytes of the weights one token reads: ``weight_bytes`` less the experts it is not routed to
        (the least a decode step of one sequence reads)."""
        idle = (self.num_experts - self.experts_per_token) * self._expert_params * self.num_layers
        return self.weight_bytes - idle * self.bytes_per_param

    @property
    def prefill_flops_per_token(self) -> float:
        """Matmul FLOPs per prompt token (2 per weight the token goes through, every layer).

        The LM head is left out: vLLM computes logits only for the last token of each prompt.
        Attention's own FLOPs (quadratic in prompt length) are ``attention_flops_per_pair``.
        """
        return 2.0 * self.num_layers * self.layer_linear_params

    @property
    def attention_flops_per_pair(self) -> float:
        """FLOPs of one (query, key) pair of causal self-attention in a prefill, every layer: per head
        2 x ``head_size`` for the score q.k and as many for its share of the weighted sum of values. A
        prompt token at position i (1-based) attends to i keys, so a prompt of L tokens forms
        L (L + 1) / 2 pairs (FlashAttention computes no more; the masked half is skipped)."""
        return 4.0 * self.num_layers * self.num_attention_heads * self.head_size

    @property
    def attention_tokens_per_pair(self) -> float:
        """Prefill-token equivalents of one attention pair: ``attention_flops_per_pair /
        prefill_flops_per_token`` (attention and the matmuls taken to run at the same efficiency).
        Llama-3-8B: 3.8e-5, so an 8k-token prompt costs 15 % more than its tokens alone, a 2k one 4 %."""
        return self.attention_flops_per_pair / self.prefill_flops_per_token


@dataclass(frozen=True)
class GpuSpec:
    """Datasheet figures of one GPU.

    Attributes:
        key: short name used in profile names, e.g. ``h100-sxm``.
        name: marketing name.
        memory_bytes: HBM capacity, bytes.
        mem_bandwidth_bytes_per_s: peak HBM bandwidth, bytes/s.
        peak_dense_bf16_flops: peak dense (no 2:4 sparsity) BF16 tensor-core FLOP/s.
        source: datasheet the figures are taken from.
    """

    key: str
    name: str
    memory_bytes: float
    mem_bandwidth_bytes_per_s: float
    peak_dense_bf16_flops: float
    source: str


def _hf(repo: str, extra: str) -> str:
    return f"huggingface.co/{repo} config.json; bf16 weights and KV cache. {extra}"


LLAMA_3_8B = ModelSpec(
    key="llama-3-8b", num_layers=32, hidden_size=4096, num_attention_heads=32, num_kv_heads=8,
    head_size=128, intermediate_size=14336, vocab_size=128256, max_position_embeddings=8192,
    num_parameters=8_030_261_248,
    source=_hf("meta-llama/Meta-Llama-3-8B", "Llama-3.1-8B has the same shapes (with a 131072 context). "
               "8,030,261,248 parameters; 131,072 KV bytes per token."),
)
"""Llama-3-8B / Llama-3.1-8B."""

LLAMA_3_70B = ModelSpec(
    key="llama-3-70b", num_layers=80, hidden_size=8192, num_attention_heads=64, num_kv_heads=8,
    head_size=128, intermediate_size=28672, vocab_size=128256, max_position_embeddings=8192,
    num_parameters=70_553_706_496,
    source=_hf("meta-llama/Meta-Llama-3-70B", "70,553,706,496 parameters; 327,680 KV bytes per token."),
)

LLAMA_2_7B = ModelSpec(
    key="llama-2-7b", num_layers=32, hidden_size=4096, num_attention_heads=32, num_kv_heads=32,
    head_size=128, intermediate_size=11008, vocab_size=32000, max_position_embeddings=4096,
    num_parameters=6_738_415_616,
    source=_hf("meta-llama/Llama-2-7b-hf", "6,738,415,616 parameters; 524,288 KV bytes per token (no GQA)."),
)

LLAMA_2_70B = ModelSpec(
    key="llama-2-70b", num_layers=80, hidden_size=8192, num_attention_heads=64, num_kv_heads=8,
    head_size=128, intermediate_size=28672, vocab_size=32000, max_position_embeddings=4096,
    num_parameters=68_976_648_192,
    source=_hf("meta-llama/Llama-2-70b-hf", "68,976,648,192 parameters; 327,680 KV bytes per token."),
)

MISTRAL_7B = ModelSpec(
    key="mistral-7b", num_layers=32, hidden_size=4096, num_attention_heads=32, num_kv_heads=8,
    head_size=128, intermediate_size=14336, vocab_size=32000, max_position_embeddings=32768,
    num_parameters=7_241_732_096,
    source=_hf("mistralai/Mistral-7B-v0.1", "sliding_window 4096. 7,241,732,096 parameters; "
               "131,072 KV bytes per token."),
)

MIXTRAL_8X7B = ModelSpec(
    key="mixtral-8x7b", num_layers=32, hidden_size=4096, num_attention_heads=32, num_kv_heads=8,
    head_size=128, intermediate_size=14336, vocab_size=32000, max_position_embeddings=32768,
    num_parameters=46_702_792_704, num_experts=8, experts_per_token=2,
    source=_hf("mistralai/Mixtral-8x7B-v0.1", "num_local_experts 8, num_experts_per_tok 2. "
               "46,702,792,704 parameters (12.9B active per token); 131,072 KV bytes per token."),
)

QWEN2_7B = ModelSpec(
    key="qwen2-7b", num_layers=28, hidden_size=3584, num_attention_heads=28, num_kv_heads=4,
    head_size=128, intermediate_size=18944, vocab_size=152064, max_position_embeddings=131072,
    num_parameters=7_615_616_512, attention_bias=True,
    source=_hf("Qwen/Qwen2-7B", "tie_word_embeddings false; Q/K/V biases. 7,615,616,512 parameters; "
               "57,344 KV bytes per token."),
)

QWEN2_72B = ModelSpec(
    key="qwen2-72b", num_layers=80, hidden_size=8192, num_attention_heads=64, num_kv_heads=8,
    head_size=128, intermediate_size=29568, vocab_size=152064, max_position_embeddings=131072,
    num_parameters=72_706_203_648, attention_bias=True,
    source=_hf("Qwen/Qwen2-72B", "tie_word_embeddings false; Q/K/V biases. 72,706,203,648 parameters; "
               "327,680 KV bytes per token."),
)

A100_40GB = GpuSpec(
    key="a100-40gb",
    name="NVIDIA A100 40GB SXM",
    memory_bytes=40e9,
    mem_bandwidth_bytes_per_s=1.555e12,
    peak_dense_bf16_flops=312e12,
    source=(
        "NVIDIA A100 Tensor Core GPU datasheet: A100 40GB SXM, HBM2 1,555 GB/s; "
        "BF16 tensor core 312 TFLOPS dense (624 with sparsity). LLM-Inference-Bench's A100 rows were "
        "measured on such cards (ALCF Polaris nodes: 4 x A100 40GB SXM4; the KV pool their rows "
        "imply, models.profiles.fit)"
    ),
)

A100_80GB = GpuSpec(
    key="a100-80gb",
    name="NVIDIA A100 80GB SXM",
    memory_bytes=80e9,
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
    memory_bytes=80e9,
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
    memory_bytes=96e9,
    mem_bandwidth_bytes_per_s=4.0e12,
    peak_dense_bf16_flops=989e12,
    source=(
        "NVIDIA GH200 Grace Hopper Superchip datasheet: 96 GB HBM3, 4 TB/s. Its GPU is a Hopper "
        "H100; peak BF16 taken as the H100 SXM datasheet's 989 TFLOPS dense"
    ),
)

MODELS: dict[str, ModelSpec] = {
    m.key: m
    for m in (LLAMA_3_8B, LLAMA_3_70B, LLAMA_2_7B, LLAMA_2_70B, MISTRAL_7B, MIXTRAL_8X7B, QWEN2_7B, QWEN2_72B)
}
"""Model specs by key."""

GPUS: dict[str, GpuSpec] = {g.key: g for g in (A100_40GB, A100_80GB, H100_SXM, GH200)}
"""GPU specs by key."""
