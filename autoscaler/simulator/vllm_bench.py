"""vLLM's serving benchmark (``vllm bench serve --save-result --save-detailed``) run against one
simulated replica: the result JSON a real run writes, from a profile known in advance.

``autoscaler profile fit --bench`` reads such files; a run here is what its tests fit, so that the
coefficients it recovers can be compared with the ones the replica stepped at.

The client follows ``vllm/benchmarks/serve.py``: requests are sent in order, at a Poisson rate
(``request_rate``) or all at once (``inf``), at most ``max_concurrency`` in flight when given; each
streams one chunk per token, so ``itls`` holds ``output_len - 1`` gaps. ``start_times`` are the
send times on the client's clock (seconds, the first at 0), as vLLM-derived clients that save them
write; ``drop_start_times`` leaves them out, as vLLM's own client does.
"""

from __future__ import annotations

import heapq
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from autoscaler.config import EngineConfig
from autoscaler.simulator.engine import READY, Replica, SimRequest, _run_time
from autoscaler.workload.types import Request
from models.profiles import PerformanceProfile


@dataclass
class _Sink:
    """The event queue and token log of one benchmark run."""

    events: list[tuple[float, int, int]] = field(default_factory=list)
    done: list[SimRequest] = field(default_factory=list)
    tokens: dict[int, list[float]] = field(default_factory=dict)
    seq: int = 0

    def push_step(self, t: float, replica: Replica, version: int) -> None:
        self.seq += 1
        heapq.heappush(self.events, (t, self.seq, version))

    def on_complete(self, sr: SimRequest, now: float) -> None:
        sr.t_finish = now
        self.done.append(sr)

    def on_first_token(self, sr: SimRequest, now: float) -> None:
        """A benchmark has no gateway to tell."""

    def on_drained(self, replica: Replica, now: float) -> None:
        """A benchmark's replica never drains."""


class _Recording(Replica):
    """A replica that logs every decode token's time per request (a decode run of ``k`` steps
    emits one token per sequence at each of its step boundaries)."""

    def on_step_end(self, now: float, version: int) -> None:
        if version == self._version and self._step is not None:
            t0, k, base, g, n, ctx0, _ = self._step
            if n:
                times = [t0 + _run_time(i, base, g, n, ctx0) for i in range(1, k + 1)]  # as the step events
                sink = self.sim
                assert isinstance(sink, _Sink)
                for e in self._decode_heap:
                    sr = e[3]
                    if e[1] == sr.epoch and sr.status is None:
                        sink.tokens.setdefault(sr.req.rid, []).extend(times)
        super().on_step_end(now, version)


def run(profile: PerformanceProfile, sizes: Sequence[tuple[int, int]], *, request_rate: float = math.inf,
        max_concurrency: int | None = None, seed: int = 0, engine: EngineConfig | None = None,
        kv_cache_tokens: int = 1_000_000, drop_start_times: bool = False,
        jitter_s: float = 0.0) -> dict[str, object]:
    """The result JSON of one benchmark run.

    Args:
        profile: the replica's step-time model.
        sizes: (input tokens, output tokens) per request, in sending order (each >= 1).
        request_rate: requests/s of the Poisson process; ``math.inf`` sends all at once.
        max_concurrency: most requests in flight (None: no bound).
        seed: seed of the inter-arrival draws.
        engine: scheduler settings (vLLM defaults when None).
        kv_cache_tokens: the replica's KV pool, tokens (large by default: no preemption).
        drop_start_times: leave ``start_times`` out, as vLLM's own client does.
        jitter_s: mean of the exponential delay each streamed chunk takes to reach the client, s
            (0: it arrives as its step ends); a stream's chunks stay in order.

    Returns:
        The dict ``vllm bench serve`` saves (the keys ``profile fit`` reads, and its summary ones).

    Raises:
        ValueError: no requests, a size < 1, a rate <= 0, a concurrency < 1 or a jitter < 0.
    """
    if not sizes or any(i < 1 or o < 1 for i, o in sizes):
        raise ValueError("a benchmark needs requests of at least 1 input and 1 output token")
    if jitter_s < 0:
        raise ValueError(f"jitter_s must be >= 0, got {jitter_s}")
    if not request_rate > 0 or (max_concurrency is not None and max_concurrency < 1):
        raise ValueError(f"request_rate must be > 0 and max_concurrency >= 1, got {request_rate}, {max_concurrency}")
    rng = np.random.default_rng(seed)
    gaps = rng.exponential(1.0 / request_rate, len(sizes)) if math.isfinite(request_rate) else np.zeros(len(sizes))
    release = np.cumsum(gaps) - gaps[0]
    sink = _Sink()
    replica = _Recording(0, "bench", "bench", profile, engine or EngineConfig(), kv_cache_tokens, 16, sink,
                         0.0, 0.0, 0.0, False)
    replica.state = READY
    requests = [SimRequest(Request(float(release[i]), i_tok, o_tok, rid=i)) for i, (i_tok, o_tok) in enumerate(sizes)]
    limit = max_concurrency or len(requests)
    nxt, now = 0, 0.0
    free = [0.0] * min(limit, len(requests))  # min-heap: when each idle client slot may send
    while len(sink.done) < len(requests):
        t_send = max(requests[nxt].req.arrival_s, free[0]) if nxt < len(requests) and free else math.inf
        if sink.events and sink.events[0][0] <= t_send:
            now, _, version = heapq.heappop(sink.events)
            finished = len(sink.done)
            replica.on_step_end(now, version)
            for _ in range(len(sink.done) - finished):
                heapq.heappush(free, now)
            continue
        now = t_send
        batch = []
        while nxt < len(requests) and free and max(requests[nxt].req.arrival_s, free[0]) <= now:
            heapq.heappop(free)
            requests[nxt].sent_s = now
            batch.append(requests[nxt])
            nxt += 1
        if not replica.busy:  # sent together to an idle engine: its next step plans for them all
            for sr in batch[:-1]:
                sr.replica = replica
                replica.waiting.append(sr)
            batch = batch[-1:]
        for sr in batch:
            replica.enqueue(sr, now)
    for sr in requests:
        assert sr.t_first is not None and sr.t_finish is not None
    token_times = [np.maximum.accumulate(np.array([r.t_first or 0.0, *sink.tokens.get(r.req.rid, [])])
                                         + (rng.exponential(jitter_s, r.req.output_tokens) if jitter_s else 0.0))
                   for r in requests]
    duration = max(r.t_finish or 0.0 for r in requests)
    result: dict[str, object] = {
        "backend": "vllm", "model_id": profile.model, "num_prompts": len(requests),
        "request_rate": request_rate if math.isfinite(request_rate) else "inf", "burstiness": 1.0,
        "max_concurrency": max_concurrency, "duration": duration, "completed": len(requests), "failed": 0,
        "total_input_tokens": sum(i for i, _ in sizes), "total_output_tokens": sum(o for _, o in sizes),
        "input_lens": [i for i, _ in sizes], "output_lens": [o for _, o in sizes],
        "ttfts": [float(t[0]) - r.sent_s for t, r in zip(token_times, requests, strict=True)],
        "itls": [list(np.diff(t).tolist()) for t in token_times],
        "generated_texts": [""] * len(requests), "errors": [""] * len(requests),
    }
    if not drop_start_times:
        result["start_times"] = [r.sent_s for r in requests]
    return result


def write(path: Path, result: dict[str, object]) -> None:
    """Write ``result`` as ``vllm bench serve --save-result`` does (one JSON object)."""
    path.write_text(json.dumps(result), encoding="utf-8")
