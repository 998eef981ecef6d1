"""One vLLM replica: continuous batching with chunked prefill, KV cache and preemption.

The model follows vLLM V1's scheduler: each engine step first gives every decoding sequence one
token, then fills the rest of the ``max_num_batched_tokens`` budget with prefill chunks, first of
requests already admitted, then of waiting requests admitted FCFS while ``max_num_seqs`` and the
KV cache allow. When the KV cache cannot grow, the most recently admitted request is preempted
(recompute: its KV is freed and it re-prefills prompt + generated tokens later).

Speed: a run of steps with no prefill work has a fixed batch, so its duration is integrated in
closed form (step time is affine in the decode context, which grows by ``n`` tokens per step) and
simulated as one event that ends at the next decode completion, KV limit, or arrival.

A prefill chunk's attention is costed by its position in the prompt (``models.profiles.prefill_pairs``: a chunk
late in a long prompt attends to everything before it).

KV accounting is in tokens: a request holds its whole (re)prefill target from admission, then one
more token per generated token. Admission and growth keep ``block_size`` tokens of slack per
running sequence, so block rounding can never take usage over capacity.
"""

from __future__ import annotations

import math
from bisect import bisect_left
from collections import deque
from collections.abc import Callable
from heapq import heappop, heappush
from typing import TYPE_CHECKING, ClassVar, Protocol

from autoscaler.simulator.metrics import ReplicaMetrics
from autoscaler.simulator.prefix_cache import PrefixCache
from autoscaler.workload.types import Request

if TYPE_CHECKING:
    from autoscaler.config import EngineConfig
    from models.profiles import PerformanceProfile

PROVISIONING, READY, DRAINING, GONE = "provisioning", "ready", "draining", "gone"

COMPLETED, REJECTED, FAILED = "completed", "rejected", "failed"
SHED = "rejected_admission"  # the gateway answered HTTP 429


class SimRequest:
    """Simulation state of one attempt at a request (times in seconds, sizes in tokens).

    ``attempt`` counts from 0 (a client's retry is a new ``SimRequest`` for the same ``req``);
    ``sent_s`` is when this attempt was sent (the user's clock starts at ``req.arrival_s``);
    ``received_s`` when a replica took it in (None before): vLLM's TTFT and e2e latency start there,
    at the engine frontend's arrival (vLLM 0.33 ``vllm/v1/metrics/stats.py``,
    ``IterationStats.update_from_output``: ``_time_since(req_stats.arrival_time)``), so time held
    at the gateway is in what the user sees, never in what the pod exports. ``queued_s`` is when it
    entered the gateway's queue while it waits there (else
    None), ``waited_s`` how long it waited there and ``dispatched_s`` when it left it for a replica
    (None: it never queued there, or the gateway's admitter rejected it as it left),
    ``deadline_s`` when a deferred attempt is shed, ``continuing`` whether it continued a workflow in
    progress when it reached the gateway.
    """

    __slots__ = (
        "admit_seq",
        "attempt",
        "computed",
        "continuing",
        "ctx_at_entry",
        "d_entry",
        "deadline_s",
        "dispatched_s",
        "epoch",
        "generated",
        "gw_rid",
        "gw_tokens",
        "hit_tokens",
        "prefill_target",
        "prefilled",
        "queued_s",
        "received_s",
        "replica",
        "req",
        "sent_s",
        "status",
        "t_finish",
        "t_first",
        "t_first_decode_step",
        "waited_s",
    )

    def __init__(self, req: Request, attempt: int = 0, sent_s: float | None = None) -> None:
        self.req = req
        self.attempt = attempt
        self.sent_s = req.arrival_s if sent_s is None else sent_s
        self.queued_s: float | None = None
        self.received_s: float | None = None
        self.waited_s: float | None = None
        self.dispatched_s: float | None = None
        self.deadline_s: float | None = None
        self.continuing = False
        self.prefill_target = req.input_tokens
        self.prefilled = 0
        self.hit_tokens = 0
        self.computed = 0
        self.generated = 0
        self.d_entry = 0
        self.ctx_at_entry = 0
        self.epoch = 0
        self.admit_seq = 0
        self.t_first: float | None = None
        self.gw_tokens = 0  # tokens the gateway's in-flight counter holds for it (FleetSimulator._charge)
        self.gw_rid = 0  # ... on the replica of this rid
        self.t_first_decode_step: float | None = None
        self.t_finish: float | None = None
        self.status: str | None = None
        self.replica: Replica | None = None


