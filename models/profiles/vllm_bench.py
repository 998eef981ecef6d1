"""The engine's steps, read back from the result JSON of vLLM's serving benchmark against one replica.

``vllm bench serve --save-result --save-detailed`` (and ``benchmarks/benchmark_serving.py
--save-result``) saves, per request in sending order, ``input_lens``, ``output_lens``, ``ttfts``
(s), ``itls`` (s, the gaps between streamed chunks) and ``errors``, plus the run's
``request_rate`` and ``max_concurrency``. When each chunk carries one token, every token's time on
the client's clock is its send time + TTFT + the gaps before it, and tokens of one engine step
reach the client together: grouping every request's token times (within ``tolerance_s``) gives
the engine's steps, when each ended, and what each did.

Send times: ``start_times`` where the client saved them; otherwise a run at ``request_rate`` inf
sends ``max_concurrency`` requests at once and each next one when one finishes (vLLM's semaphore),
which the saved latencies replay exactly. A Poisson run without ``start_times`` cannot be placed in
time, and is refused.

What each step did (``Rows``): its decode sequences and their KV context (prompt + tokens so far);
its prefill (tokens, and the attention pairs each chunk forms at its place in its prompt), from vLLM
V1's scheduler (``max_num_batched_tokens`` per step, decodes first, then prompt chunks FCFS among
the requests sent before the step began, a waiting one starting only while fewer than
``max_num_seqs`` run: past it, as in an overloaded run of a rate sweep, the queue waits and
prefills nothing): a request whose first token
came at this step prefilled the rest of its prompt in it, an earlier one a chunk of what the budget
left. A step starts when the previous ended, or at the first send after an idle spell. Steps that
emit nothing (prompt chunks with no sequence decoding) fall inside the next step that does, whose
row then counts ``ceil(prefill / budget)`` steps. Prefix-cache hits are not in the file: the fit
assumes none (the benchmark's random prompts share no prefix).
"""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from autoscaler.errors import ProfileError
from models.profiles.jsonfile import read_object
from models.profiles.measured import Rows
from models.profiles.profile import prefill_pairs

DEFAULT_TOLERANCE_S = 0.001
"""Token times this close belong to one engine step (a step takes milliseconds; a streamed chunk's
delivery jitters by less)."""
DEFAULT_MAX_NUM_BATCHED_TOKENS = 8192
"""vLLM V1's default step token budget for online serving on data-centre GPUs."""
DEFAULT_MAX_NUM_SEQS = 256
"""vLLM's default ``--max-num-seqs`` on GPUs: most requests running (decoding or prefilling) at once."""


@dataclass(frozen=True)
class BenchRun:
    """The per-request fields of one result file (successful requests only), in sending order.

    Attributes:
        path: the file.
        start_s: send time of each request, s (the first at 0).
        input_tokens, output_tokens: request sizes, tokens.
        token_s: the time of each of its tokens, s, same clock as ``start_s``.
    """

    path: Path
    start_s: list[float]
    input_tokens: list[int]
    output_tokens: list[int]
    token_s: list[np.ndarray]


def _list(doc: dict, key: str, path: Path, n: int | None = None) -> list:
    v = doc.get(key)
    if not isinstance(v, list):
        raise ProfileError(f"{path}: '{key}' missing or not a list: save the run with --save-result --save-detailed")
    if n is not None and len(v) != n:
        raise ProfileError(f"{path}: '{key}' has {len(v)} entries, 'input_lens' {n}")
    return v


MAX_SECONDS = 1e6
"""Largest time a result may hold (a TTFT, a gap, the spread of send times), s: about 12 days."""
MAX_TOKENS = 10**7
"""Largest prompt or output a result may hold, tokens (beyond any served context length)."""


def _number(v: object, what: str, path: Path, minimum: float = 0.0, maximum: float = MAX_SECONDS) -> float:
    if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v) or not minimum <= v <= maximum:
        raise ProfileError(f"{path}: {what} must be a finite number in [{minimum:g}, {maximum:g}], got {v!r}")
    return float(v)


def _count(v: object, what: str, path: Path, minimum: int = 1) -> int:
    x = _number(v, what, path, minimum, MAX_TOKENS)
    if x != int(x):
        raise ProfileError(f"{path}: {what} must be a whole number, got {v!r}")
    return int(x)


