"""Per-replica metric store with vLLM 0.33 metric names and histogram buckets.

Names, types and buckets follow vLLM 0.33.0 ``vllm/v1/metrics/loggers.py`` and
``vllm/v1/metrics/buckets.py`` as tabulated in ``shared/data/vllm-metrics/METRICS.md``.
Histograms keep cumulative per-bucket counts (not yet ``le``-cumulative), so window deltas and
``histogram_quantile`` can be computed exactly as Prometheus does.
"""

from __future__ import annotations

from bisect import bisect_left
from dataclasses import dataclass, field

# vLLM 0.33.0 buckets (METRICS.md, "The autoscaling-relevant set").
TTFT_BUCKETS: tuple[float, ...] = (
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
    20.0, 40.0, 80.0, 160.0, 640.0, 2560.0,
)
ITL_BUCKETS: tuple[float, ...] = (
    0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0,
    40.0, 80.0,
)
ITERATION_TOKENS_BUCKETS: tuple[float, ...] = (1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384)
LENGTH_BUCKETS: tuple[float, ...] = tuple(float(m * 10**e) for e in range(7) for m in (1, 2, 5) if m * 10**e <= 10**6)
"""Buckets of the per-request token histograms (``vllm:request_prompt_tokens``,
``vllm:request_generation_tokens``): vLLM 0.33.0's 1-2-5 series (``build_1_2_5_buckets``), which it
stops at the model's ``max_model_len``; here up to 1 M tokens for every model (a bucket above a
model's length stays empty; the loop reads only the ``_sum`` and ``_count``)."""
E2E_BUCKETS: tuple[float, ...] = (
    0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0,
    480.0, 960.0, 1920.0, 7680.0,
)

# Exposed names (counters carry ``_total``), vLLM 0.33.0.
NUM_REQUESTS_RUNNING = "vllm:num_requests_running"
NUM_REQUESTS_WAITING = "vllm:num_requests_waiting"
KV_CACHE_USAGE_PERC = "vllm:kv_cache_usage_perc"
PREFIX_CACHE_QUERIES = "vllm:prefix_cache_queries_total"
PREFIX_CACHE_HITS = "vllm:prefix_cache_hits_total"
PROMPT_TOKENS = "vllm:prompt_tokens_total"
GENERATION_TOKENS = "vllm:generation_tokens_total"
NUM_PREEMPTIONS = "vllm:num_preemptions_total"
REQUEST_SUCCESS = "vllm:request_success_total"
TTFT_SECONDS = "vllm:time_to_first_token_seconds"
ITL_SECONDS = "vllm:inter_token_latency_seconds"
TPOT_SECONDS = "vllm:request_time_per_output_token_seconds"
E2E_SECONDS = "vllm:e2e_request_latency_seconds"
REQUEST_PROMPT_TOKENS = "vllm:request_prompt_tokens"
REQUEST_GENERATION_TOKENS = "vllm:request_generation_tokens"
ITERATION_TOKENS = "vllm:iteration_tokens_total"  # a histogram whose name ends in _total, as vLLM's does
CACHE_CONFIG_INFO = "vllm:cache_config_info"

FINISHED_REASONS = ("stop", "length", "abort", "error", "repetition")


@dataclass
class Histogram:
    """A Prometheus-style histogram: per-bucket counts (last slot is +Inf), sum and count."""

    bounds: tuple[float, ...]
    counts: list[float] = field(default_factory=list)
    total: float = 0.0
    count: float = 0.0

    def __post_init__(self) -> None:
        if not self.counts:
            self.counts = [0.0] * (len(self.bounds) + 1)

    def observe(self, value: float, n: float = 1.0) -> None:
        """Add ``n`` observations of ``value`` (seconds)."""
        self.counts[bisect_left(self.bounds, value)] += n
        self.total += value * n
        self.count += n

    def cumulative(self) -> list[float]:
        """Counts per ``le`` bound, cumulative, ending with +Inf (the exposition form)."""
        out, acc = [], 0.0
        for c in self.counts:
            acc += c
            out.append(acc)
        return out