class Replica:
    """A simulated vLLM engine serving one variant.

    Args:
        rid: replica index, unique in the fleet.
        service, variant: names from the fleet file.
        profile: step-time model for (model, GPU).
        engine: scheduler settings.
        kv_cache_tokens: KV-cache capacity, tokens.
        hash_block_tokens: tokens per prefix-hash block of the workload.
        sim: the owning fleet simulator (for events and completions).
        created_s, ready_s: provisioning start and ready times, seconds.
        scheduled_s (attribute): when it was placed on a node, seconds (after ``created_s`` when it
            stayed Pending for want of a GPU); ``removed_s``: when a scale-down removed it (None: it
            was not, or it crashed).
    """

    role: ClassVar[str] = ""
    """The pod's ``llm-d.ai/role`` label: "" for an aggregated replica (no label); ``disagg``'s subclasses
    set ``prefill`` and ``decode``."""
    inbound = 0
    """Requests the router sent here whose prompt a prefill replica is still prefilling (``disagg``; the
    decode pod's sidecar holds them): the router counts them in this replica's load. 0 outside a decode
    pool."""

    def __init__(
        self,
        rid: int,
        service: str,
        variant: str,
        profile: PerformanceProfile,
        engine: EngineConfig,
        kv_cache_tokens: int,
        hash_block_tokens: int,
        sim: EventSink,
        created_s: float,
        ready_s: float,
        price_per_hour: float,
        warm_start: bool,
    ) -> None:
        self.rid = rid
        self.name = f"{service}-{variant}-{rid}"
        self.service = service
        self.variant = variant
        self.profile = profile
        self.max_seqs = engine.max_num_seqs
        self.max_tokens = engine.max_num_batched_tokens
        self.block = engine.block_size
        self.kv_cap = kv_cache_tokens
        self.cache = PrefixCache(kv_cache_tokens, hash_block_tokens)
        self.sim = sim
        self.created_s = created_s
        self.ready_s = ready_s
        self.scheduled_s = created_s  # when it got a node (later than created_s while it was Pending)
        self.removed_s: float | None = None  # when a scale-down removed it (it may drain after)
        self._cordoned = False  # taken out of routing: gets no new request, serves what it holds
        # The fleet's least-outstanding router (FleetSimulator._route) keeps the replicas in a heap by load:
        # a replica whose outstanding count changes lists itself in ``route_marks`` (once until the router
        # reads it) and a change of ``cordoned`` calls ``on_cordon``. None: no such router.
        self.route_marks: list[Replica] | None = None
        self.on_cordon: Callable[[], None] | None = None
        self._marked = False
        self.route_seq = 0  # the router's order: when it became ready (the position in the ready list)
        self.route_ver = 0  # the router's version of its heap entry
        self.route_epoch = -1  # the router's heap this replica is in
        self.gone_s: float | None = None
        self.price_per_hour = price_per_hour
        self.warm_start = warm_start
        self.state = PROVISIONING
        self.metrics = ReplicaMetrics()

        self.waiting: deque[SimRequest] = deque()
        self.prefilling: list[SimRequest] = []
        self._decode_heap: list[tuple[int, int, int, SimRequest]] = []
        self.n_dec = 0
        self.ctx_dec = 0
        self.kv_pref = 0
        self.D = 0
        self._admit_counter = 0
        self._seq = 0

        self.busy = False
        self._aborted: list[SimRequest] = []  # in the batch when their client gave up; removed at a step boundary
        self._version = 0
        # In-flight step: (start_s, k_steps, base_s, g, n, ctx0, chunks) — chunks None for decode runs.
        self._step: tuple[float, int, float, float, int, int, list[tuple[SimRequest, int]] | None] | None = None
        self.g = profile.seconds_per_ctx_token
        # the profile's step-time terms, read at every step (``_step_time``)
        self._t0 = profile.step_overhead_s
        self._a = profile.prefill_s_per_token
        self._ap = profile.attention_tokens_per_pair
        self._b = profile.decode_s_per_seq
        self._w = profile.weight_read_s  # > 0: the roofline form (``PerformanceProfile``)
        self._push_step = sim.push_step
        self._on_complete = sim.on_complete
        self._on_first_token = sim.on_first_token
        self._decode_base: dict[int, float] = {}  # n -> step time of n decodes at no context, seconds

    # ------------------------------------------------------------------ observation
    @property
    def cordoned(self) -> bool:
        """Taken out of routing: gets no new request, serves what it holds."""
        return self._cordoned

    @cordoned.setter
    def cordoned(self, value: bool) -> None:
        self._cordoned = value
        if self.on_cordon is not None:
            self.on_cordon()

    def _load_changed(self) -> None:
        """Its outstanding count changed: tell the router (``route_marks``)."""
        marks = self.route_marks
        if marks is not None and not self._marked:
            self._marked = True
            marks.append(self)

    @property
    def holds_kv(self) -> bool:
        """It holds KV for a prefill/decode hand-over (``disagg``), so a draining one stays: never here."""
        return False

    @property
    def outstanding(self) -> int:
        """Requests on this replica (waiting + running)."""
        return len(self.waiting) + len(self.prefilling) + self.n_dec

    @property
    def n_running(self) -> int:
        return len(self.prefilling) + self.n_dec

    @property
    def kv_used(self) -> int:
        """KV tokens held by running requests."""
        return self.kv_pref + self.ctx_dec

    def refresh_gauges(self) -> None:
        """Update the gauges (running, waiting, KV usage) in ``metrics``: every reader (the simulated scrape,
        the exposition) calls this first, so a step's start no longer sets them."""
        m = self.metrics
        m.running = self.n_running
        m.waiting = len(self.waiting)
        m.kv_usage = self.kv_used / self.kv_cap

    def replica_seconds(self, now: float) -> float:
        """Seconds this replica has been paid for (provisioning included) up to ``now``."""
        end = self.gone_s if self.gone_s is not None else now
        return max(0.0, end - self.created_s)

    # ------------------------------------------------------------------ work intake
    def enqueue(self, sr: SimRequest, now: float) -> None:
        """Accept a routed request into the waiting queue."""
        sr.replica = self
        sr.received_s = now
        was_empty = not self.waiting
        self.waiting.append(sr)
        if self.route_marks is not None and not self._marked:  # _load_changed spelled out: per request
            self._marked = True
            self.route_marks.append(self)
        if not self.busy:
            self._schedule(now)
        elif was_empty and self._step is not None and self._step[6] is None:
            self._interrupt(now)

    def abort(self, sr: SimRequest, now: float) -> None:
        """The client of ``sr`` gave up (vLLM aborts the request, ``finished_reason="abort"``).

        A queued request leaves the queue at once; one in the batch leaves at the next step boundary
        (a decode run in flight is cut there), freeing its KV cache. The caller ends ``sr``.
        """
        self.metrics.success["abort"] += 1
        if sr in self.waiting:
            self.waiting.remove(sr)
            self._load_changed()
            if not self.busy:
                self._schedule(now)
                if not self.busy and self.state == DRAINING and not self.waiting:
                    self.sim.on_drained(self, now)
            return
        self._aborted.append(sr)
        if self.busy and self._step is not None and self._step[6] is None:
            self._interrupt(now)

    def _purge_aborted(self) -> None:
        """Take the requests whose clients gave up out of the batch (at a step boundary)."""
        if self._aborted:
            self._load_changed()
        for sr in self._aborted:
            if sr in self.prefilling:
                self.prefilling.remove(sr)
                self.kv_pref -= sr.prefill_target
            else:  # decoding: its heap entry is skipped from now on (its status is set)
                self.n_dec -= 1
                self.ctx_dec -= sr.ctx_at_entry + (self.D - sr.d_entry)
        self._aborted.clear()

    def fail_all(self, now: float) -> list[SimRequest]:
        """Crash: every request on the replica fails; KV and prefix cache are lost."""
        lost = list(self.waiting) + self.prefilling
        lost += [e[3] for e in self._decode_heap if e[1] == e[3].epoch and e[3].status is None]
        self._load_changed()
        self.waiting.clear()
        self.prefilling.clear()
        self._decode_heap.clear()
        self._aborted.clear()
        self.n_dec = self.ctx_dec = self.kv_pref = 0
        self.busy = False
        self._step = None
        self._version += 1
        self.cache = PrefixCache(self.kv_cap, self.cache.block_tokens)
        return lost

    # ------------------------------------------------------------------ scheduling
    def _slack(self, extra_seqs: int = 0) -> int:
        return (self.n_running + extra_seqs) * self.block

    def _admit(self, budget: int, growth: int, chunks: list[tuple[SimRequest, int]]) -> None:
        """Admit waiting requests FCFS; ``growth`` KV tokens are reserved for this step's decodes."""
        # n_running, kv_used and _slack spelled out: this runs at every engine step
        waiting, prefilling, block = self.waiting, self.prefilling, self.block
        while waiting and budget > 0 and len(prefilling) + self.n_dec < self.max_seqs:
            sr = waiting[0]
            if (self.kv_pref + self.ctx_dec + growth + sr.prefill_target
                    + (len(prefilling) + self.n_dec + 1) * block > self.kv_cap):
                break
            waiting.popleft()
            if sr.generated == 0:
                hit = 0
                if sr.req.hash_ids:
                    hit = self.cache.lookup_and_insert(sr.req.hash_ids, sr.req.input_tokens)
                m = self.metrics
                m.prefix_queries += sr.req.input_tokens
                m.prefix_hits += hit
                m.prompt_tokens += sr.req.input_tokens
                sr.hit_tokens = hit
                sr.prefilled = hit
            else:
                sr.prefilled = 0
            sr.computed = sr.prefill_target - sr.prefilled  # what this admission's prefill computes
            self._admit_counter += 1
            sr.admit_seq = self._admit_counter
            self.kv_pref += sr.prefill_target
            self.prefilling.append(sr)
            chunk = min(sr.prefill_target - sr.prefilled, budget)
            chunks.append((sr, chunk))
            budget -= chunk

    def _schedule(self, now: float) -> None:
        """Plan the next engine step (or decode run) starting at ``now``."""
        if self.state == GONE:
            return
        if self._aborted:
            self._purge_aborted()
        prefilling = self.prefilling
        n = self.n_dec
        while n and (self.kv_pref + self.ctx_dec + n + (len(prefilling) + n) * self.block > self.kv_cap):
            self._preempt_newest()
            n = self.n_dec
        ctx = self.ctx_dec
        if prefilling or self.waiting:  # else a decode run: no chunk to plan (most steps)
            budget = self.max_tokens - n
            chunks: list[tuple[SimRequest, int]] = []
            for sr in prefilling:
                if budget <= 0:
                    break
                chunk = sr.prefill_target - sr.prefilled
                if chunk > budget:
                    chunk = budget
                chunks.append((sr, chunk))
                budget -= chunk
            if budget > 0 and self.waiting:
                self._admit(budget, n, chunks)
            if chunks:
                if len(chunks) == 1:  # most steps: sum() of one item is that item, the same bits
                    sr, p = chunks[0]
                    pairs = p * sr.prefilled + p * (p + 1) / 2
                else:
                    p = sum([c for _, c in chunks])
                    # prefill_pairs(sr.prefilled, c) and _step_time spelled out, the same arithmetic: per step
                    pairs = sum([c * sr.prefilled + c * (c + 1) / 2 for sr, c in chunks])
                if self._w:
                    dur = self._step_time(p, n, ctx, pairs)
                else:
                    dur = 0.0 if p == 0 and n == 0 else \
                        self._t0 + self._a * (p + self._ap * pairs) + self._b * n + self.g * ctx
                self._start(now, 1, dur, 0.0, n, ctx, chunks, dur)
                return
        if n == 0:
            self.busy = False
            self._step = None
            self.refresh_gauges()
            return
        heap = self._decode_heap  # _top_decode spelled out
        while heap and (heap[0][3].epoch != heap[0][1] or heap[0][3].status is not None):
            heappop(heap)
        room = self.kv_cap - (self.kv_pref + ctx) - (len(prefilling) + n) * self.block
        k = heap[0][0] - self.D
        if room // n < k:
            k = room // n
        if k < 1:
            k = 1
        base = self._decode_base.get(n)
        if base is None:
            base = self._decode_base[n] = self._step_time(0, n, 0, 0)
        g = self.g
        # _run_time spelled out
        self._start(now, k, base, g, n, ctx, None, k * (base + g * ctx) + g * n * k * (k - 1) / 2)

    def _step_time(self, p: int, n: int, ctx: int, pairs: float) -> float:
        """``profile.step_time(p, n, ctx, pairs)``, seconds, with the same arithmetic in the same order
        (so the same bits) and without its argument checks: the scheduler's counts are >= 0 by
        construction, and this runs at every step."""
        if p == 0 and n == 0:
            return 0.0
        if self._w:
            a = self._a
            return self._t0 + max(self._w, a * p) + a * self._ap * pairs + self._b * n + self.g * ctx
        return self._t0 + self._a * (p + self._ap * pairs) + self._b * n + self.g * ctx

    def _start(
        self,
        now: float,
        k: int,
        base: float,
        g: float,
        n: int,
        ctx0: int,
        chunks: list[tuple[SimRequest, int]] | None,
        dur: float,
    ) -> None:
        # No gauge is set here: every reader (the scrape, the exposition) calls ``refresh_gauges`` first,
        # so a value set at each step was never read (issue 33: ~20 of ~1,590 bytecodes a request at x100).
        self.busy = True
        self._version += 1
        self._step = (now, k, base, g, n, ctx0, chunks)
        self._push_step(now + dur, self, self._version)

    def _interrupt(self, now: float) -> None:
        """An arrival during a decode run: end the run at the step boundary in flight."""
        assert self._step is not None
        t0, k, base, g, n, ctx0, _ = self._step
        done = _steps_by(now - t0, base, g, n, ctx0)
        if done >= k:
            return
        self._version += 1
        self._step = (t0, done, base, g, n, ctx0, None)
        # _run_time spelled out
        self._push_step(t0 + (done * (base + g * ctx0) + g * n * done * (done - 1) / 2), self, self._version)

    def _preempt_newest(self) -> None:
        running = [e[3] for e in self._decode_heap if e[1] == e[3].epoch and e[3].status is None]
        running += self.prefilling
        victim = max(running, key=lambda s: s.admit_seq)
        if victim in self.prefilling:
            self.prefilling.remove(victim)
            self.kv_pref -= victim.prefill_target
        else:
            ctx = victim.ctx_at_entry + (self.D - victim.d_entry)
            self.n_dec -= 1
            self.ctx_dec -= ctx
            victim.generated += self.D - victim.d_entry
            victim.epoch += 1
        victim.prefill_target = victim.req.input_tokens + victim.generated
        victim.prefilled = 0
        self.metrics.preemptions += 1
        self.waiting.appendleft(victim)

    # ------------------------------------------------------------------ step completion
    def on_step_end(self, now: float, version: int) -> None:
        """Apply the finished step (or decode run) and plan the next one."""
        step_ = self._step
        if version != self._version or step_ is None:
            return
        t0, k, _base, _g, n, _ctx0, chunks = step_
        m = self.metrics
        # Histogram.observe spelled out here and below (same arithmetic): this runs at every step
        nk = n * k
        if n:
            self.D += k
            self.ctx_dec += nk
            m.generation_tokens += nk
            h = m.itl
            v = (now - t0) / k
            h.counts[bisect_left(h.bounds, v)] += nk
            h.total += v * nk
            h.count += nk
        if not chunks:  # k decode steps of n tokens each
            h = m.iteration_tokens
            h.counts[bisect_left(h.bounds, n)] += k
            h.total += nk
            h.count += k
        else:
            # vLLM counts a step's prompt tokens when a prefill ends, all it computed, plus its first
            # token (vLLM 0.33 ``vllm/v1/metrics/loggers.py``: ``prompt_token_stats.computed +
            # num_generation_tokens``), so a step carrying only a middle chunk counts its decodes alone.
            step = n
            for sr, chunk in chunks:
                sr.prefilled += chunk
                if sr.prefilled >= sr.prefill_target and sr.status is None:  # an aborted one waits for the purge
                    step += sr.computed + 1
                    self._prefill_done(sr, now)
            h = m.iteration_tokens
            h.counts[bisect_left(h.bounds, step)] += 1.0
            h.total += step * 1.0
            h.count += 1.0
        heap = self._decode_heap
        d_now = self.D
        while heap:
            top = heap[0]
            sr = top[3]
            if sr.epoch != top[1] or sr.status is not None:  # stale (preempted) or aborted: skipped
                heappop(heap)
                continue
            if top[0] > d_now:
                break
            heappop(heap)
            self.n_dec -= 1
            self.ctx_dec -= sr.ctx_at_entry + (d_now - sr.d_entry)
            req = sr.req
            out = sr.generated = req.output_tokens
            # _complete spelled out (the same arithmetic): per request
            h = m.e2e
            received = sr.received_s
            v = now - (now if received is None else received)
            h.counts[bisect_left(h.bounds, v)] += 1.0
            h.total += v  # v * 1.0 is v (a float): the same bits
            h.count += 1.0
            m.finished(req.input_tokens, out)
            t_first = sr.t_first
            if t_first is not None:
                v = (now - t_first) / (out - 1) if out > 1 else 0.0
                h = m.tpot
                h.counts[bisect_left(h.bounds, v)] += 1.0
                h.total += v
                h.count += 1.0
            m.success["stop"] += 1
            if self.route_marks is not None and not self._marked:
                self._marked = True
                self.route_marks.append(self)
            self._on_complete(sr, now)
        self.busy = False
        self._step = None
        self._schedule(now)
        if not self.busy and self.state == DRAINING and not self.waiting:
            self.sim.on_drained(self, now)

    def _complete(self, sr: SimRequest, now: float) -> None:
        m = self.metrics
        h = m.e2e
        received = sr.received_s
        v = now - (now if received is None else received)  # from when the engine took it in (``_received``)
        h.counts[bisect_left(h.bounds, v)] += 1.0
        h.total += v
        h.count += 1.0
        m.finished(sr.req.input_tokens, sr.req.output_tokens)
        if sr.t_first is not None:  # vLLM records 0 for a one-token request (``vllm/v1/metrics/stats.py``)
            out = sr.req.output_tokens
            v = (now - sr.t_first) / (out - 1) if out > 1 else 0.0
            h = m.tpot
            h.counts[bisect_left(h.bounds, v)] += 1.0
            h.total += v
            h.count += 1.0
        m.success["stop"] += 1
        if self.route_marks is not None and not self._marked:  # _load_changed spelled out: per request
            self._marked = True
            self.route_marks.append(self)
        self._on_complete(sr, now)

    @staticmethod
    def _received(sr: SimRequest, now: float) -> float:
        """When the engine took ``sr`` in (``SimRequest``), seconds."""
        return now if sr.received_s is None else sr.received_s

    def _prefill_done(self, sr: SimRequest, now: float) -> None:
        self.prefilling.remove(sr)
        self.kv_pref -= sr.prefill_target
        sr.generated += 1
        m = self.metrics
        m.generation_tokens += 1
        if sr.t_first is None:
            sr.t_first = now
            received = sr.received_s
            v = now - (now if received is None else received)  # _received and Histogram.observe spelled out
            h = m.ttft
            h.counts[bisect_left(h.bounds, v)] += 1.0
            h.total += v
            h.count += 1.0
            self._on_first_token(sr, now)
        out = sr.req.output_tokens
        if sr.generated >= out:
            self._complete(sr, now)
            return
        sr.d_entry = d_now = self.D
        target = sr.ctx_at_entry = sr.prefill_target
        self.n_dec += 1
        self.ctx_dec += target
        self._seq += 1
        heappush(self._decode_heap, (d_now + out - sr.generated, sr.epoch, self._seq, sr))


