"""Capacity of one replica of a prefill or a decode pool (prefill/decode disaggregation).

The aggregated model (``models.capacity``) bounds one replica that both prefills and decodes. Under
llm-d's P/D path, as the simulator models it (``autoscaler.simulator.disagg``; docs/simulator.md,
"Prefill/decode disaggregation"), a request whose prompt is at least ``non_cached_tokens`` long is
prefilled on a prefill replica as a one-token request whose KV stays pinned there; the decode replica
then admits it FCFS, reserves KV for the whole prompt, reads it over the link (``transfer_s``: bytes /
line rate + a fixed latency), computes the prompt's last token itself in one step (after the step in
flight ends) and decodes. The user's TTFT holds all of it. A shorter prompt is prefilled on the decode
replica itself. The two roles are bounded with the aggregated model's pieces, no new theory:

* **prefill** (``prefill_capacity``): the TTFT bound's M/G/1 prefill queue with Kingman's
  exponential waiting-time tail (``models.capacity``, the TTFT bound), its service the prefill work of
  the profile (``a Q``, ``Q`` the prefill-token equivalents, attention pairs included) plus one fixed
  step ``t0`` per chunk step: a prefill replica decodes nothing, so its steps are ``t0`` + prefill, not
  the decode step the aggregated service rides on. A request misses when its wait exceeds the TTFT
  target less its service, the step in flight at its arrival (``t0``, as the aggregated slack keeps
  one step), its KV read and the decode replica's step in flight plus its one-token step (``2 x
  decode_step_s``). Both the queue's service law and each request's slack read the prompts'
  marginal (``RequestMix.prompt_points``, ``prompt_marginal``): a prefill replica's queue depends on the
  prompt alone, and the mix's stratified points average each output stratum's longest prompts away (on
  Azure-conv-like lognormal lengths they put the service's ``cs^2`` at 1.15 where the prompts give 2.15,
  and the model at 1.06 of the simulated knee). And a KV bound: each remote prompt stays pinned from
  admission until its read ends (its prefill, then the read), a shot-noise sum taken as gamma as the
  aggregated KV bound.
  Capacity, requests/s of the whole mix (the share prefilled locally costs this replica nothing), and
  the prompt tokens/s it prefills there.
* **decode** (``decode_capacity``): the aggregated fluid operating point with each remote request's
  prefill work cut to its one recomputed token (``a x prefill_equivalent(1, P - 1)``), and the
  aggregated ITL (compound-Poisson prefill work during a request's decode, gamma tail), seqs (Erlang-C
  wait for one of ``max_num_seqs`` slots against the TTFT slack) and KV (Campbell's shot noise, gamma)
  bounds, the KV held from the start of the read (the whole prompt, reserved then) through the
  decode: the read, the step in flight when it ends (half a step on average) and the request's output
  steps, the first of which computes its last prompt token. A request that finds the KV full waits for
  it, FCFS, and misses only if that wait passes its TTFT slack: the occupancy, a linear-noise
  (Ornstein-Uhlenbeck) process about its mean with the shot noise's correlation time, must fall from
  where it is to the room the request needs within the slack (``_decode_bounds``). Short outputs
  turn the KV over within the slack, so the occupancy's 1 % overflow alone understated their knee (0.88
  of it on the Azure code trace's pairs). The TTFT slack there is the target less the unloaded prefill on
  the prefill replica, the read and two decode steps. Capacity, requests/s, and the sequences it holds
  there (Little's law).

Each bound's budget is ``1 - attainment`` on top of its idle misses, as ``replica_capacity``'s; a
bound missing more than ``unservable`` idle gives 0. ``pool_allowance`` sets ``unservable`` for a
service's pools by the aggregated variants' rule (``models.capacity.allowance_over``: 5 points above the
fewest idle misses of any of its aggregated variants or prefill/decode pairs, ``pair_idle_misses``), so
a tail of prompts no replica can prefill within the TTFT target takes no pool's capacity away.
Measured against the simulator's knee per role
(``autoscaler.knee.pd_fleet``, ``benchmarks/capacity.py --roles``; docs/controllers.md).

Not modelled here: a prefill replica's ``max_num_seqs`` (it holds a slot only while prefilling: far
from binding), the decode replica's wait for a slot before it starts a read counted once (the
simulator waits for one before the read and one after it), and the prefill queue's wait in the decode
bound (a prefill pool sized by ``prefill_capacity`` keeps it inside its own budget).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

import numpy as np

from models.capacity import (
    DEFAULT_ATTAINMENT,
    UNLOADED,
    UNSERVABLE_SHARE,
    ReplicaSpec,
    RequestMix,
    _erlang_c,
    _gamma_sf,
    _largest_rate,
    allowance_over,
    idle_misses,
    marginal_costs,
)

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from models.profiles import PerformanceProfile


class TransferLink(Protocol):
    """The link between the pools (``roles.kv_transfer`` of a fleet file): line rate, Gb/s, and the
    fixed seconds each hand-over adds."""

    @property
    def bandwidth_gbps(self) -> float: ...
    @property
    def latency_s(self) -> float: ...


@dataclass(frozen=True)
class RoleCapacity:
    """One role's bounds, requests/s of the whole mix; ``rps`` is their minimum.

    Attributes:
        role: ``prefill`` or ``decode``.
        bounds: bound name -> requests/s (prefill: ``ttft``, ``kv``; decode: ``itl``, ``seqs``, ``kv``).
        remote_share: share of the mix's requests prefilled on a prefill replica.
        prompt_tokens_per_s: prompt tokens/s prefilled remotely at ``rps`` (the prefill replica's load).
        sequences: requests a decode replica holds at ``rps`` (Little's law, batch slots; 0 for prefill).
    """

    role: str
    bounds: dict[str, float]
    remote_share: float
    prompt_tokens_per_s: float
    sequences: float = 0.0

    @property
    def rps(self) -> float:
        """The replica's capacity: the tightest bound, requests/s."""
        return min(self.bounds.values())

    @property
    def binding(self) -> str:
        """Which bound is the capacity."""
        return min(self.bounds, key=lambda k: self.bounds[k])


def transfer_s(link: TransferLink, tokens: np.ndarray | float, kv_bytes_per_token: int) -> np.ndarray:
    """Seconds to read ``tokens`` prompt tokens' KV over ``link``: ``tokens x kv_bytes_per_token x 8 /
    (bandwidth_gbps x 1e9) + latency_s`` (the simulator's ``KVTransfer.seconds``)."""
    return np.asarray(tokens, dtype=float) * kv_bytes_per_token * 8 / (link.bandwidth_gbps * 1e9) + link.latency_s


def remote_points(mix: RequestMix, non_cached_tokens: int) -> np.ndarray:
    """1.0 for each point of ``mix`` llm-d prefills remotely, else 0.0: ``non_cached_tokens > 0`` and
    both the prompt and its uncached part at least that long (llm-d-router v0.10.0
    ``prefix-based-pd-decider``, ``autoscaler.simulator.disagg.remote_prefill``; the prefix-cache hit
    taken as the mix's rate).

    Raises:
        ValueError: ``non_cached_tokens`` < 0.
    """
    if non_cached_tokens < 0:
        raise ValueError(f"non_cached_tokens must be >= 0, got {non_cached_tokens}")
    if non_cached_tokens == 0:
        return np.zeros_like(mix.weights)
    return ((mix.input_tokens >= non_cached_tokens) & (mix.uncached >= non_cached_tokens)).astype(float)


def prompt_marginal(mix: RequestMix, non_cached_tokens: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(prompt tokens, uncached tokens, share of the mix prefilled remotely) of each point of the mix's
    prompts' marginal (``RequestMix.prompt_points``, the mix's own points where it has none), llm-d's
    rule (``remote_points``) applied to each.

    Raises:
        ValueError: ``non_cached_tokens`` < 0.
    """
    if mix.prompt_points is None or mix.prompt_weights is None:
        return mix.input_tokens, mix.uncached, mix.weights * remote_points(mix, non_cached_tokens)
    if non_cached_tokens < 0:
        raise ValueError(f"non_cached_tokens must be >= 0, got {non_cached_tokens}")
    lin = mix.prompt_points
    p = lin * (1.0 - mix.prefix_hit_rate)
    remote = (non_cached_tokens > 0) & (lin >= non_cached_tokens) & (p >= non_cached_tokens)
    return lin, p, mix.prompt_weights * remote


def prefill_service_s(spec: ReplicaSpec, mix: RequestMix) -> np.ndarray:
    """Seconds a prefill replica takes to prefill each point alone: ``a Q + ceil(P / budget) t0``
    (``Q`` its prefill-token equivalents, ``P`` its uncached tokens, budget ``max_num_batched_tokens``:
    one fixed step per chunk, nothing decoding)."""
    t0, a, _, _ = marginal_costs(spec.profile)
    p = mix.uncached
    q = spec.profile.prefill_equivalent(p, mix.input_tokens - p)
    return a * q + np.ceil(p / spec.max_num_batched_tokens) * t0


@dataclass(frozen=True)
class _Bounds:
    """A role's bounds as miss functions (share of the whole mix missing) of the rate, requests/s of the
    mix, in ``[0, limit)``."""

    misses: dict[str, Callable[[float], float]]
    limit: float

    def idle(self) -> float:
        """The largest share any bound misses on an idle replica (at ``UNLOADED`` of ``limit``), as
        ``models.capacity.idle_misses``."""
        return max(miss(self.limit * UNLOADED) for miss in self.misses.values())

    def rates(self, attainment: float, unservable: float) -> dict[str, float]:
        """bound -> the largest rate whose misses are within ``1 - attainment`` on top of its idle misses
        (0 where those exceed ``unservable``), as ``replica_capacity``'s bounds."""
        out = {}
        for name, miss in self.misses.items():
            floor = miss(self.limit * UNLOADED)
            out[name] = 0.0 if floor > unservable else _largest_rate(miss, self.limit, 1.0 - attainment + floor)
        return out


def _check(attainment: float, non_cached_tokens: int) -> None:
    if not 0.0 < attainment < 1.0:
        raise ValueError(f"attainment must be in (0, 1), got {attainment}")
    if non_cached_tokens < 0:
        raise ValueError(f"non_cached_tokens must be >= 0, got {non_cached_tokens}")


def prefill_capacity(spec: ReplicaSpec, mix: RequestMix, ttft_s: float, link: TransferLink, *,
                     kv_bytes_per_token: int | None = None, decode_step_s: float | None = None,
                     non_cached_tokens: int = 16, attainment: float = DEFAULT_ATTAINMENT,
                     unservable: float = UNSERVABLE_SHARE) -> RoleCapacity:
    """The TTFT and KV bounds of one prefill replica (module docstring), requests/s of ``mix``.

    Args:
        spec: the prefill replica.
        mix: every request the service gets (those llm-d prefills locally count for nothing here).
        ttft_s: the TTFT target, seconds.
        link: the pools' link (``TransferLink``).
        kv_bytes_per_token: KV bytes per token (default the prefill profile's ``kv_bytes_per_token``,
            as the simulator reads the decode replica's: the same model).
        decode_step_s: the decode replica's mean step, seconds (default the decode-free step ``t0``
            of ``spec``'s profile: a decode pool far from its own bound).
        non_cached_tokens: llm-d's remote-prefill threshold (``remote_points``; 16 is
            ``PD_NON_CACHED_TOKENS``, llm-d-router v0.10.0 ``deploy/config/pd-epp-config.yaml``).
        attainment, unservable: as ``replica_capacity``'s.

    Raises:
        ValueError: ``attainment`` outside (0, 1) or ``non_cached_tokens`` < 0.
    """
    _check(attainment, non_cached_tokens)
    model, share, tokens = _prefill_bounds(spec, mix, ttft_s, link, kv_bytes_per_token, decode_step_s,
                                           non_cached_tokens)
    if model is None:
        return RoleCapacity("prefill", {"ttft": np.inf, "kv": np.inf}, 0.0, 0.0)
    bounds = model.rates(attainment, unservable)
    return RoleCapacity("prefill", bounds, share, min(bounds.values()) * tokens)


def _prefill_bounds(spec: ReplicaSpec, mix: RequestMix, ttft_s: float, link: TransferLink,
                    kv_bytes_per_token: int | None, decode_step_s: float | None,
                    non_cached_tokens: int) -> tuple[_Bounds | None, float, float]:
    """(the TTFT and KV bounds of ``prefill_capacity``, None where no point is prefilled remotely; the
    share of the mix prefilled remotely; its prompt tokens per request of the mix)."""
    t0 = spec.profile.fixed_step_s
    kvb = spec.profile.kv_bytes_per_token if kv_bytes_per_token is None else kv_bytes_per_token
    step_d = t0 if decode_step_s is None else decode_step_s
    remote = remote_points(mix, non_cached_tokens)
    w = mix.weights * remote
    share = float(w.sum())
    if share == 0.0:
        return None, 0.0, 0.0
    tokens = float(w @ mix.input_tokens)  # prompt tokens it prefills per request of the mix
    service = prefill_service_s(spec, mix)
    _, a, _, _ = marginal_costs(spec.profile)
    # The TTFT bound reads the prompts' marginal (``RequestMix.prompt_points``): a prefill replica's
    # queue and each request's slack depend on its prompt alone, and the stratified points average each
    # output stratum's longest prompts away, understating the queue's service variance.
    lin_m, p_m, w_m = prompt_marginal(mix, non_cached_tokens)
    share_m = float(w_m.sum())
    q = spec.profile.prefill_equivalent(p_m, lin_m - p_m)
    own = a * q + np.ceil(p_m / spec.max_num_batched_tokens) * t0
    read = transfer_s(link, p_m, kvb)
    slack = ttft_s - own - t0 - read - 2.0 * step_d
    # The queue's service: the prefill work and the request's share of the steps' fixed time when
    # steps are full (a busy replica packs several prompts' chunks into one ``max_num_batched_tokens``
    # step), so the utilisation is the busy replica's; its own latency (``service``) keeps a step per chunk.
    busy = a * q + t0 * p_m / spec.max_num_batched_tokens
    es = float(w_m @ busy) / share_m  # mean service of the requests it prefills
    cs2 = float(w_m @ (busy * busy)) / share_m / (es * es) - 1.0
    limit = 1.0 / (share_m * es)  # the rate of the whole mix at which it is busy all the time
    # The prefill tokens of later prompts that share a request's last step (FCFS packs them in up to
    # the budget), seconds: a busy replica's steps are full, so its first token waits for them too.
    budget_tokens = spec.max_num_batched_tokens
    fill = a * (budget_tokens - np.mod(p_m - 1, budget_tokens) - 1)

    def ttft_miss(rate: float) -> float:
        rho = rate * share_m * es
        if rho >= 1.0:
            return 1.0
        decay = 2.0 * (1.0 - rho) / (es * (mix.arrival_scv + cs2))
        # An arrival that waits (probability rho) finds a queue, whose prompts fill its last step too.
        return float(w_m @ np.where(slack < 0, 1.0, rho * np.exp(-decay * np.maximum(slack - fill, 0.0))))

    lin = mix.input_tokens + spec.block_size
    # pinned from its prefill's start until the decode replica has read it
    hold = service + transfer_s(link, mix.uncached, kvb)

    def kv_miss(rate: float) -> float:
        # KV is reserved at admission: the queue's wait before it holds none
        mean = rate * float(w @ (lin * hold))
        var = rate * float(w @ (lin * lin * hold))
        return float(w @ _gamma_sf(spec.kv_cache_tokens - lin, mean, var))

    return _Bounds({"ttft": ttft_miss, "kv": kv_miss}, limit), share, tokens


@dataclass(frozen=True)
class _DecodeTerms:
    """Per point of a mix on a decode replica: prefill-token equivalents it computes there (``q``),
    step seconds its decode adds (``dec``), its KV read (``read``, s; 0 if local), the TTFT spent
    before it reaches the decode queue (``before``, s: the unloaded prefill and its step in flight, or
    nothing), 1.0 where prefilled locally (``local``), and the mean step work per request (``work``, s)."""

    q: np.ndarray
    dec: np.ndarray
    read: np.ndarray
    before: np.ndarray
    local: np.ndarray
    work: float


def _decode_terms(spec: ReplicaSpec, mix: RequestMix, link: TransferLink, prefill: PerformanceProfile,
                  prefill_spec: ReplicaSpec, non_cached_tokens: int) -> _DecodeTerms:
    _, a, b, g = marginal_costs(spec.profile)
    remote = remote_points(mix, non_cached_tokens)
    p = mix.uncached
    local_q = spec.profile.prefill_equivalent(p, mix.input_tokens - p)
    one_q = spec.profile.prefill_equivalent(np.ones_like(p), mix.input_tokens - 1.0)  # the recomputed token
    q = np.where(remote > 0, one_q, local_q)
    lin, lout = mix.input_tokens, mix.output_tokens
    dec = b * lout + g * (lin * lout + lout * lout / 2)
    read = np.where(remote > 0, transfer_s(link, p, prefill.kv_bytes_per_token), 0.0)
    before = np.where(remote > 0, prefill_service_s(prefill_spec, mix) + prefill.fixed_step_s, 0.0)
    work = float(mix.weights @ (a * q + dec))
    return _DecodeTerms(q, dec, read, before, 1.0 - remote, work)


def decode_capacity(spec: ReplicaSpec, mix: RequestMix, ttft_s: float, itl_s: float, link: TransferLink, *,
                    prefill_spec: ReplicaSpec | None = None, non_cached_tokens: int = 16,
                    attainment: float = DEFAULT_ATTAINMENT, unservable: float = UNSERVABLE_SHARE) -> RoleCapacity:
    """The ITL, seqs and KV bounds of one decode replica (module docstring), requests/s of ``mix``.

    Args:
        spec: the decode replica.
        mix: every request the service gets (each reaches a decode replica).
        ttft_s, itl_s: the SLO's targets, seconds.
        link: the pools' link (``TransferLink``).
        prefill_spec: the prefill replica, whose unloaded prefill time counts against the TTFT slack
            (default ``spec``).
        non_cached_tokens, attainment, unservable: as ``prefill_capacity``'s.

    Raises:
        ValueError: ``attainment`` outside (0, 1), ``non_cached_tokens`` < 0, or ``itl_s`` not above the
            profile's fixed step time.
    """
    _check(attainment, non_cached_tokens)
    model, held_s = _decode_bounds(spec, mix, ttft_s, itl_s, link, prefill_spec, non_cached_tokens)
    bounds = model.rates(attainment, unservable)
    wts = mix.weights
    local = 1.0 - remote_points(mix, non_cached_tokens)
    cap = min(bounds.values())
    seqs = cap * held_s(min(cap, model.limit * (1 - 1e-9))) if cap > 0 else 0.0
    return RoleCapacity("decode", bounds, float(wts @ (1.0 - local)),
                        cap * float(wts @ ((1.0 - local) * mix.input_tokens)), seqs)


def _decode_bounds(spec: ReplicaSpec, mix: RequestMix, ttft_s: float, itl_s: float, link: TransferLink,
                   prefill_spec: ReplicaSpec | None, non_cached_tokens: int
                   ) -> tuple[_Bounds, Callable[[float], float]]:
    """(the ITL, seqs and KV bounds of ``decode_capacity``; the mean seconds a request holds a slot at a
    rate, whose product with the rate is the sequences held, Little's law).

    Raises:
        ValueError: ``itl_s`` not above the profile's fixed step time.
    """
    t0, a, _, _ = marginal_costs(spec.profile)
    if itl_s <= t0:
        raise ValueError(f"ITL target {itl_s}s is below the fixed step time {t0:.4f}s of {spec.profile.name}")
    pspec = spec if prefill_spec is None else prefill_spec
    terms = _decode_terms(spec, mix, link, pspec.profile, pspec, non_cached_tokens)
    wts, lin, lout = mix.weights, mix.input_tokens + spec.block_size, mix.output_tokens
    limit = 1.0 / terms.work

    def point(rate: float) -> tuple[float, float, float]:
        """(mean step, decode-only step, sequences decoding) at ``rate``: ``models.capacity.operating_point``."""
        s = t0 / (1.0 - rate * terms.work)
        return s, t0 + rate * s * float(wts @ terms.dec), rate * s * float(wts @ lout)

    def itl_miss(rate: float) -> float:
        _, sd, _ = point(rate)
        if sd >= itl_s:
            return 1.0
        d = lout - 1.0
        window = d * itl_s
        mean = rate * window * a * float(wts @ terms.q)
        var = rate * window * a * a * float(wts @ (terms.q * terms.q))
        return float(wts @ np.where(d >= 1, _gamma_sf(d * (itl_s - sd), mean, var), 0.0))

    def own_s(sd: float) -> np.ndarray:
        """Seconds from reaching the decode queue's head to the first token, slot aside: the read (KV
        reserved), the step in flight and the one-token step; a local prompt's chunked prefill."""
        local = a * terms.q + np.ceil(mix.uncached / spec.max_num_batched_tokens) * sd
        return np.where(terms.local > 0, local + sd, terms.read + 2.0 * sd)

    def seqs_miss(rate: float) -> float:
        s, sd, _ = point(rate)
        held = 2.0 * sd * (1.0 - terms.local) + terms.local * own_s(sd) + lout * s  # a slot's hold
        tsys = float(wts @ held)
        load = rate * tsys
        c = spec.max_num_seqs
        if load >= c:
            return 1.0
        slack = ttft_s - terms.before - own_s(sd)
        decay = (c - load) / tsys
        return float(wts @ np.where(slack < 0, 1.0, _erlang_c(c, load) * np.exp(-decay * np.maximum(slack, 0.0))))

    def kv_miss(rate: float) -> float:
        s, sd, _ = point(rate)
        fixed = terms.read * (1.0 - terms.local)  # the read: no step in it
        # The rest of its hold scales with the step. A remote prompt, read, waits for the step in flight
        # (on average half of one) and then runs its ``lout`` steps, the first of which computes its last
        # prompt token and gives the first output token; a local one its chunked prefill, then its steps.
        stepped = np.where(terms.local > 0, own_s(sd) - fixed, 0.5 * sd) + lout * s
        grow = s * (lout * lout / 2)
        grow2 = s * (lin * lout * lout + lout ** 3 / 3)
        mean = rate * float(wts @ (lin * (fixed + stepped) + grow))
        # Campbell's variance, its step-driven part times s / t0 = 1 / (1 - lam W): more resident
        # sequences make longer steps and so longer residence, a feedback that, as a linear-noise
        # (Ornstein-Uhlenbeck) process restoring at 1 - lam W of its open-loop rate, grows the
        # stationary variance by 1 / (1 - lam W); the read's share does not feed back.
        feedback = s / t0
        var = rate * float(wts @ (lin * lin * fixed)) + rate * float(wts @ (lin * lin * stepped + grow2)) * feedback
        # A request that finds the KV full waits (FCFS) for the occupancy to fall by its prompt; it misses
        # only if that wait passes its TTFT slack. In the same linear-noise view the occupancy returns to
        # its mean at the rate 1 / tau, tau the shot noise's correlation time (for holds H: sum lin^2 H^2
        # / (2 sum lin^2 H)) slowed by the same feedback, so from x it is below the room r = KV - lin after
        # tau ln((x - mean) / (r - mean)): a miss where x > mean + (r - mean) e^(slack / tau). With the
        # mean above the room the occupancy does not return there: every such request misses.
        hold = fixed + stepped
        tau = float(wts @ (lin * lin * hold * hold)) / (2.0 * float(wts @ (lin * lin * hold))) * feedback
        slack = np.maximum(ttft_s - terms.before - own_s(sd), 0.0)
        room = spec.kv_cache_tokens - lin
        over = mean + (room - mean) * np.exp(np.minimum(slack / tau, 50.0))
        return float(wts @ np.where(room > mean, _gamma_sf(over, mean, var), 1.0))

    def held_s(rate: float) -> float:
        s, sd, _ = point(rate)
        return float(wts @ (terms.local * own_s(sd) + 2.0 * sd * (1.0 - terms.local) + lout * s))

    return _Bounds({"itl": itl_miss, "seqs": seqs_miss, "kv": kv_miss}, limit), held_s


def prefill_idle_misses(spec: ReplicaSpec, mix: RequestMix, ttft_s: float, link: TransferLink, *,
                        kv_bytes_per_token: int | None = None, decode_step_s: float | None = None,
                        non_cached_tokens: int = 16) -> float:
    """The largest share of ``mix`` (the whole mix: a request prefilled locally misses nothing here) that
    a bound of ``prefill_capacity`` misses on an idle prefill replica, ``models.capacity.idle_misses``
    for the role: prompts it cannot prefill and hand over within ``ttft_s`` even alone. 0 where no
    prompt is prefilled remotely. Arguments as ``prefill_capacity``'s.

    Raises:
        ValueError: ``non_cached_tokens`` < 0.
    """
    model, _, _ = _prefill_bounds(spec, mix, ttft_s, link, kv_bytes_per_token, decode_step_s, non_cached_tokens)
    return 0.0 if model is None else model.idle()


def decode_idle_misses(spec: ReplicaSpec, mix: RequestMix, ttft_s: float, itl_s: float, link: TransferLink, *,
                       prefill_spec: ReplicaSpec | None = None, non_cached_tokens: int = 16) -> float:
    """The largest share of ``mix`` a bound of ``decode_capacity`` misses on an idle decode replica (its
    seqs bound holds the prompts whose unloaded prefill on ``prefill_spec``, read and first step exceed
    ``ttft_s``); 1 when its fixed step alone exceeds ``itl_s``. Arguments as ``decode_capacity``'s.

    Raises:
        ValueError: ``non_cached_tokens`` < 0.
    """
    if itl_s <= spec.profile.fixed_step_s:
        return 1.0
    model, _ = _decode_bounds(spec, mix, ttft_s, itl_s, link, prefill_spec, non_cached_tokens)
    return model.idle()


def pair_idle_misses(prefill: ReplicaSpec, decode: ReplicaSpec, mix: RequestMix, ttft_s: float, itl_s: float,
                     link: TransferLink, *, non_cached_tokens: int = 16) -> float:
    """The idle misses of a prefill/decode pair serving ``mix``: the larger of its prefill replica's
    (``prefill_idle_misses``) and its decode replica's against that prefill (``decode_idle_misses``), as
    ``models.capacity.idle_misses`` takes the largest of one replica's bounds.

    Raises:
        ValueError: ``non_cached_tokens`` < 0.
    """
    return max(prefill_idle_misses(prefill, mix, ttft_s, link, non_cached_tokens=non_cached_tokens),
               decode_idle_misses(decode, mix, ttft_s, itl_s, link, prefill_spec=prefill,
                                  non_cached_tokens=non_cached_tokens))


def pool_allowance(aggregated: Sequence[ReplicaSpec], prefill: Sequence[ReplicaSpec], decode: Sequence[ReplicaSpec],
                   mix: RequestMix, ttft_s: float, itl_s: float, link: TransferLink, *,
                   non_cached_tokens: int = 16) -> float:
    """The idle misses a pool replica of a service may show and keep a capacity (``unservable`` of
    ``prefill_capacity`` / ``decode_capacity``): ``models.capacity.allowance_over`` (the aggregated
    variants' rule, ``UNSERVABLE_SHARE`` above the fewest) over every way the service can serve ``mix``:
    each aggregated variant of ``aggregated`` (``models.capacity.idle_misses``) and each pair of a
    prefill variant of ``prefill`` and a decode variant of ``decode`` (``pair_idle_misses``). What the
    best of them misses idle no replica can serve, so it never takes a pool's capacity away; a pool
    replica missing more than 5 points above it cannot serve this mix.

    Raises:
        ValueError: ``non_cached_tokens`` < 0.
    """
    idle = [idle_misses(sp, mix, ttft_s, itl_s) for sp in aggregated]
    idle += [pair_idle_misses(p, d, mix, ttft_s, itl_s, link, non_cached_tokens=non_cached_tokens)
             for p in prefill for d in decode]
    return allowance_over(idle)