def _replay_starts(latency_s: list[float], limit: int) -> list[float]:
    """Send times of a closed loop of ``limit`` clients: each request goes when a slot frees."""
    free: list[float] = [0.0] * min(limit, len(latency_s))
    heapq.heapify(free)
    starts = []
    for lat in latency_s:
        t = heapq.heappop(free)
        starts.append(t)
        heapq.heappush(free, t + lat)
    return starts


def load(path: Path) -> BenchRun:
    """Read one result file.

    Raises:
        ProfileError: unreadable, not JSON, a missing per-request list (saved without
            ``--save-detailed``), lists of different lengths, a bad value, chunks carrying more
            than one token, or a Poisson run without ``start_times``; one line naming the file and
            the field (and request).
    """
    doc = read_object(path, "benchmark result")
    inputs = _list(doc, "input_lens", path)
    n = len(inputs)
    outputs, ttfts, itls = (_list(doc, k, path, n) for k in ("output_lens", "ttfts", "itls"))
    errors = _list(doc, "errors", path, n) if "errors" in doc else [""] * n
    ok = [i for i in range(n) if not errors[i]]
    if not ok:
        raise ProfileError(f"{path}: no successful request")
    latency = []
    for i in range(n):
        if errors[i]:
            latency.append(0.0)
            continue
        gaps = itls[i]
        if not isinstance(gaps, list):
            raise ProfileError(f"{path}: itls[{i}] is not a list")
        out = _count(outputs[i], f"output_lens[{i}]", path)
        if len(gaps) != out - 1:
            raise ProfileError(f"{path}: request {i}: {len(gaps)} inter-token gaps for {out} output tokens: its "
                               "chunks carry several tokens, so its tokens' times are unknown")
        latency.append(_number(ttfts[i], f"ttfts[{i}]", path) + sum(_number(g, f"itls[{i}]", path) for g in gaps))
    if isinstance(doc.get("start_times"), list):
        raw = _list(doc, "start_times", path, n)
        starts = [_number(raw[i], f"start_times[{i}]", path, -math.inf, math.inf) for i in range(n)]
        if max(starts) - min(starts) > MAX_SECONDS:
            raise ProfileError(f"{path}: start_times span {max(starts) - min(starts):.3g} s, more than "
                               f"{MAX_SECONDS:g} s: not one benchmark run")
    else:
        rate = doc.get("request_rate", "inf")
        if rate not in ("inf", float("inf")):
            raise ProfileError(f"{path}: request_rate {rate} with no 'start_times': when each request was sent "
                               "is unknown; save the run with a client that records start_times, or run at "
                               "--request-rate inf with --max-concurrency N")
        conc = doc.get("max_concurrency")
        limit = n if conc is None else _count(conc, "max_concurrency", path)
        starts = _replay_starts(latency, limit)
    t0 = min(starts[i] for i in ok)
    token_s = [np.concatenate([[starts[i] - t0 + float(ttfts[i])], np.asarray(itls[i], float)]).cumsum() for i in ok]
    return BenchRun(path=path, start_s=[starts[i] - t0 for i in ok],
                    input_tokens=[_count(inputs[i], f"input_lens[{i}]", path) for i in ok],
                    output_tokens=[int(outputs[i]) for i in ok], token_s=token_s)


MAX_SPLIT_FRACTION = 0.02
"""Most decode tokens a grouping may miss (a decoding request with no token in a step) before the
tolerance is taken to be too tight for the client's delivery jitter."""


def _check_grouping(run: BenchRun, ends: list[float], decodes: list[int], tolerance_s: float) -> None:
    """Every request between its first and last token decodes in every step: if the groups miss
    many of those tokens, one step's tokens were spread over more than ``tolerance_s``.

    Raises:
        ProfileError: more than ``MAX_SPLIT_FRACTION`` of the expected decode tokens are missing.
    """
    first = np.sort([t[0] for t in run.token_s])
    last = np.sort([t[-1] for t in run.token_s])
    t = np.asarray(ends)
    expected = np.searchsorted(first, t, side="left") - np.searchsorted(last, t, side="left")
    missing = float(np.clip(expected - np.asarray(decodes), 0, None).sum())
    total = float(expected.sum())
    if total > 0 and missing / total > MAX_SPLIT_FRACTION:
        raise ProfileError(
            f"{run.path}: grouping token times within {tolerance_s * 1e3:g} ms leaves {missing / total:.0%} of the "
            "decoding requests without a token in a step: one step's tokens reach the client further apart "
            "than that; raise --tolerance")