class EventSink(Protocol):
    """What a replica needs from its simulator (implemented by ``FleetSimulator``)."""

    def push_step(self, t: float, replica: Replica, version: int) -> None:
        """Schedule ``replica.on_step_end(t, version)``."""

    def on_complete(self, sr: SimRequest, now: float) -> None:
        """A request produced its last token at ``now``."""

    def on_first_token(self, sr: SimRequest, now: float) -> None:
        """A request produced its first token at ``now`` (its first prefill ended)."""

    def on_drained(self, replica: Replica, now: float) -> None:
        """A draining replica has finished its last request."""


def _run_time(k: int, base: float, g: float, n: int, ctx0: int) -> float:
    """Seconds for ``k`` decode steps of ``n`` sequences starting at context ``ctx0``.

    Step i (0-based) takes ``base + g * (ctx0 + n*i)``; summed: ``k*(base + g*ctx0) + g*n*k*(k-1)/2``.
    """
    return k * (base + g * ctx0) + g * n * k * (k - 1) / 2


def _steps_by(elapsed: float, base: float, g: float, n: int, ctx0: int) -> int:
    """Smallest k >= 1 with ``_run_time(k) >= elapsed``: the step in flight at ``elapsed`` ends at k."""
    a = g * n / 2
    b = base + g * ctx0 - a
    if a > 0:
        k = math.ceil((-b + math.sqrt(b * b + 4 * a * (0.0 if elapsed < 0.0 else elapsed))) / (2 * a))
    else:
        k = math.ceil((0.0 if elapsed < 0.0 else elapsed) / b) if b > 0 else 1
    if k < 1:
        k = 1
    # _run_time(k) spelled out (the same arithmetic): this runs at every arrival that cuts a decode run
    c = base + g * ctx0
    gn = g * n
    while k > 1 and (k - 1) * c + gn * (k - 1) * (k - 2) / 2 >= elapsed:
        k -= 1
    while k * c + gn * k * (k - 1) / 2 < elapsed:
        k += 1
    return k