def histogram_quantile(q: float, bounds: tuple[float, ...], bucket_deltas: list[float]) -> float | None:
    """Prometheus ``histogram_quantile`` over per-bucket (non-cumulative) counts.

    Linear interpolation inside the bucket, lower bound 0 for the first bucket; a quantile in the
    +Inf bucket returns the highest finite bound, as Prometheus does. Returns None (unknown, not
    zero) when there are no observations.
    """
    total = sum(bucket_deltas)
    if total <= 0:
        return None
    rank = q * total
    acc = 0.0
    for i, c in enumerate(bucket_deltas):
        if acc + c >= rank and c > 0:
            if i == len(bounds):
                return bounds[-1]
            lo = bounds[i - 1] if i > 0 else 0.0
            return lo + (bounds[i] - lo) * (rank - acc) / c
        acc += c
    return bounds[-1]


@dataclass
class ReplicaMetrics:
    """Cumulative counters, gauges and histograms one vLLM replica exposes.

    Gauges: ``running``, ``waiting`` (requests), ``kv_usage`` (fraction 0..1), as of the last
    ``Replica.refresh_gauges`` (which each reader calls before reading them).
    Counters: tokens, prefix-cache queries/hits (tokens), preemptions, successes by finished_reason.
    Histograms: TTFT, ITL (one observation per decode step per sequence), TPOT (per finished
    request: its mean time per output token after the first, 0 for a one-token request, same
    buckets as ITL), e2e latency, tokens per engine step (``iteration_tokens``: as vLLM counts them,
    the tokens each decoding sequence generated plus, for each prefill that ended in the step, every
    prompt token it computed and its first token), and the prompt and output tokens of each finished
    request (``request_prompt_tokens``, ``request_generation_tokens``: observed with its e2e latency,
    so over the same requests; vLLM 0.33.0 ``vllm/v1/metrics/loggers.py`` observes the three together
    for each finished request). The counters ``prompt_tokens`` and ``generation_tokens`` count tokens
    as they are computed: a prompt counts at its prefill, long before its request finishes.
    """

    running: int = 0
    waiting: int = 0
    kv_usage: float = 0.0
    prompt_tokens: float = 0.0
    generation_tokens: float = 0.0
    prefix_queries: float = 0.0
    prefix_hits: float = 0.0
    preemptions: float = 0.0
    success: dict[str, float] = field(default_factory=lambda: dict.fromkeys(FINISHED_REASONS, 0.0))
    ttft: Histogram = field(default_factory=lambda: Histogram(TTFT_BUCKETS))
    itl: Histogram = field(default_factory=lambda: Histogram(ITL_BUCKETS))
    tpot: Histogram = field(default_factory=lambda: Histogram(ITL_BUCKETS))
    e2e: Histogram = field(default_factory=lambda: Histogram(E2E_BUCKETS))
    iteration_tokens: Histogram = field(default_factory=lambda: Histogram(ITERATION_TOKENS_BUCKETS))
    request_prompt_tokens: Histogram = field(default_factory=lambda: Histogram(LENGTH_BUCKETS))
    request_generation_tokens: Histogram = field(default_factory=lambda: Histogram(LENGTH_BUCKETS))

    def finished(self, prompt: float, output: float) -> None:
        """One request finished with ``prompt`` prompt tokens and ``output`` output tokens (its lengths,
        observed beside its e2e latency)."""
        h = self.request_prompt_tokens
        h.counts[bisect_left(h.bounds, prompt)] += 1.0
        h.total += prompt
        h.count += 1.0
        h = self.request_generation_tokens
        h.counts[bisect_left(h.bounds, output)] += 1.0
        h.total += output
        h.count += 1.0

    def snapshot(self) -> dict[str, object]:
        """Copy of the cumulative values, for window deltas."""
        return {
            "prompt_tokens": self.prompt_tokens,
            "generation_tokens": self.generation_tokens,
            "prefix_queries": self.prefix_queries,
            "prefix_hits": self.prefix_hits,
            "preemptions": self.preemptions,
            "success": sum(self.success.values()) - self.success["abort"] - self.success["error"],
            "aborts": self.success["abort"] + self.success["error"],
            "ttft": list(self.ttft.counts),
            "itl": list(self.itl.counts),
            "tpot": list(self.tpot.counts),
            "ttft_sum": self.ttft.total,
            "ttft_count": self.ttft.count,
            "tpot_sum": self.tpot.total,
            "tpot_count": self.tpot.count,
            "e2e_count": self.e2e.count,
        }
