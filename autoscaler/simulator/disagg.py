"""Prefill/decode disaggregation: the prefill and decode replicas of a service's P/D pools, and the
rules for when a request is prefilled remotely: llm-d's (``remote_prefill``, the default) and NVIDIA
Dynamo's conditional disaggregation (``dynamo_remote_prefill``, ``Roles.router: dynamo``).

The hand-over follows vLLM's ``NixlConnector`` under llm-d's routing sidecar (llm-d-router
v0.10.0 ``docs/disaggregation.md``, "P/D Sequence"; vLLM ``vllm/distributed/kv_transfer/kv_connector/v1/
nixl_connector.py`` and ``vllm/v1/core/sched/scheduler.py``):

1. The endpoint picker chooses a decode replica, then (``remote_prefill``) whether a prefill replica
   prefills the prompt. The decode pod's sidecar sends the prompt to the prefill replica with
   ``max_tokens=1``.
2. The prefill replica (``PrefillReplica``) prefills it as any request (chunked, its own prefix cache),
   samples one token (vLLM ends the request ``length``) and keeps the prompt's KV blocks, pinned for the
   decode replica to read (``request_finished`` delays their free).
3. The sidecar then sends the request to its decode replica (``DecodeReplica``); the decode replica's
   engine clock (TTFT, e2e) starts there. Its scheduler admits it FCFS as any request, reserving KV
   for the whole prompt, and reads from the prefill replica the blocks its own prefix cache lacks
   (``get_num_new_matched_tokens``): the request waits (``WAITING_FOR_REMOTE_KVS``, counted waiting)
   ``KVTransfer.seconds`` of those tokens (slowed inside a ``simulator.link_slowdowns`` window:
   ``FleetSimulator.transfer_seconds``). When the read ends, the prefill replica frees its blocks and
   the decode replica computes the prompt's last token itself (``_update_waiting_for_remote_kv``: the
   computed tokens are the prompt's less one), which samples the user's first token, then decodes.

So the user's TTFT holds the prefill, the read, the fixed hand-over latency and the decode replica's
one-token step; the token the prefill replica sampled is discarded by the sidecar (vLLM PR #51919, open
in 2026-08, proposes sending it on instead).

Not modelled: a read failing (the prefill replica crashing during it does not fail it), vLLM's timeout
freeing unread blocks (``VLLM_NIXL_ABORT_REQUEST_TIMEOUT``), TP-rank pairing of heterogeneous TP
degrees (a transfer uses the link whole).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from autoscaler.simulator.engine import DRAINING, EventSink, Replica, SimRequest

if TYPE_CHECKING:
    from autoscaler.config import EngineConfig, KVTransfer
    from models.profiles import PerformanceProfile

PREFILL, DECODE = "prefill", "decode"
"""Values of the ``llm-d.ai/role`` pod label (llm-d-router v0.10.0
``pkg/epp/framework/plugins/scheduling/filter/bylabel/roles.go``: ``RoleLabel``, ``RolePrefill``,
``RoleDecode``); an aggregated replica has no role label (``Replica.role`` ""), which llm-d's decode
filter accepts and its prefill filter does not."""

AWAITING, RECEIVING, LOADED = 0, 1, 2  # a remote-prefilled request on its decode replica (DecodeReplica)


def remote_prefill(input_tokens: int, cached_tokens: int, threshold: int) -> bool:
    """Whether llm-d prefills a request on a prefill replica: llm-d-router v0.10.0
    ``prefix-based-pd-decider`` (``pkg/epp/framework/plugins/scheduling/profilehandler/disagg/
    prefix_based_pd_decider.go``, ``disaggregate``), run on the decode replica already chosen.

    Args:
        input_tokens: the prompt, tokens (the plugin estimates it as the prompt's characters / 4; the
            simulator has the count).
        cached_tokens: the prompt's leading tokens the decode replica's prefix cache holds (its matched
            blocks x block size; >= 0).
        threshold: ``nonCachedTokens`` (>= 0); 0 turns remote prefill off.

    Returns:
        True when ``threshold > 0``, the prompt is at least ``threshold`` tokens and its part the decode
        replica has not cached is at least ``threshold`` tokens.
    """
    if threshold == 0 or input_tokens < threshold:
        return False
    return input_tokens - cached_tokens >= threshold


def dynamo_remote_prefill(input_tokens: int, cached_tokens: int, queue_size: int, max_local_prefill_length: int,
                          max_prefill_queue_size: int) -> bool:
    """Whether NVIDIA Dynamo prefills a request remotely: its conditional disaggregation, decided on the
    decode worker the request was routed to (``Roles.router: dynamo``).

    Source: ai-dynamo/dynamo ``examples/llm/components/disagg_router.py`` (``PyDisaggregatedRouter.
    prefill_remote``, at 02e16f7), called from ``VllmWorker.generate`` (``examples/llm/components/worker.py``)
    with the prompt's length, the KV router's prefix hit rate on that worker and the prefill queue's size;
    design in ``docs/architecture/disagg_serving.md`` ("Conditional Disaggregation", at 274eb0e). It is
    the vLLM-v0 path of Dynamo's early releases (v0.1.0 from March 2025 to v0.3.x; ``examples/llm``, and
    ``examples/vllm_v0`` from PR #1186): PR #98 (2025-03-11) made it count the prompt less its cache hit.
    Newer releases dropped it: ``examples/llm`` was removed in July 2025 (PRs #1953, #1982), and the vLLM-v1
    path that replaced it has no such rule (issue #1433). Dynamo's later experimental
    ``--router-conditional-disagg`` (frontend router, documented from v1.5) is a different policy
    (``isl_or_load``, ``eff_isl_threshold`` ...) and is not modelled.

    Args:
        input_tokens: the prompt, tokens (>= 0).
        cached_tokens: its leading tokens the decode replica's prefix cache holds (0 to ``input_tokens``).
            Dynamo computes ``int(prompt_length * (1 - prefix_hit_rate))`` from the router's hit rate; the
            simulator has the token counts, so the difference is exact.
        queue_size: requests in the prefill queue (>= 0): Dynamo reads its NATS JetStream prefill queue's
            length (``get_queue_size``, ``examples/llm/utils/nats_queue.py`` at 342bc4b), the remote
            prefills enqueued and not yet pulled by any prefill worker; the simulator's count is
            ``FleetSimulator._prefill_queue``.
        max_local_prefill_length: tokens (``DynamoDisagg.max_local_prefill_length``).
        max_prefill_queue_size: requests (``DynamoDisagg.max_prefill_queue_size``).

    Returns:
        True when the uncached prompt is longer than ``max_local_prefill_length`` (strictly) and the queue
        holds fewer than ``max_prefill_queue_size`` requests; else the decode replica prefills it.
    """
    return input_tokens - cached_tokens > max_local_prefill_length and queue_size < max_prefill_queue_size


class PDSink(EventSink, Protocol):
    """What a prefill or decode replica needs from its simulator besides ``EventSink``."""

    def on_prefilled(self, sr: SimRequest, replica: PrefillReplica, now: float) -> None:
        """A prefill replica finished prefilling ``sr``'s prompt at ``now``; it holds its KV."""

    def push_transfer(self, t: float, sr: SimRequest) -> None:
        """Schedule the end of ``sr``'s KV read at ``t``."""

    def transfer_seconds(self, replica: DecodeReplica, tokens: int, now: float) -> float:
        """How long ``replica`` takes to read ``tokens`` tokens of KV over its link, a read starting at
        ``now`` (seconds; the link's slowdown windows applied)."""


class PrefillReplica(Replica):
    """A replica of a prefill pool: prefills what it is sent and keeps each prompt's KV until the decode
    replica has read it (``release``). Arguments as ``Replica``'s."""

    role = PREFILL
    priority_order = False
    """Admit waiting requests highest ``Request.priority`` first (``simulator.prefill_priority``; set by
    the fleet): False, first come, first served (``Replica``)."""

    def __init__(self, rid: int, service: str, variant: str, profile: PerformanceProfile, engine: EngineConfig,
                 kv_cache_tokens: int, hash_block_tokens: int, sim: PDSink, created_s: float, ready_s: float,
                 price_per_hour: float, warm_start: bool) -> None:
        super().__init__(rid, service, variant, profile, engine, kv_cache_tokens, hash_block_tokens, sim,
                         created_s, ready_s, price_per_hour, warm_start)
        self.pd_sim = sim
        self._held: dict[SimRequest, int] = {}  # request -> KV tokens pinned for its decode replica's read

    @property
    def holds_kv(self) -> bool:
        """It still holds a prompt's KV for a read (a draining replica stays until none)."""
        return bool(self._held)

    @property
    def held_tokens(self) -> int:
        """KV tokens pinned for reads (part of ``kv_used``)."""
        return sum(self._held.values())

    def ahead(self, priority: int) -> int:
        """How many waiting requests a request of ``priority`` sent now would queue behind: all of them,
        first come, first served; with ``priority_order``, those up to the last of its priority or a
        higher one (``enqueue``)."""
        waiting = self.waiting
        i = len(waiting)
        if self.priority_order:
            while i and waiting[i - 1].req.priority < priority:
                i -= 1
        return i

    def enqueue(self, sr: SimRequest, now: float) -> None:
        """``Replica.enqueue``; with ``priority_order``, ``sr`` joins the waiting queue behind the last
        request of its priority or a higher one (scanning from the tail), so the queue is served highest
        priority first and first come, first served within a priority: vLLM's ``--scheduling-policy
        priority`` (``vllm/v1/core/sched/request_queue.py``, ``PriorityRequestQueue``: a heap on
        (priority, arrival time), a smaller value first; here a higher ``Request.priority`` is served
        first). A preempted request goes back to the head (``Replica._preempt_newest``), where vLLM's
        heap would re-sort it; running requests keep their chunks (vLLM's scheduler serves the running
        ones before it admits from the waiting queue)."""
        waiting = self.waiting
        if not self.priority_order or not waiting or waiting[-1].req.priority >= sr.req.priority:
            super().enqueue(sr, now)
            return
        i = self.ahead(sr.req.priority)
        sr.replica = self
        sr.received_s = now
        waiting.insert(i, sr)  # behind requests already waiting: no decode run to cut (``Replica.enqueue``)
        self._load_changed()
        if not self.busy:
            self._schedule(now)

    def _prefill_done(self, sr: SimRequest, now: float) -> None:
        """``sr``'s prompt is prefilled: the one-token request vLLM ran ends (``length``), its KV stays."""
        self.prefilling.remove(sr)
        self._held[sr] = sr.prefill_target  # still counted in kv_pref: freed by release
        m = self.metrics
        m.generation_tokens += 1
        latency = now - self._received(sr, now)
        m.ttft.observe(latency)
        m.e2e.observe(latency)
        m.finished(sr.req.input_tokens, 1)
        m.tpot.observe(0.0)  # a one-token request's TPOT, as vLLM records it
        m.success["length"] += 1
        self._load_changed()
        self.pd_sim.on_prefilled(sr, self, now)

    def release(self, sr: SimRequest, now: float) -> None:
        """The decode replica has read ``sr``'s KV (or no longer will): free it. Nothing when not held."""
        held = self._held.pop(sr, None)
        if held is None:
            return
        self.kv_pref -= held
        if not self.busy:
            self._schedule(now)
            if not self.busy and self.state == DRAINING and not self.waiting and not self._held:
                self.sim.on_drained(self, now)

    def fail_all(self, now: float) -> list[SimRequest]:
        """Crash: as ``Replica.fail_all``; the KV held for reads is lost (the reads are not failed)."""
        self._held.clear()
        return super().fail_all(now)


class DecodeReplica(Replica):
    """A replica of a decode pool: serves the requests llm-d has it prefill itself as any replica, and
    takes in those prefilled remotely (``receive``), reading their KV over ``link`` (module docstring).
    Arguments as ``Replica``'s, and ``link``: the pools' ``KVTransfer``."""

    role = DECODE

    def __init__(self, rid: int, service: str, variant: str, profile: PerformanceProfile, engine: EngineConfig,
                 kv_cache_tokens: int, hash_block_tokens: int, sim: PDSink, created_s: float, ready_s: float,
                 price_per_hour: float, warm_start: bool, link: KVTransfer) -> None:
        super().__init__(rid, service, variant, profile, engine, kv_cache_tokens, hash_block_tokens, sim,
                         created_s, ready_s, price_per_hour, warm_start)
        self.pd_sim = sim
        self.link = link
        self._remote: dict[SimRequest, int] = {}  # remote-prefilled request -> AWAITING, RECEIVING or LOADED
        self.receiving = 0  # requests whose KV is being read (their KV reserved here)
        self.inbound = 0  # requests routed here still prefilling on a prefill replica (Replica.inbound)
        self._now = 0.0  # the time of the step being planned (``_admit`` starts reads then)

    @property
    def holds_kv(self) -> bool:
        """A read is in progress (a draining replica stays until none)."""
        return self.receiving > 0

    def receive(self, sr: SimRequest, now: float) -> None:
        """``sr``, prefilled on a prefill replica, is sent here (its engine clock starts now)."""
        self._remote[sr] = AWAITING
        self.enqueue(sr, now)

    def loaded(self, sr: SimRequest, now: float) -> None:
        """``sr``'s KV has been read: it goes back to the head of the queue, its KV already reserved, to
        compute its last prompt token (vLLM re-queues it in front: ``_update_waiting_for_remote_kv``)."""
        if self._remote.get(sr) != RECEIVING:  # aborted or failed meanwhile
            return
        self._remote[sr] = LOADED
        self.receiving -= 1
        self.waiting.appendleft(sr)
        self._load_changed()
        if not self.busy:
            self._schedule(now)
        elif self._step is not None and self._step[6] is None:
            self._interrupt(now)

    def abort(self, sr: SimRequest, now: float) -> None:
        """As ``Replica.abort``; a request whose KV is being read or has been read frees its reservation."""
        state = self._remote.pop(sr, None)
        if state == LOADED:
            self.kv_pref -= sr.prefill_target
        if state != RECEIVING:
            super().abort(sr, now)
            return
        self.metrics.success["abort"] += 1
        self.receiving -= 1
        self.kv_pref -= sr.prefill_target
        if not self.busy:
            self._schedule(now)
            if not self.busy and self.state == DRAINING and not self.waiting and not self.receiving:
                self.sim.on_drained(self, now)

    def fail_all(self, now: float) -> list[SimRequest]:
        """Crash: as ``Replica.fail_all``, the requests whose KV is being read included."""
        reading = [sr for sr, state in self._remote.items() if state == RECEIVING]
        self._remote.clear()
        self.receiving = 0
        return super().fail_all(now) + reading

    def refresh_gauges(self) -> None:
        """As ``Replica.refresh_gauges``; a request waiting for its KV counts waiting, as in vLLM."""
        super().refresh_gauges()
        self.metrics.waiting += self.receiving

    def _schedule(self, now: float) -> None:
        self._now = now
        super()._schedule(now)

    def _preempt_newest(self) -> None:
        """``Replica._preempt_newest``, the victim queued behind the requests whose KV has been read
        (``loaded`` puts them at the head): they hold their KV already and need none more, so a victim
        in front of them that cannot fit would wait on KV that only they can free, and the prefill
        replica on reads that never start (a circular wait)."""
        super()._preempt_newest()
        waiting, remote = self.waiting, self._remote
        if len(waiting) > 1 and remote.get(waiting[1]) == LOADED:
            victim = waiting.popleft()
            i = 1
            while i < len(waiting) and remote.get(waiting[i]) == LOADED:
                i += 1
            waiting.insert(i, victim)

    def _admit(self, budget: int, growth: int, chunks: list[tuple[SimRequest, int]]) -> None:
        """``Replica._admit``, with the remote-prefilled requests: one still to read reserves its prompt's
        KV, takes its prefix-cache hit and starts its read (no step budget, no batch slot); one read
        takes its slot with one token to compute (its KV already reserved)."""
        waiting, prefilling, block, remote = self.waiting, self.prefilling, self.block, self._remote
        while waiting and budget > 0 and len(prefilling) + self.n_dec < self.max_seqs:
            sr = waiting[0]
            state = remote.get(sr)
            need = 0 if state == LOADED else sr.prefill_target
            if self.kv_pref + self.ctx_dec + growth + need + (len(prefilling) + self.n_dec + 1) * block > self.kv_cap:
                break
            waiting.popleft()
            if state == LOADED:
                del remote[sr]
                sr.prefilled = sr.prefill_target - 1
            elif sr.generated == 0:
                hit = 0
                if sr.req.hash_ids:
                    hit = self.cache.lookup_and_insert(sr.req.hash_ids, sr.req.input_tokens)
                m = self.metrics
                m.prefix_queries += sr.req.input_tokens
                m.prefix_hits += hit
                m.prompt_tokens += sr.req.input_tokens
                sr.hit_tokens = hit
                sr.prefilled = hit
                if state == AWAITING:  # read what the local cache lacks from the prefill replica
                    self.kv_pref += sr.prefill_target
                    remote[sr] = RECEIVING
                    self.receiving += 1
                    seconds = self.pd_sim.transfer_seconds(self, sr.prefill_target - hit, self._now)
                    self.pd_sim.push_transfer(self._now + seconds, sr)
                    continue
            else:
                sr.prefilled = 0
            sr.computed = sr.prefill_target - sr.prefilled
            if state != LOADED:
                self.kv_pref += sr.prefill_target
            self._admit_counter += 1
            sr.admit_seq = self._admit_counter
            prefilling.append(sr)
            chunk = min(sr.prefill_target - sr.prefilled, budget)
            chunks.append((sr, chunk))
            budget -= chunk