def steps(run: BenchRun, max_num_batched_tokens: int = DEFAULT_MAX_NUM_BATCHED_TOKENS,
          tolerance_s: float = DEFAULT_TOLERANCE_S, max_num_seqs: int = DEFAULT_MAX_NUM_SEQS) -> Rows:
    """The engine steps of ``run`` (module doc), one row each."""
    n_req = len(run.start_s)
    times = np.concatenate(run.token_s)
    req = np.concatenate([np.full(len(t), r) for r, t in enumerate(run.token_s)])
    idx = np.concatenate([np.arange(len(t)) for t in run.token_s])
    order = np.argsort(times, kind="stable")
    times, req, idx = times[order], req[order], idx[order]
    cut = np.flatnonzero(np.diff(times) > tolerance_s) + 1
    groups = np.split(np.arange(len(times)), cut)
    ends = [float(times[g].max()) for g in groups]
    _check_grouping(run, ends, [int(np.sum(idx[g] > 0)) for g in groups], tolerance_s)
    send_order = sorted(range(n_req), key=lambda r: run.start_s[r])
    finish = [float(t[-1]) for t in run.token_s]
    remaining = list(run.input_tokens)
    budget = max_num_batched_tokens
    rows: list[tuple[float, int, int, int, int, float]] = []
    prev_end, sent = -math.inf, 0
    active: set[int] = set()  # sent and not finished
    prefilling: list[int] = []  # sent, first token not yet out, in sending order
    admitted = [False] * n_req
    started = [False] * n_req  # scheduled at least once: holds one of the max_num_seqs places
    for g, end in zip(groups, ends, strict=True):
        active = {r for r in active if finish[r] > prev_end}
        places = max_num_seqs - sum(started[r] for r in active)
        firsts = {int(req[i]) for i in g if idx[i] == 0}
        while sent < n_req and admitted[send_order[sent]]:
            sent += 1
        next_send = run.start_s[send_order[sent]] if sent < n_req else math.inf
        if active or next_send <= prev_end:  # busy: the step began as the last ended
            begin, cutoff = prev_end, prev_end - tolerance_s
        else:  # idle: it began at the next send
            begin = min(next_send, end)
            cutoff = begin + tolerance_s
        # Sent before the step began (a send within the tolerance of its start may have missed it),
        # and whatever prefilled in it (its first token came at its end), in sending order.
        joined = []
        for r in send_order[sent:]:
            if run.start_s[r] >= cutoff:
                break
            if not admitted[r]:
                joined.append(r)
        joined += [r for r in firsts if not admitted[r] and r not in joined]
        for r in joined:
            admitted[r] = True
            active.add(r)
        if joined:
            prefilling = sorted(prefilling + joined, key=lambda r: (run.start_s[r], r))
        dec = [i for i in g if idx[i] > 0]
        n = len(dec)
        ctx = int(sum(run.input_tokens[int(req[i])] + int(idx[i]) - 1 for i in dec))
        left, p, pairs = budget - n, 0, 0.0
        for r in prefilling:
            if not started[r] and r not in firsts and (left <= 0 or places <= 0):
                continue  # waits: the budget or the max_num_seqs places are taken
            if not started[r]:
                started[r], places = True, places - 1
            take = remaining[r] if r in firsts else max(0, min(remaining[r] - 1, left))
            pairs += prefill_pairs(run.input_tokens[r] - remaining[r], take)
            remaining[r] -= take
            left -= take
            p += take
        prefilling = [r for r in prefilling if r not in firsts]
        m = 1 if n > 0 else max(1, math.ceil(p / budget))
        if end > begin:
            rows.append((end - begin, m, p, n, ctx, pairs))
        prev_end = end
    arr = np.array(rows, dtype=float).reshape(-1, 6)
    return Rows(duration_s=arr[:, 0], steps=arr[:, 1], prefill_tokens=arr[:, 2], decode_seqs=arr[:, 3],
                ctx_tokens=arr[:, 4], prefill_pairs=arr[:, 5], unit="step")
