"""Steady-state capacity of one replica: the largest arrival rate it serves within the SLO.

A replica of a continuously batched engine (vLLM V1: chunked prefill, ``max_num_seqs``, a KV cache
of ``kv_cache_tokens``) is limited by four resources. Its capacity is the minimum of four bounds,
each the largest Poisson arrival rate ``lam`` (requests/s) at which the requests missing that part
of the SLO stay within ``1 - attainment`` (default 1 %):

* **ITL** (step time vs the ITL target). A request decoding ``D = L_out - 1`` tokens gets one per
  engine step; its mean time per output token is ``s_d + X / D``, where ``s_d`` is the mean
  decode-only step and ``X`` the prefill work of the requests arriving while it decodes (chunked
  prefill puts their chunks into its steps). ``X`` is compound Poisson over the window
  ``D x itl_s``: mean ``lam w a E[P]``, variance ``lam w a^2 E[P^2]`` (``P`` uncached prompt
  tokens, ``a`` seconds per prefill token), taken as a gamma variable (for a single request size,
  the exact Poisson count of prefills, ``P(N > D (itl_s - s_d) / (a P))``). A request misses when
  ``X > D (itl_s - s_d)``; short outputs have few steps to average over and miss first. Bursty
  arrivals (``RequestMix.arrival_scv``, ``models.arrivals``) scale the count's variance. (A step
  prefills at most ``max_num_batched_tokens``, which caps ``X``: opt-in, ``ReplicaSpec.prefill_cap``,
  docs/benchmarks.md says why.) The fixed window over-counts: a decode that carries prefill lengthens,
  and what arrives meanwhile rides too, so ``X`` is the work of an M/G/1 busy period begun by the
  decode's own steps, of which the fixed window is an upper bound (opt-in,
  ``ReplicaSpec.busy_period``: ``_busy_tail``, Kendall's identity; measured in docs/benchmarks.md).
  In that form each prefill riding in the decode also joins its batch for the rest of it, and the
  arrivals' second moment is the prompts' marginal's (``RequestMix.prompt_points``).
* **TTFT** (prefill time vs the TTFT target). Prefills are served FCFS: an M/G/1 queue whose
  service is the request's prefill steps (``a P + ceil(P / budget) s_d``), with the exponential
  waiting-time tail of heavy traffic (Kingman): ``P(W > t) = rho exp(-2 (1 - rho) t / (E[S] (ca^2 +
  cs^2)))``. A request misses when its wait exceeds ``ttft_s - S - s_d``. On one replica, for a mix
  with a prompts' marginal (``RequestMix.prompt_points``), ``S``, its moments and each request's
  slack are the marginal's with ``ReplicaSpec.prompt_marginal`` (opt-in; ``_ttft_miss``: a request's
  TTFT reads its prompt alone, and the stratified points understate the service's ``cs^2`` and count a
  stratum straddling the idle limit wholly on one side). (With
  ``ReplicaSpec.busy_period``, one replica: the wait's whole law, Pollaczek-Khinchine over the
  prompts' marginal, ``_pk_wait_sf``, since a few long prompts make the tail that the second moment
  alone leaves out; and the prompts queued behind a request fill its last prefill step's budget
  left, so it waits for them too, ``_wait_to_miss``; its slack keeps no decode step for the first
  token, which the simulator gives at the end of the last prefill step, and counts instead the decode
  step in flight when the prefill queue is empty, ``_step_in_flight``. The max_num_seqs bound reads
  the same slack, so in this form its slot wait drops the decode step too, with nothing in its place:
  not examined against the simulator. ``ReplicaSpec.backlog`` on top of it, opt-in: the queue serves a
  backlog, whose prompts share a step's overhead and carry the decoders their busy period admitted,
  ``_backlog_service``; the KV bound holds those decoders' prompts, ``_backlog_kv``.)
* **max_num_seqs** (Little's law on the time in system ``T``). Each request holds one of
  ``max_num_seqs`` slots for ``T = S + L_out s``: an M/M/c queue with ``c = max_num_seqs`` and
  offered load ``lam T``; a request misses when its wait for a slot (Erlang C, decay ``(c - lam T) / T``)
  exceeds the TTFT slack.
* **KV cache** (resident tokens x concurrency <= ``kv_cache_tokens``). A request reserves its
  prompt (plus one block) at admission and grows one token per step, so the tokens resident are a
  compound Poisson (shot-noise) sum with mean ``lam E[int r dt]`` and variance ``lam E[int r^2 dt]``
  (Campbell's theorem), taken as gamma. An arriving request that finds no room for its prompt
  waits or, once decoding, is preempted (PASTA: it sees the time-average occupancy): a miss.

Everything rests on the fluid operating point of the step-time model (``PerformanceProfile``: ``t0``
per step, ``a`` per prefill token, ``b`` per decoding sequence, ``g`` per context token): the mean
step time solves ``s = t0 + lam s W`` with ``W = E[a Q + b L_out + g (L_in L_out + L_out^2 / 2)]`` the
work one request brings (``Q``: its prefill-token equivalents, the uncached tokens plus their
attention pairs, ``PerformanceProfile.prefill_equivalent``; ``Q`` replaces ``P`` in the prefill work
above too), so ``s = t0 / (1 - lam W)``; ``mean_itl_rate`` is the rate at which ``s``
reaches an ITL target (the bound without the tail).

``shared_capacity`` is the largest rate at which the four bounds' misses together (``slo_miss``) stay
within one budget (the attainment target is over all requests); the planners use the tightest bound
alone (docs/controllers.md says why), except in the busy-period form, whose capacity is the shared
one (``CapacityBounds.shared_rps``: on Mooncake's lengths the TTFT and ITL bounds each reach 1 % near
the same rate, where the simulator misses about 2 %). Measured against the simulator
(``tests/unit/test_capacity.py``, ``autoscaler.knee``): on a workload built for each bound the model
is within 15 % of the simulator's knee (the highest rate a replica serves at 99 %); on Azure conv's
mix within 0.90-1.05 of it, on Mooncake's ``shared_capacity`` within 1.10 (the tightest bound alone
1.3-1.6); four replicas pooled (``replicas=4``) on Mooncake's mix within 0.90-1.05 of four simulated
replicas' knee; ``docs/benchmarks.md`` has every case of ``benchmarks/capacity.py``.
"""

from __future__ import annotations

import itertools
import math
import threading
import weakref
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Protocol

import numpy as np
from scipy import special, stats

from autoscaler.workload import synthetic
from models.profiles import get_profile

if TYPE_CHECKING:
    from collections.abc import Mapping

    from models.profiles import PerformanceProfile


# What this module reads of a fleet file (``autoscaler.config`` satisfies these structurally, and
# the model stays below the config layer): the engine limits, a variant, a service.
class EngineLimits(Protocol):
    """vLLM scheduler limits of one replica (``engine`` of a fleet file)."""

    @property
    def max_num_seqs(self) -> int: ...
    @property
    def max_num_batched_tokens(self) -> int: ...
    @property
    def block_size(self) -> int: ...


class VariantSpec(Protocol):
    """One variant: its name, its performance profile's name and its KV-cache capacity, tokens."""

    @property
    def name(self) -> str: ...
    @property
    def profile(self) -> str: ...
    @property
    def kv_cache_tokens(self) -> int: ...


class Objective(Protocol):
    """One class's latency objectives, s."""

    @property
    def ttft_s(self) -> float: ...
    @property
    def itl_s(self) -> float: ...


class TypicalLengths(Protocol):
    """Mean prompt and output lengths, tokens, and the prefix-cache hit rate a service is sized for."""

    @property
    def input_tokens(self) -> float: ...
    @property
    def output_tokens(self) -> float: ...
    @property
    def prefix_hit_rate(self) -> float: ...


class ServiceSpec(Protocol):
    """A service as sized here: its typical request, its objectives by class, its variants."""

    @property
    def typical_request(self) -> TypicalLengths: ...
    @property
    def slo(self) -> Mapping[str, Objective]: ...
    @property
    def variants(self) -> Sequence[VariantSpec]: ...

DEFAULT_ATTAINMENT = 0.99
"""Share of requests that must meet the SLO at capacity (the product's attainment objective)."""

# Output-length strata of ``RequestMix.from_requests`` (quantile edges), finer toward the top: the
# long outputs dominate KV occupancy and time in system.
_OUTPUT_EDGES = (*np.linspace(0.0, 0.96, 25), 0.98, 0.99, 0.995, 0.998, 0.999, 1.0)
_INPUT_POINTS = 8  # prompt-length quantiles per output stratum
# Quantile edges of the prompts' marginal (``RequestMix.prompt_points``): strata of 0.5 % up to the 96th
# percentile, then ``_OUTPUT_EDGES``' finer top. A TTFT target splits the prompts at one length; a
# stratum straddling it counts wholly on one side, so its width is the error of the idle misses (on
# ServeGen-day lengths an A100 misses 14.1 % of the requests idle, 13.6 % on 4 %-wide strata).
_PROMPT_EDGES = (*np.linspace(0.0, 0.96, 193), *_OUTPUT_EDGES[25:])
# Length distribution assumed when only the means are known (``RequestMix.from_means``): lognormal
# with the shape of Azure LLM inference 2023 conv (sigma = sqrt(2 ln(mean / median)) of its prompt and
# output lengths, ``autoscaler.workload.synthetic``).
INPUT_SIGMA = math.sqrt(2.0 * math.log(synthetic.INPUT_MEAN_TOKENS / synthetic.INPUT_MEDIAN_TOKENS))
OUTPUT_SIGMA = math.sqrt(2.0 * math.log(synthetic.OUTPUT_MEAN_TOKENS / synthetic.OUTPUT_MEDIAN_TOKENS))
_BISECTION_STEPS = 40  # relative precision 2**-40 of the fluid limit
UNLOADED = 1e-6
"""A rate this share of the fluid limit stands for an idle replica: the misses there are the mix's
own, which no rate removes (``replica_capacity``)."""
UNSERVABLE_SHARE = 0.05
"""How many more requests a replica may miss even idle than the service's best variant misses idle,
and still be given a capacity for the mix: a tail of prompts too long to prefill within the TTFT
target (5 %: a long-prompt day's tail on an A100). What the best variant misses idle no variant can
serve, so it never takes a capacity away (``allowance``); a variant missing more cannot serve this
mix, and gets 0."""
MOSTLY_UNSERVABLE = 0.5
"""Above this share of a mix missed idle by the service's best variant, the mix says nothing about
capacity (what is left to serve is the minority): no variant gets one, and the loop keeps the last
capacities (``loop.mix``); a day's long-prompt tail (ServeGen with Mooncake lengths: about 8 %)
is far below."""


@dataclass(frozen=True, eq=False)
class RequestMix:
    """The requests a replica serves, as weighted representative points.

    Attributes:
        input_tokens, output_tokens: prompt and output lengths of each point, tokens (>= 1).
        weights: share of requests each point stands for (sums to 1).
        prefix_hit_rate: fraction of prompt tokens served from the prefix cache, in [0, 1).
        arrival_scv: squared coefficient of variation of inter-arrival times (1 for Poisson).
        input_m2: mean squared prompt length of the requests summarised, tokens^2 (the points'
            own when None); the ITL bound's prefill variance reads it.
        prompt_points, prompt_weights: the prompt lengths alone (their marginal), as the mean of
            each quantile stratum of ``_PROMPT_EDGES`` (0.5 % wide, finer toward the longest), tokens,
            and each stratum's share; None: the points' own. The stratified points average each output
            stratum's longest prompts away, and with them the prefill queue's tail, which a few
            long prompts make; the busy-period form reads the marginal (``_queue_points``, ``_ttft_miss``),
            and so does the default form's TTFT bound with ``ReplicaSpec.prompt_marginal``.
    """

    input_tokens: np.ndarray
    output_tokens: np.ndarray
    weights: np.ndarray
    prefix_hit_rate: float = 0.0
    arrival_scv: float = 1.0
    input_m2: float | None = None
    prompt_points: np.ndarray | None = None
    prompt_weights: np.ndarray | None = None

    def __post_init__(self) -> None:
        n = len(self.weights)
        if n == 0 or len(self.input_tokens) != n or len(self.output_tokens) != n:
            raise ValueError("a request mix needs at least one point, with a length pair per weight")
        if not 0.0 <= self.prefix_hit_rate < 1.0:
            raise ValueError(f"prefix_hit_rate must be in [0, 1), got {self.prefix_hit_rate}")
        if np.any(self.input_tokens < 1) or np.any(self.output_tokens < 1) or np.any(self.weights < 0):
            raise ValueError("token lengths must be >= 1 and weights >= 0")
        if (self.prompt_points is None) != (self.prompt_weights is None) or (
                self.prompt_points is not None and self.prompt_weights is not None
                and len(self.prompt_points) != len(self.prompt_weights)):
            raise ValueError("prompt_points and prompt_weights come together, one weight per point")

    @classmethod
    def from_requests(cls, input_tokens: Sequence[float] | np.ndarray, output_tokens: Sequence[float] | np.ndarray,
                      prefix_hit_rate: float = 0.0) -> RequestMix:
        """A stratified summary of observed requests (a trace): output-length strata (finer toward
        the longest), each split into ``_INPUT_POINTS`` prompt-length quantiles at the stratum's mean
        output, so both marginals and their dependence survive in at most ~250 points (equal points
        merged: fixed lengths are one point).

        Raises:
            ValueError: no request, or lengths of different counts.
        """
        ins = np.asarray(input_tokens, dtype=float)
        outs = np.asarray(output_tokens, dtype=float)
        if ins.size == 0 or ins.size != outs.size:
            raise ValueError("a request mix needs at least one request, with as many prompts as outputs")
        order = np.argsort(outs, kind="stable")
        ins, outs = ins[order], outs[order]
        n = ins.size
        cuts = np.unique(np.round(np.array(_OUTPUT_EDGES) * n).astype(int))
        pts_in, pts_out, pts_w = [], [], []
        for lo, hi in itertools.pairwise(cuts):
            if hi <= lo:
                continue
            stratum = np.sort(ins[lo:hi])
            k = min(_INPUT_POINTS, hi - lo)
            bounds = np.linspace(0, hi - lo, k + 1).astype(int)
            mean_out = float(outs[lo:hi].mean())
            for a, b in itertools.pairwise(bounds):
                if b > a:
                    pts_in.append(float(stratum[a:b].mean()))
                    pts_out.append(mean_out)
                    pts_w.append((b - a) / n)
        pairs, where = np.unique(np.column_stack([pts_in, pts_out]), axis=0, return_inverse=True)
        weights = np.bincount(where.ravel(), weights=pts_w)  # equal points merged
        # the prompts' marginal on its own strata (``_PROMPT_EDGES``, ``prompt_points``)
        by_prompt = np.sort(ins)
        edges = np.unique(np.round(np.array(_PROMPT_EDGES) * n).astype(int))
        prompt_points = np.array([by_prompt[lo:hi].mean() for lo, hi in itertools.pairwise(edges) if hi > lo])
        prompt_weights = np.array([(hi - lo) / n for lo, hi in itertools.pairwise(edges) if hi > lo])
        return cls(pairs[:, 0], pairs[:, 1], weights / weights.sum(), prefix_hit_rate,
                   input_m2=float(np.mean(ins * ins)), prompt_points=prompt_points, prompt_weights=prompt_weights)

    @classmethod
    def from_means(cls, input_tokens: float, output_tokens: float, prefix_hit_rate: float = 0.0) -> RequestMix:
        """Lognormal prompt and output lengths with these means and the shape ``INPUT_SIGMA`` /
        ``OUTPUT_SIGMA`` (independent), summarised as ``from_requests`` does, deterministically.

        Raises:
            ValueError: a mean below 1 token.
        """
        if not (input_tokens >= 1 and output_tokens >= 1):
            raise ValueError(f"mean lengths must be >= 1 token, got {input_tokens} and {output_tokens}")
        q = (np.arange(200) + 0.5) / 200
        def lognormal(mean: float, sigma: float) -> np.ndarray:
            return np.maximum(np.exp(math.log(mean) - sigma * sigma / 2 + sigma * stats.norm.ppf(q)), 1.0)
        ins, outs = np.meshgrid(lognormal(input_tokens, INPUT_SIGMA), lognormal(output_tokens, OUTPUT_SIGMA))
        return cls.from_requests(ins.ravel(), outs.ravel(), prefix_hit_rate)

    def scaled(self, input_factor: float, output_factor: float) -> RequestMix:
        """The same shape with every prompt ``input_factor`` and every output ``output_factor`` times as
        long (at least 1 token): the mix whose means a forecast says the load will have.

        Raises:
            ValueError: a factor that is not a finite number > 0.
        """
        if not (0 < input_factor < math.inf and 0 < output_factor < math.inf):
            raise ValueError(f"scale factors must be finite numbers > 0, got {input_factor}, {output_factor}")
        m2 = None if self.input_m2 is None else self.input_m2 * input_factor ** 2
        prompts = None if self.prompt_points is None else np.maximum(self.prompt_points * input_factor, 1.0)
        return RequestMix(np.maximum(self.input_tokens * input_factor, 1.0),
                          np.maximum(self.output_tokens * output_factor, 1.0), self.weights, self.prefix_hit_rate,
                          self.arrival_scv, m2, prompts, self.prompt_weights)

    def with_prefix_hit_rate(self, hit: float) -> RequestMix:
        """The same lengths with another prefix-cache hit rate."""
        return replace(self, prefix_hit_rate=hit)

    @property
    def uncached_m2(self) -> float:
        """Mean squared uncached prompt length, tokens^2."""
        m2 = float(self.weights @ self.input_tokens ** 2) if self.input_m2 is None else self.input_m2
        return m2 * (1.0 - self.prefix_hit_rate) ** 2

    @property
    def mean_input(self) -> float:
        """Mean prompt length, tokens."""
        return float(self.weights @ self.input_tokens)

    @property
    def mean_output(self) -> float:
        """Mean output length, tokens."""
        return float(self.weights @ self.output_tokens)

    @property
    def uncached(self) -> np.ndarray:
        """Prompt tokens each point prefills (the prefix-cache hits drop out), tokens."""
        return self.input_tokens * (1.0 - self.prefix_hit_rate)


@dataclass(frozen=True)
class ReplicaSpec:
    """What bounds one replica: its step-time profile and its vLLM settings.

    Attributes:
        profile: step-time model of the (model, GPU).
        max_num_seqs: running-batch bound (vLLM ``--max-num-seqs``).
        max_num_batched_tokens: tokens per engine step (vLLM ``--max-num-batched-tokens``).
        block_size: KV block, tokens (one block of slack per running sequence).
        kv_cache_tokens: KV-cache capacity, tokens.
        prefill_cap: the ITL bound counts that a step prefills at most its token budget (``_itl_points``);
            False (default): the prefills arriving during a decode may all ride in its steps.
        busy_period: the ITL bound takes the prefill riding in a decode as the work of an M/G/1 busy
            period begun by the decode's own steps (``_busy_tail``: the decode lengthens with what
            rides in it, and each prefill riding joins its batch), and for one replica the TTFT bound
            takes the prefill queue's whole wait law over the prompts' marginal (``_pk_wait_sf``,
            ``_wait_to_miss``; no decode step kept for the first token, the step in flight counted
            instead, ``_step_in_flight``; the slot-wait bound, on the same slack, drops the step with
            nothing in its place, not examined); its slot-wait misses are counted over the prompts'
            marginal as its TTFT misses are (``_ttft_miss``), and its capacity is the
            rate at which the four bounds share one budget (``replica_capacity``); False (default): the
            work arriving over a fixed window of ``D x itl_s``, an upper bound of it, Kingman's tail,
            and each bound its own budget
            (docs/benchmarks.md, "Capacity model", measures both).
        backlog: (needs ``busy_period``; opt-in, ``mpc:backlog=1``) the busy-period form's prefill queue
            as a backlog serves it: prompts queued together share a step, so the queue charges each
            prompt the step's overhead per token (``s_d P / budget``, not ``ceil(P / budget) s_d``);
            and the prompts a prefill busy period has admitted before a request still decode (a
            token per mixed step), so each step of the queue carries them (``b + g E[L_in]`` each)
            and the KV bound holds their prompts (``_backlog_kv``). The queue's terms on one replica
            (a pool keeps Kingman-Whitt's queue, ``replicas``), the KV term per replica in a pool too.
            False (default): neither.
            docs/benchmarks.md, "The out-of-band cases, fourth pass", measures it.
        prompt_marginal: (opt-in, ``mpc:marginal=1``; the busy-period form does it already) on one
            replica the default form's TTFT bound reads the prompts' marginal (``RequestMix.prompt_points``)
            for its queue's service law and each request's slack (``_ttft_miss``: Kingman's tail with the
            service's ``cs^2`` over 0.5 %-wide prompt strata, and the idle misses counted on them);
            False (default): over the mix's stratified points. docs/benchmarks.md, "The out-of-band
            cases, sixth pass", measures it.
    """

    profile: PerformanceProfile
    max_num_seqs: int
    max_num_batched_tokens: int
    block_size: int
    kv_cache_tokens: int
    prefill_cap: bool = False
    busy_period: bool = False
    backlog: bool = False
    prompt_marginal: bool = False

    def __post_init__(self) -> None:
        if self.backlog and not self.busy_period:
            raise ValueError("ReplicaSpec: backlog=True refines the busy-period form; it needs busy_period=True")

    @classmethod
    def of(cls, variant: VariantSpec, engine: EngineLimits) -> ReplicaSpec:
        """The spec of one replica of ``variant`` under the fleet's engine settings."""
        return cls(get_profile(variant.profile), engine.max_num_seqs, engine.max_num_batched_tokens,
                   engine.block_size, variant.kv_cache_tokens)


@dataclass(frozen=True)
class CapacityBounds:
    """Each bound of the module docstring, requests/s; ``rps`` is their minimum. ``shared_rps``: the rate
    at which the four spend one budget together (the busy-period form's, ``replica_capacity``; inf
    where none is taken), which ``rps`` is then at most."""

    itl_rps: float
    ttft_rps: float
    seqs_rps: float
    kv_rps: float
    shared_rps: float = math.inf

    @property
    def rps(self) -> float:
        """The replica's capacity: the tightest bound (and at most ``shared_rps``), requests/s."""
        return min(self.itl_rps, self.ttft_rps, self.seqs_rps, self.kv_rps, self.shared_rps)

    @property
    def binding(self) -> str:
        """Which of the four bounds is the tightest: ``itl``, ``ttft``, ``seqs`` or ``kv``."""
        named = {"itl": self.itl_rps, "ttft": self.ttft_rps, "seqs": self.seqs_rps, "kv": self.kv_rps}
        return min(named, key=lambda k: named[k])


@dataclass(frozen=True)
class OperatingPoint:
    """One replica's fluid steady state at an arrival rate (module docstring).

    Attributes:
        rate_rps: arrival rate, requests/s.
        step_s: mean engine step (= mean time per output token), seconds.
        decode_step_s: mean step without its prefill share, seconds.
        decoding: sequences decoding at once.
        prefill_s: mean prefill service time of a request, seconds.
        time_in_system_s: mean prefill plus decode time of a request, seconds.
        concurrency: requests on the replica (Little's law), running and prefilling.
        kv_tokens: mean KV tokens resident.
    """

    rate_rps: float
    step_s: float
    decode_step_s: float
    decoding: float
    prefill_s: float
    time_in_system_s: float
    concurrency: float
    kv_tokens: float


def marginal_costs(profile: PerformanceProfile) -> tuple[float, float, float, float]:
    """``(t0, a, b, g)``: seconds per step, per prefill token, per decode sequence, per context token.

    ``t0`` is ``PerformanceProfile.fixed_step_s``. For a roofline-form profile the model stays linear:
    a step's prefill is priced ``t0 + a P``, where the profile gives ``step_overhead_s + max(weight_read_s,
    a P)``; that is at most ``weight_read_s`` more (a chunk under the knee is charged, not hidden),
    so the bounds err on the side of fewer requests per replica."""
    return (profile.fixed_step_s, profile.prefill_s_per_token, profile.decode_s_per_seq,
            profile.seconds_per_ctx_token)


_DERIVED: weakref.WeakKeyDictionary[RequestMix, dict[int, tuple[ReplicaSpec, np.ndarray, np.ndarray, float]]] = \
    weakref.WeakKeyDictionary()
"""mix -> id(spec) -> (spec, ``_prefill_tokens``, ``_decode_work``, ``_work``): pure functions of the
pair, which a capacity search evaluates at every rate it tries (issue 33: most of a tick at 1x)."""


def _derived(spec: ReplicaSpec, mix: RequestMix) -> tuple[np.ndarray, np.ndarray, float]:
    """``(_prefill_tokens, _decode_work, _work)`` of ``spec`` serving ``mix``, computed once per pair
    (the arrays read-only: they are shared)."""
    per_spec = _DERIVED.get(mix)
    if per_spec is None:
        per_spec = _DERIVED[mix] = {}
    hit = per_spec.get(id(spec))
    if hit is not None and hit[0] is spec:
        return hit[1], hit[2], hit[3]
    # Prefill-token equivalents each point computes: its uncached tokens and the attention pairs they
    # form with the whole prompt before them (``PerformanceProfile.prefill_equivalent``).
    q = spec.profile.prefill_equivalent(mix.uncached, mix.input_tokens - mix.uncached)
    # Seconds of step time each point's decode adds over its life (``b L_out + g sum of contexts``).
    _, a, b, g = marginal_costs(spec.profile)
    lin, lout = mix.input_tokens, mix.output_tokens
    dec = b * lout + g * (lin * lout + lout * lout / 2)
    # W: mean seconds of step time one request brings beyond the per-step overhead.
    work = float(mix.weights @ (a * q + dec))
    for arr in (q, dec):
        if isinstance(arr, np.ndarray):
            arr.flags.writeable = False
    per_spec[id(spec)] = (spec, q, dec, work)
    return q, dec, work


def _decode_work(spec: ReplicaSpec, mix: RequestMix) -> np.ndarray:
    """Seconds of step time each point's decode adds over its life (``b L_out + g sum of contexts``)."""
    return _derived(spec, mix)[1]


def _prefill_tokens(spec: ReplicaSpec, mix: RequestMix) -> np.ndarray:
    """Prefill-token equivalents each point computes: its uncached tokens and the attention pairs
    they form with the whole prompt before them (``PerformanceProfile.prefill_equivalent``)."""
    return _derived(spec, mix)[0]


def _work(spec: ReplicaSpec, mix: RequestMix) -> float:
    """``W``: mean seconds of step time one request brings beyond the per-step overhead."""
    return _derived(spec, mix)[2]


def mean_itl_rate(spec: ReplicaSpec, mix: RequestMix, itl_s: float) -> float:
    """The rate at which the mean step time (= mean ITL) reaches ``itl_s``: ``(1 - t0 / itl_s) / W``.

    Raises:
        ValueError: ``itl_s`` is not above the profile's fixed step time (no rate can meet it).
    """
    t0 = spec.profile.fixed_step_s
    if itl_s <= t0:
        raise ValueError(f"ITL target {itl_s}s is below the fixed step time {t0:.4f}s of {spec.profile.name}")
    return (1.0 - t0 / itl_s) / _work(spec, mix)


def speed_factor(spec: ReplicaSpec, mix: RequestMix, rate_rps: float, mean_itl_s: float) -> float:
    """How many times longer than its profile says a replica's steps are, from its mean ITL at a rate.

    The fluid model with every step ``alpha`` times as long has mean step time ``s = alpha t0 / (1 -
    lam alpha W)``; solved for the observed ``s``: ``alpha = s / (t0 + lam W s)``. 1 for a replica that
    runs as profiled; above 1 for a slower one (the online correction of ``controllers.mpc``).

    Args:
        rate_rps: requests/s one replica serves (>= 0).
        mean_itl_s: its observed mean inter-token latency (mean step time), seconds (> 0).

    Raises:
        ValueError: a negative rate or a non-positive ITL.
    """
    if rate_rps < 0 or not mean_itl_s > 0:
        raise ValueError(f"need rate_rps >= 0 and mean_itl_s > 0, got {rate_rps} and {mean_itl_s}")
    return mean_itl_s / (spec.profile.fixed_step_s + rate_rps * _work(spec, mix) * mean_itl_s)


def utilisation(spec: ReplicaSpec, mix: RequestMix, rate_rps: float) -> float:
    """``lam W``: the fraction of the fluid limit ``1 / W`` a replica serving ``rate_rps`` runs at, by
    its profile (the mean step time is ``t0 / (1 - lam W)``)."""
    return rate_rps * _work(spec, mix)


def operating_point(spec: ReplicaSpec, mix: RequestMix, rate_rps: float) -> OperatingPoint:
    """The fluid steady state at ``rate_rps`` (module docstring).

    Raises:
        ValueError: ``rate_rps`` negative, or at or above the fluid limit ``1 / W`` (the queue grows forever).
    """
    t0 = spec.profile.fixed_step_s
    work = _work(spec, mix)
    if rate_rps < 0 or rate_rps * work >= 1.0:
        raise ValueError(f"rate {rate_rps:g} req/s is outside [0, {1 / work:.4g}) of {spec.profile.name} "
                         "for this mix (the fluid limit)")
    s = t0 / (1.0 - rate_rps * work)
    wdec = _decode_work(spec, mix)
    decoding = rate_rps * s * float(mix.weights @ mix.output_tokens)
    sd = t0 + rate_rps * s * float(mix.weights @ wdec)
    prefill = _prefill_s(spec, mix, decoding, sd)
    tsys = prefill + mix.output_tokens * s
    lin = mix.input_tokens + spec.block_size
    lout = mix.output_tokens
    token_s = prefill * lin + s * (lin * lout + lout * lout / 2)
    return OperatingPoint(rate_rps, s, sd, decoding, float(mix.weights @ prefill), float(mix.weights @ tsys),
                          rate_rps * float(mix.weights @ tsys), rate_rps * float(mix.weights @ token_s))


def _prefill_s(spec: ReplicaSpec, mix: RequestMix, decoding: float, decode_step_s: float) -> np.ndarray:
    """Prefill service time of each point: its prefill work plus the steps its chunks ride in, seconds."""
    a = spec.profile.prefill_s_per_token
    budget = max(spec.max_num_batched_tokens - decoding, 1.0)
    p = mix.uncached
    return a * _prefill_tokens(spec, mix) + np.ceil(p / budget) * decode_step_s


def _gamma_sf(x: np.ndarray | float, mean: np.ndarray | float, var: np.ndarray | float) -> np.ndarray:
    """P(X > x) for a gamma variable with this mean and variance (0 where the mean is 0)."""
    mean = np.asarray(mean, dtype=float)
    var = np.maximum(np.asarray(var, dtype=float), 1e-300)
    with np.errstate(divide="ignore", invalid="ignore"):
        shape = mean * mean / var
        scale = var / np.maximum(mean, 1e-300)
        # scipy.stats.gamma.sf(x, shape, scale=scale) (scipy 1.17 ``rv_continuous.sf``) without its
        # generic argument handling, a large share of the control loop's tick at 1x: the same
        # ``gammaincc(shape, x / scale)`` where shape, scale > 0 and 0 < x / scale < inf, 1 at or below
        # 0, 0 at inf, NaN where shape or scale is not > 0 or x / scale is NaN; so the same bits.
        z = np.asarray(np.asarray(x) / scale, dtype=float)
        good = (shape > 0) & (scale > 0)
        out = np.where(good & (z > 0) & (z < np.inf), special.gammaincc(shape, z), 0.0)
        out = np.where(good & (z <= 0), 1.0, out)
        out = np.where(~good | np.isnan(z), np.nan, out)
    return np.where(mean > 0, out, 0.0)


def _erlang_c(servers: int, load: float) -> float:
    """Probability that an arrival waits in an M/M/c queue with ``servers`` and offered ``load`` (Erlangs)."""
    if load >= servers:
        return 1.0
    b = 1.0
    for k in range(1, servers + 1):  # Erlang B by its stable recursion
        b = load * b / (k + load * b)
    return servers * b / (servers - load * (1.0 - b))


_NODES, _NODE_WEIGHTS = np.polynomial.legendre.leggauss(32)
_U = (_NODES + 1.0) / 2.0  # Gauss-Legendre nodes on (0, 1)
_UW = _NODE_WEIGHTS / 2.0
KENDALL_MAX_COUNT = 20.0  # arrivals over a decode beyond which _busy_tail takes the fixed window
_POWER = 8.0  # y = s u^8: smooths a gamma density's y^(k-1) at 0 for shapes above 1/8


def _initial_work(spec: ReplicaSpec, mix: RequestMix, op: OperatingPoint, rate: float, budget: float,
                  replicas: int) -> np.ndarray:
    """Seconds of each point's own steps over which arriving prefills ride in its decode (the ``x``
    of ``_busy_tail``): its last prefill step (``tau_0``: the mean step plus its own last chunk), its
    first ``D - 1`` decode-only steps, and the share of its time before ``tau_0`` (its mean wait in
    the prefill queue and its earlier chunks' steps, FCFS: what arrives then queues behind it) whose
    arrivals step 0 cannot take in beside its last chunk (``room``, the budget left)."""
    a = spec.profile.prefill_s_per_token
    p = mix.uncached
    chunks = np.maximum(np.ceil(p / budget), 1.0)
    last = p - budget * (chunks - 1.0)
    q_last = spec.profile.prefill_equivalent(last, mix.input_tokens - last)
    x = op.step_s + a * q_last + np.maximum(mix.output_tokens - 2.0, 0.0) * op.decode_step_s
    if replicas == 1:
        wait = _pk_mean_wait(*_queue_points(spec, mix, op.decoding, op.decode_step_s, rate), rate)
    else:
        queue = _prefill_queue(mix, _prefill_s(spec, mix, op.decoding, op.decode_step_s), rate, replicas)
        wait = math.inf if queue is None else queue[0] / queue[1]
    if not math.isfinite(wait):
        return np.full_like(x, np.inf)
    before = wait + a * (_prefill_tokens(spec, mix) - q_last) + (chunks - 1.0) * op.decode_step_s
    # Tokens A arriving over ``before`` (compound Poisson, taken as gamma): step 0 takes ``room`` of
    # them, E[(A - room)+] = E[A] SF_{k+1}(room) - room SF_k(room) waits for the decode steps.
    ep = float(mix.weights @ p)
    mean_a = rate * before * ep
    var_a = rate * before * max(mix.uncached_m2, ep * ep)
    with np.errstate(divide="ignore", invalid="ignore"):
        k, theta = mean_a * mean_a / var_a, var_a / mean_a
        room = np.maximum(budget - last, 0.0)
        over = mean_a * special.gammaincc(k + 1.0, room / theta) - room * special.gammaincc(k, room / theta)
        share = np.where(mean_a > 0, np.clip(over / mean_a, 0.0, 1.0), 0.0)
    return x + share * before


def _busy_tail_one(x: np.ndarray, slack: np.ndarray, rate: float, c: float) -> np.ndarray:
    """P(more than ``slack`` of prefill rides in a decode), one prefill size of ``c`` seconds:
    Takacs' formula (the busy period of an M/D/1 queue begun by ``x`` seconds of work serves ``n``
    arrivals with probability ``x / (x + n c) Pois(n; rate (x + n c))``)."""
    if c <= 0:
        return np.zeros_like(x)
    out = np.empty_like(x)
    for i, (xi, si) in enumerate(zip(np.broadcast_to(x, slack.shape), slack, strict=True)):
        if not np.isfinite(xi):
            out[i] = 1.0
            continue
        n = np.arange(int(np.floor(max(si, 0.0) / c)) + 1)
        t = xi + n * c
        out[i] = 1.0 - float(np.sum(xi / t * stats.poisson.pmf(n, rate * t)))
    return np.clip(out, 0.0, 1.0)


def _busy_tail(x: np.ndarray, slack: np.ndarray, rate: float, m1: float | np.ndarray, m2: float | np.ndarray,
               scv: float) -> np.ndarray:
    """P(more than ``slack`` seconds of prefill rides in a decode begun with ``x`` seconds of its own
    steps), prefills arriving at ``rate`` with cost moments ``m1``, ``m2`` (seconds, seconds^2; one
    for all points or one per point).

    The prefill riding in a decode lengthens it, and what arrives meanwhile rides too: the decode
    ends at the first ``t`` with ``t = x + S(t)`` (``S`` the prefill cost arrived by ``t``), the busy
    period of an M/G/1 queue begun by ``x`` of work. Kendall's identity gives its law: an atom
    ``exp(-rate x)`` at ``x`` and density ``x / t f_S(t)(t - x)``; a decode misses when it lasts
    beyond ``x + slack``. ``S(t)``'s continuous part is taken as a gamma with its moments given at
    least one arrival (the count's variance ``scv`` times a Poisson's for bursty or pooled
    arrivals). The fixed-window form ``P(S(x + slack) > slack)`` is an upper bound of this.

    Sources: Kendall, "Some problems in the theory of queues", J. R. Stat. Soc. B 13 (1951) (the
    busy period's density ``x / t f_S(t)(t - x)``); Takacs, "Combinatorial Methods in the Theory of
    Stochastic Processes" (1967) (the same for one job size, ``_busy_tail_one``). The integral is
    32-point Gauss-Legendre on ``y = slack u^8`` (a gamma density's ``y^(k-1)`` at 0 smoothed for
    shapes above 1/8): within 5 % of a 20,000-point sum where at most ``KENDALL_MAX_COUNT`` arrive,
    with an absolute floor of about 1e-4 (1 minus the atom and the integral)."""
    x = np.asarray(x, dtype=float)
    s = np.maximum(np.asarray(slack, dtype=float), 0.0)
    m1 = np.broadcast_to(np.asarray(m1, dtype=float), x.shape)
    m2 = np.broadcast_to(np.asarray(m2, dtype=float), x.shape)
    y = s[:, None] * _U[None, :] ** _POWER  # (points, nodes)
    dy = s[:, None] * _POWER * _U[None, :] ** (_POWER - 1.0) * _UW[None, :]
    xx = x[:, None]
    t = xx + y
    mu = rate * t * m1[:, None]
    v1 = np.maximum(m2 - (1.0 - scv) * m1 * m1, 0.0)  # one arrival's share of the count's variance
    var = rate * t * np.maximum(v1, 1e-300)[:, None]
    p0 = np.exp(-rate * t)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        mc = mu / (1.0 - p0)
        vc = np.maximum((var + mu * mu) / (1.0 - p0) - mc * mc, 1e-300)
        shape = mc * mc / vc
        scale = vc / mc
        dens = (1.0 - p0) * stats.gamma.pdf(y, shape, scale=scale)
        ended = np.exp(-rate * x) + np.sum(xx / t * dens * dy, axis=1)
    out = np.clip(np.nan_to_num(1.0 - ended, nan=1.0), 0.0, 1.0)
    # Past ``KENDALL_MAX_COUNT`` arrivals the integrand is a narrow peak the nodes miss: there the
    # fixed window's form (an upper bound, so a point's miss only steps up as the rate grows).
    window = x + s
    many = rate * window > KENDALL_MAX_COUNT
    if np.any(many):
        fixed = _gamma_sf(s, rate * window * m1, rate * window * v1)
        out = np.where(many, fixed, out)
    return np.where(np.isfinite(x), out, 1.0)


def _itl_points(spec: ReplicaSpec, mix: RequestMix, rate: float, itl_s: float, replicas: int = 1) -> np.ndarray:
    """Share of each point's requests missing the ITL target at ``rate`` (the ITL bound's misses), with
    ``replicas`` behind a least-loaded router (``replica_capacity``)."""
    op = operating_point(spec, mix, rate)
    a = spec.profile.prefill_s_per_token
    if op.decode_step_s >= itl_s:
        return np.ones_like(mix.weights)
    p = mix.uncached
    q = _prefill_tokens(spec, mix)
    d = mix.output_tokens - 1.0
    budget = max(spec.max_num_batched_tokens - op.decoding, 1.0)
    slack = d * (itl_s - op.decode_step_s)
    if spec.prefill_cap:
        # A step prefills at most its budget of tokens, so a decode step is at most the decode-only
        # step plus the dearest chunk (the budget's tokens at the end of the longest prompt): where
        # that is within the target, no burst of prefills can make a decode miss it (X <= D c).
        chunk = np.minimum(p, budget)
        dearest = a * float(np.max(spec.profile.prefill_equivalent(chunk, mix.input_tokens - chunk)))
        if op.decode_step_s + dearest <= itl_s:
            return np.zeros_like(mix.weights)
    one_size = replicas == 1 and mix.weights.size == 1 and np.isclose(mix.uncached_m2, float(p[0]) ** 2)
    eq = float(mix.weights @ q)
    # E[Q^2] taken as E[P^2] scaled by (E[Q] / E[P])^2: the attention share rides on the prompt length.
    m2 = mix.uncached_m2 * (eq / max(float(mix.weights @ p), 1e-300)) ** 2
    if spec.busy_period:
        x = _initial_work(spec, mix, op, rate, budget, replicas)
        # the arrivals' second moment from the prompts' marginal, whose long prompts the points
        # average away (the attention's share grows with the square of the prompt)
        qm, wm = _marginal_prefill_tokens(spec, mix)
        m2 = float(wm @ (qm * qm))
        if one_size:
            # One request size: the count of prefills riding in a decode is Takacs' (a gamma, continuous,
            # puts mass between the counts and overstates the tail up to ~2x there).
            miss = _busy_tail_one(x, slack, rate, a * float(q[0]))
        else:
            # A prefill riding in the decode also joins its batch: each of its remaining steps
            # decodes one more sequence (``b`` plus ``g`` per context token), for the shorter of
            # its output and about half the decode (it arrives uniformly within it).
            _, _, b, g = marginal_costs(spec.profile)
            held = np.minimum(mix.output_tokens[None, :], d[:, None] / 2.0) @ mix.weights
            ctx = float(mix.weights @ (mix.input_tokens + mix.output_tokens / 2.0))
            joins = (b + g * ctx) * held
            m1 = a * eq + joins
            miss = _busy_tail(x, slack, rate, m1, a * a * m2 + 2.0 * a * eq * joins + joins * joins,
                              mix.arrival_scv / replicas)
        return np.where(d >= 1, miss, 0.0)
    window = d * itl_s
    mean = rate * window * a * eq
    # Var X = E[N] Var(aQ) + Var(N) (a E[Q])^2, with Var(N) = E[N] ca^2 / replicas: a least-loaded
    # router gives each replica about every n-th arrival (the counts of an Erlang-n renewal process),
    # and bursty arrivals' counts vary ca^2 (their index of dispersion, ``models.arrivals``) times a
    # Poisson count's.
    var = rate * window * a * a * max(m2 - (1.0 - mix.arrival_scv / replicas) * eq * eq, 0.0)
    if one_size:
        # One request size: X is a Poisson count of one prefill's cost, whose tail is the Poisson's
        # (the gamma, continuous, puts mass between the counts and overstates it up to ~2x there).
        c = a * float(q[0])
        miss = stats.poisson.sf(np.floor(slack / c), rate * window) if c > 0 else np.zeros_like(d)
    else:
        miss = _gamma_sf(slack, mean, var)
    return np.where(d >= 1, miss, 0.0)


def _ttft_slack(spec: ReplicaSpec, mix: RequestMix, op: OperatingPoint, ttft_s: float) -> tuple[np.ndarray, np.ndarray]:
    """(prefill service time, time left for waiting) of each point, seconds. The default form keeps a
    whole decode step for the step in flight when a request arrives; the busy-period form keeps none
    (its first token comes at the end of its last prefill step, and an idle replica starts that at
    once: ``autoscaler.simulator.engine``), and counts the step in flight in ``_ttft_points``
    (``_step_in_flight``). ``_seqs_points`` reads this slack too, so the busy-period form's slot-wait
    bound drops the decode step with nothing in its place (not examined against the simulator)."""
    service = _prefill_s(spec, mix, op.decoding, op.decode_step_s)
    return service, ttft_s - service - (0.0 if spec.busy_period else op.decode_step_s)


def _step_in_flight(op: OperatingPoint, slack: np.ndarray, rho: float) -> np.ndarray:
    """Share of each point's requests (busy-period form) that find the prefill queue empty
    but a decode step in flight, and miss for waiting out the rest of it: a request arriving while the
    replica decodes waits for that step's end (vLLM schedules at step boundaries; the simulator cuts a
    decode run there, ``Replica._interrupt``), while one arriving behind prefill work has that wait in
    the prefill queue's already (Pollaczek-Khinchine's residual service). The prefill queue is empty
    with probability ``1 - rho`` (``rho``: the probability that an arrival waits, the prefill
    utilisation on one replica, Erlang C for a pool); a sequence decodes with probability ``1 -
    exp(-decoding)`` (its sequences taken as Poisson in number, an M/G/inf occupancy: 0 on an idle
    replica, so the idle misses are the simulator's); the rest of a step is uniform on ``[0, s_d]``, so it outlasts a
    slack of ``z`` in ``[0, s_d)`` with probability ``1 - z / s_d``. (``slack``: seconds, per point;
    negative: counted as a miss elsewhere.)"""
    sd = op.decode_step_s
    decoding = 1.0 - math.exp(-op.decoding)
    over = np.clip(1.0 - np.maximum(slack, 0.0) / sd, 0.0, 1.0) if sd > 0 else np.zeros_like(slack)
    return (1.0 - rho) * decoding * np.where(slack < 0, 0.0, over)


def _ttft_points(spec: ReplicaSpec, mix: RequestMix, rate: float, ttft_s: float, replicas: int = 1,
                 op: OperatingPoint | None = None) -> np.ndarray:
    """Share of each point's requests missing the TTFT target at ``rate`` (per replica) for the prefill
    queue, with ``replicas`` pooled behind a least-loaded router (``replica_capacity``); ``op``: the
    operating point to read (default ``mix``'s own at ``rate``; ``_ttft_miss`` gives the whole mix's
    to its prompts' marginal)."""
    op = operating_point(spec, mix, rate) if op is None else op
    service, slack = _ttft_slack(spec, mix, op, ttft_s)
    if spec.busy_period and replicas == 1:
        # the wait's whole law (Pollaczek-Khinchine) over the prompts' marginal: a few long prompts
        # make the tail that Kingman's exponential, from the second moment alone, leaves out
        served, weights = _queue_points(spec, mix, op.decoding, op.decode_step_s, rate)
        need = _wait_to_miss(spec, mix, op, rate, slack)
        if mix.arrival_scv != 1.0:
            # bursty arrivals (``models.arrivals``): the Poisson law's waits stretched by Kingman's
            # ratio (ca^2 + cs^2) / (1 + cs^2), the heavy-traffic scaling of the wait
            es = float(weights @ served)
            cs2 = float(weights @ (served * served)) / (es * es) - 1.0
            need = need * (1.0 + cs2) / (mix.arrival_scv + cs2)
        waits = _pk_wait_sf(served, weights, rate, need)
        rho = min(rate * float(weights @ served), 1.0)
        return np.minimum(waits + _step_in_flight(op, slack, rho), 1.0)
    queue = _prefill_queue(mix, service, rate, replicas)
    if queue is None:
        return np.ones_like(mix.weights)
    wait, decay = queue
    waits = np.where(slack < 0, 1.0, wait * np.exp(-decay * np.maximum(slack, 0.0)))
    if spec.busy_period:  # its slack keeps no decode step (``_ttft_slack``): the step in flight instead
        return np.minimum(waits + _step_in_flight(op, slack, wait), 1.0)
    return waits


def _prefill_queue(mix: RequestMix, service: np.ndarray, rate: float, replicas: int) -> tuple[float, float] | None:
    """The prefill queue's (probability of waiting, exponential decay rate of the wait's tail, 1/s)
    for prefill service times ``service`` (s per point) at ``rate`` per replica, ``replicas`` pooled
    (module docstring, TTFT: Erlang C with Kingman's heavy-traffic tail; the mean wait is their
    ratio); None when the queue is unstable (utilisation >= 1)."""
    es = float(mix.weights @ service)
    rho = rate * es
    if rho >= 1.0:
        return None
    cs2 = float(mix.weights @ (service * service)) / (es * es) - 1.0
    wait = _erlang_c(replicas, replicas * rho)  # = rho for one replica
    return wait, 2.0 * replicas * (1.0 - rho) / (es * (mix.arrival_scv + cs2))


PK_CELLS = 1024
"""Grid cells over ``[0, largest slack]`` of ``_pk_wait_sf``'s discretised residual service (rounded to
the nearest cell, so the k-fold sums' errors have zero mean)."""
_PK_TILT = 25.0  # e^-25: what the FFT's wrap-around leaves of the mass beyond its period


def _queue_points(spec: ReplicaSpec, mix: RequestMix, decoding: float, decode_step_s: float, rate: float = 0.0
                  ) -> tuple[np.ndarray, np.ndarray]:
    """(prefill service time of each point of the prompts' marginal, s (``_prefill_s`` of a request of
    that prompt), their weights): ``RequestMix.prompt_points``, the mix's own points where it has none.
    With ``ReplicaSpec.backlog`` the queue's service at ``rate`` (requests/s) instead:
    ``_backlog_service``."""
    if spec.backlog:
        q, w = _marginal_prefill_tokens(spec, mix)
        pm = mix.uncached if mix.prompt_points is None else mix.prompt_points * (1.0 - mix.prefix_hit_rate)
        lin = mix.input_tokens if mix.prompt_points is None else mix.prompt_points
        budget = max(spec.max_num_batched_tokens - decoding, 1.0)
        return _backlog_service(spec, q, pm, w, float(w @ lin), budget, decode_step_s, rate)[0], w
    if mix.prompt_points is None or mix.prompt_weights is None:
        return _prefill_s(spec, mix, decoding, decode_step_s), mix.weights
    budget = max(spec.max_num_batched_tokens - decoding, 1.0)
    q, w = _marginal_prefill_tokens(spec, mix)
    return spec.profile.prefill_s_per_token * q + np.ceil(mix.prompt_points * (1.0 - mix.prefix_hit_rate) / budget) \
        * decode_step_s, w


def _earlier_in_busy_period(service: np.ndarray, weights: np.ndarray, rate: float) -> float:
    """Mean number of requests an M/G/1 busy period has served before the one in service, taken over
    its service time (requests; inf when ``rate E[S] >= 1``). The number a busy period serves, ``N``,
    satisfies ``N = 1 + N_1 + ... + N_A`` (``A``: the arrivals during one service, ``Var A = rho (1 -
    rho) + rate^2 E[S^2]``), so ``E[N] = 1 / (1 - rho)`` and ``Var N = Var A / (1 - rho)^3``; the k-th of
    them has ``k - 1`` before it, which averages ``E[N (N - 1)] / (2 E[N])`` over the busy period's
    requests (their services taken as independent of ``N``). One size at ``rho = 1/2``: ``E[N] = 2``,
    ``Var N = 4``, 1.5 before. Source: the busy period's count by its branching identity (Takacs 1962,
    "Introduction to the Theory of Queues", ch. 2)."""
    es = float(weights @ service)
    rho = rate * es
    if rho >= 1.0:
        return math.inf
    var_a = rho * (1.0 - rho) + rate * rate * float(weights @ (service * service))
    mean_n = 1.0 / (1.0 - rho)
    var_n = var_a / (1.0 - rho) ** 3
    return (var_n + mean_n * mean_n - mean_n) / (2.0 * mean_n)


def _backlog_service(spec: ReplicaSpec, q: np.ndarray, p: np.ndarray, weights: np.ndarray, mean_input: float,
                     budget: float, decode_step_s: float, rate: float) -> tuple[np.ndarray, float]:
    """(each point's prefill service in a backlog, s; the decoders its busy period adds, requests) for
    prompts of ``q`` prefill-token equivalents and ``p`` uncached tokens with ``weights``, ``mean_input``
    prompt tokens on average, at ``rate`` (``ReplicaSpec.backlog``).

    Two terms, both measured on the simulator (docs/benchmarks.md, "third pass"):
    - queued prompts share a step (two 4,000-token prompts fill one 8,189-token step), so a prompt
      is charged the step's overhead per token, ``s P / budget``, where the default charges each of
      its steps whole, ``ceil(P / budget) s``;
    - the prompts a busy period admitted before it have barely decoded (one token per mixed step),
      so each step carries them: ``s = s_d + (b + g mean_input) n`` with ``n`` the requests served
      before in the busy period (``_earlier_in_busy_period``, over the first term's service).
    By hand, H100 profile, 4,000-token prompts, budget 8,189, ``s_d`` 0.0085 s, 3.75 req/s: the first
    term alone 0.1098 s a prompt (the default's 0.1141 s), in tests/unit/test_capacity_backlog.py."""
    a = spec.profile.prefill_s_per_token
    _, _, b, g = marginal_costs(spec.profile)
    share = p / budget
    plain = a * q + share * decode_step_s
    extra = _earlier_in_busy_period(plain, weights, rate)
    if not math.isfinite(extra):
        return plain, extra
    return a * q + share * (decode_step_s + (b + g * mean_input) * extra), extra


def _marginal_prefill_tokens(spec: ReplicaSpec, mix: RequestMix) -> tuple[np.ndarray, np.ndarray]:
    """(prefill-token equivalents of each point of the prompts' marginal (``_prefill_tokens``' rule),
    their weights); the mix's own points where it has no marginal."""
    if mix.prompt_points is None or mix.prompt_weights is None:
        return _prefill_tokens(spec, mix), mix.weights
    uncached = mix.prompt_points * (1.0 - mix.prefix_hit_rate)
    return spec.profile.prefill_equivalent(uncached, mix.prompt_points - uncached), mix.prompt_weights


def _pk_wait_sf(service: np.ndarray, weights: np.ndarray, rate: float, t: np.ndarray) -> np.ndarray:
    """P(W > t) for each ``t`` (s): the FCFS wait of an M/G/1 queue whose service is ``service`` (s)
    with probabilities ``weights``, arrivals at ``rate`` (1/s); 1 everywhere when ``rate E[S] >= 1``.

    Pollaczek-Khinchine in Benes' form: ``W`` is a geometric(``rho``) number of residual service
    times (density ``P(S > u) / E[S]``), so ``P(W <= t) = (1 - rho) sum_k rho^k R^{*k}(t)``, exact
    for any service law, where Kingman's exponential tail (``_prefill_queue``) keeps only its second
    moment and misses what a few long prompts add. The residual is discretised on ``PK_CELLS`` cells
    of ``[0, max t]`` (sums beyond it never fall back inside: every term is >= 0) and the series
    summed in one FFT, exponentially tilted so that its wrap-around is ``e^-25`` of the mass beyond
    the period. Source: Asmussen, "Applied Probability and Queues" (2nd ed., 2003), VIII.5 (the
    Pollaczek-Khinchine formula as a geometric compound of the residual law)."""
    t = np.asarray(t, dtype=float)
    es = float(weights @ service)
    rho = rate * es
    if rho >= 1.0:
        return np.ones_like(t)
    top = float(np.max(t, initial=0.0))
    if top <= 0.0 or es <= 0.0:
        return np.where(t < 0, 1.0, np.where(t > 0, 0.0, rho))
    h = top / PK_CELLS
    edges = (np.arange(PK_CELLS + 1) + 0.5) * h  # cell i is [(i - 1/2) h, (i + 1/2) h), cell 0 from 0
    residual_cdf = (np.minimum(service[None, :], edges[:, None]) @ weights) / es
    mass = np.diff(residual_cdf, prepend=0.0)
    n = 2 * (PK_CELLS + 1)
    tilt = np.exp(-_PK_TILT / n * np.arange(n))
    padded = np.zeros(n)
    padded[:PK_CELLS + 1] = mass
    spectrum = np.fft.rfft(padded * tilt)
    law = np.fft.irfft((1.0 - rho) / (1.0 - rho * spectrum), n)[:PK_CELLS + 1] / tilt[:PK_CELLS + 1]
    law[0] = max(law[0], 0.0)
    cdf = np.minimum(np.cumsum(np.maximum(law, 0.0)), 1.0)
    at = np.concatenate([[0.0], edges])
    below = np.interp(t, at, np.concatenate([[1.0 - rho], cdf]))
    return np.where(t < 0, 1.0, np.clip(1.0 - below, 0.0, 1.0))


def _expected_excess(mean: np.ndarray, var: float | np.ndarray, room: np.ndarray) -> np.ndarray:
    """E[(A - room)+] for a gamma ``A`` of this mean and variance, elementwise (0 where the mean is 0):
    ``E[A] SF_{k+1}(room) - room SF_k(room)`` with shape ``k`` and scale ``theta``."""
    with np.errstate(divide="ignore", invalid="ignore"):
        k, theta = mean * mean / var, var / mean
        over = mean * special.gammaincc(k + 1.0, room / theta) - room * special.gammaincc(k, room / theta)
    return np.where(mean > 0, np.clip(np.nan_to_num(over), 0.0, mean), 0.0)


_WAIT_BISECTIONS = 30  # 2^-30 of the TTFT slack


def _wait_to_miss(spec: ReplicaSpec, mix: RequestMix, op: OperatingPoint, rate: float, slack: np.ndarray
                  ) -> np.ndarray:
    """The wait in the prefill queue past which each point misses its TTFT target, s: the ``w`` with
    ``w + a c E[min(A(w + e), room)] = slack``. The prompts arriving during its wait and its earlier
    chunks' steps ``e`` (``A``: tokens, compound Poisson, as gamma) queue behind it, and the scheduler
    fills its last prefill step's budget left (``room``) with them, so its first token waits for their
    prefill too (``c``: prefill-token equivalents per token of the mix). ``slack`` itself where it is
    negative."""
    a = spec.profile.prefill_s_per_token
    budget = max(spec.max_num_batched_tokens - op.decoding, 1.0)
    p = mix.uncached
    chunks = np.maximum(np.ceil(p / budget), 1.0)
    last = p - budget * (chunks - 1.0)
    room = np.maximum(budget - last, 0.0)
    q_last = spec.profile.prefill_equivalent(last, mix.input_tokens - last)
    # its earlier chunks' steps: what arrives then queues behind it too
    earlier = a * (_prefill_tokens(spec, mix) - q_last) + (chunks - 1.0) * op.decode_step_s
    qm, wm = _marginal_prefill_tokens(spec, mix)
    pm = (mix.uncached if mix.prompt_points is None else mix.prompt_points * (1.0 - mix.prefix_hit_rate))
    ep = float(wm @ pm)
    per_token = a * float(wm @ qm) / max(ep, 1e-300)
    var_per_s = rate * max(float(wm @ (pm * pm)), ep * ep)

    def cost(w: np.ndarray) -> np.ndarray:
        mean = rate * (w + earlier) * ep
        return w + per_token * (mean - _expected_excess(mean, var_per_s * (w + earlier), room))
    lo, hi = np.zeros_like(slack), np.maximum(slack, 0.0)
    for _ in range(_WAIT_BISECTIONS):
        mid = (lo + hi) / 2
        over = cost(mid) > slack
        lo, hi = np.where(over, lo, mid), np.where(over, mid, hi)
    return np.where(slack < 0, slack, lo)


def _pk_mean_wait(service: np.ndarray, weights: np.ndarray, rate: float) -> float:
    """Mean FCFS wait of that M/G/1 queue, s: ``rate E[S^2] / (2 (1 - rho))`` (Pollaczek-Khinchine);
    inf when ``rho >= 1``."""
    rho = rate * float(weights @ service)
    return math.inf if rho >= 1.0 else rate * float(weights @ (service * service)) / (2.0 * (1.0 - rho))


def _seqs_points(spec: ReplicaSpec, mix: RequestMix, rate: float, ttft_s: float,
                 op: OperatingPoint | None = None) -> np.ndarray:
    """Share of each point's requests missing the TTFT target at ``rate`` waiting for a batch slot;
    ``op`` as ``_ttft_points``'. Its slack is ``_ttft_slack``'s: in the busy-period form without the
    decode step, and no step in flight added here (unlike ``_ttft_points``; not examined)."""
    op = operating_point(spec, mix, rate) if op is None else op
    load = op.concurrency
    if load >= spec.max_num_seqs:
        return np.ones_like(mix.weights)
    _, slack = _ttft_slack(spec, mix, op, ttft_s)
    decay = (spec.max_num_seqs - load) / op.time_in_system_s
    wait = _erlang_c(spec.max_num_seqs, load)
    return np.where(slack < 0, 1.0, wait * np.exp(-decay * np.maximum(slack, 0.0)))


def _kv_points(spec: ReplicaSpec, mix: RequestMix, rate: float) -> np.ndarray:
    """Share of each point's requests finding no KV room at ``rate`` (waiting or preempted)."""
    op = operating_point(spec, mix, rate)
    service = _prefill_s(spec, mix, op.decoding, op.decode_step_s)
    lin = mix.input_tokens + spec.block_size
    lout = mix.output_tokens
    s = op.step_s
    first = service * lin + s * (lin * lout + lout * lout / 2)
    second = service * lin * lin + s * (lin * lin * lout + lin * lout * lout + lout ** 3 / 3)
    mean = rate * float(mix.weights @ first)
    var = rate * float(mix.weights @ second)
    if spec.backlog:
        mean, var = _backlog_kv(spec, mix, op, rate, mean, var)
        if not math.isfinite(mean):
            return np.ones_like(mix.weights)
    return _gamma_sf(spec.kv_cache_tokens - lin, mean, var)


def _backlog_kv(spec: ReplicaSpec, mix: RequestMix, op: OperatingPoint, rate: float, mean: float, var: float
                ) -> tuple[float, float]:
    """The KV occupancy's (mean, variance), tokens and tokens^2, with the prompts a prefill busy period
    has admitted and not yet decoded (``ReplicaSpec.backlog``): an arrival finds the prefill queue busy
    with probability ``rho``, and then ``n`` requests of its busy period before (``_backlog_service``),
    each holding its prompt (and a block): ``rho n E[L_in + block]`` more on average, and ``rho n
    E[(L_in + block)^2]`` more variance (their count taken as Poisson). inf where the queue is unstable."""
    budget = max(spec.max_num_batched_tokens - op.decoding, 1.0)
    q, w = _marginal_prefill_tokens(spec, mix)
    pm = mix.uncached if mix.prompt_points is None else mix.prompt_points * (1.0 - mix.prefix_hit_rate)
    lin = mix.input_tokens if mix.prompt_points is None else mix.prompt_points
    service, extra = _backlog_service(spec, q, pm, w, float(w @ lin), budget, op.decode_step_s, rate)
    rho = rate * float(w @ service)
    if rho >= 1.0 or not math.isfinite(extra):
        return math.inf, math.inf
    held = lin + spec.block_size
    return mean + rho * extra * float(w @ held), var + rho * extra * float(w @ (held * held))


def _itl_miss(spec: ReplicaSpec, mix: RequestMix, rate: float, itl_s: float, replicas: int = 1) -> float:
    return float(mix.weights @ _itl_points(spec, mix, rate, itl_s, replicas))


def _ttft_miss(spec: ReplicaSpec, mix: RequestMix, rate: float, ttft_s: float, replicas: int = 1) -> float:
    """Share of ``mix`` missing the TTFT target at ``rate`` for the prefill queue (``_ttft_points``).

    One replica, a mix with a prompts' marginal (``RequestMix.prompt_points``), in the busy-period form
    or with ``ReplicaSpec.prompt_marginal`` (opt-in): the points are the marginal's, at the mix's own
    operating point. A request's TTFT reads its prompt
    alone, and the marginal describes the prompts better than the stratified points on two counts
    the TTFT bound reads: the prefill service's second moment (Kingman's tail decays with ``ca^2 +
    cs^2``; the points average each output stratum's longest prompts away, so their ``cs^2`` is
    lower than the requests': 0.63 against 1.66 on Azure-conv-like lengths on an A100), and the
    idle misses (a stratum straddling the prompt length an idle replica can prefill within the
    target counts wholly on one side: on ServeGen-day lengths an H100 misses 6.3 % of the points
    idle, 4.0 % of the marginal, 4.1 % of the requests), which set the budget's floor
    (``replica_capacity``). Pooled replicas (``replicas > 1``), a mix without a marginal and the default
    form without ``prompt_marginal`` keep the mix's points. docs/benchmarks.md, "The out-of-band cases,
    sixth pass", measures it (opt-in: the MPC planning on it cost 2.7 % more on the Mooncake scenario
    for the same attainment)."""
    if ((spec.busy_period or spec.prompt_marginal) and replicas == 1 and mix.prompt_points is not None
            and mix.prompt_weights is not None):
        # A request's TTFT reads its prompt alone: over the prompts' marginal, whose strata are finer
        # than the mix's points (``_PROMPT_EDGES``), at the mix's own operating point.
        view = _prompt_view(mix)
        return float(view.weights @ _ttft_points(spec, view, rate, ttft_s, replicas,
                                                 op=operating_point(spec, mix, rate)))
    return float(mix.weights @ _ttft_points(spec, mix, rate, ttft_s, replicas))


_VIEWS: weakref.WeakKeyDictionary[RequestMix, RequestMix] = weakref.WeakKeyDictionary()


def _prompt_view(mix: RequestMix) -> RequestMix:
    """``mix``'s prompts' marginal as points of their own (``prompt_points``, one output token each,
    ``prompt_weights``; the marginal kept), made once per mix: what the busy-period form's TTFT bound
    reads (a request's prefill and wait read its prompt alone). Only for a mix with a marginal."""
    view = _VIEWS.get(mix)
    if view is None:
        assert mix.prompt_points is not None and mix.prompt_weights is not None
        view = _VIEWS[mix] = replace(mix, input_tokens=mix.prompt_points,
                                     output_tokens=np.ones_like(mix.prompt_points), weights=mix.prompt_weights)
    return view


def _seqs_miss(spec: ReplicaSpec, mix: RequestMix, rate: float, ttft_s: float) -> float:
    if spec.busy_period and mix.prompt_points is not None:
        # as ``_ttft_miss``: a request's slack reads its prompt alone
        view = _prompt_view(mix)
        return float(view.weights @ _seqs_points(spec, view, rate, ttft_s, op=operating_point(spec, mix, rate)))
    return float(mix.weights @ _seqs_points(spec, mix, rate, ttft_s))


def _kv_miss(spec: ReplicaSpec, mix: RequestMix, rate: float) -> float:
    return float(mix.weights @ _kv_points(spec, mix, rate))


def slo_miss(spec: ReplicaSpec, mix: RequestMix, rate: float, ttft_s: float, itl_s: float, replicas: int = 1
             ) -> float:
    """Share of ``mix`` missing any part of the SLO at ``rate`` requests/s: per point, the union of the
    four bounds' misses taken as independent (``1 - prod(1 - m_b)``; a request that waits for a slot
    is no likelier to find its decode slowed), averaged over the points. At least the largest bound's
    share and at most their sum: the attainment target is over all requests, so the bounds share one
    budget. ``replicas``: as ``replica_capacity``'s."""
    hit = ((1.0 - _itl_points(spec, mix, rate, itl_s, replicas))
           * (1.0 - _ttft_points(spec, mix, rate, ttft_s, replicas))
           * (1.0 - _seqs_points(spec, mix, rate, ttft_s)) * (1.0 - _kv_points(spec, mix, rate)))
    return float(mix.weights @ (1.0 - hit))


def _largest_rate(miss: Callable[[float], float], limit: float, budget: float, steps: int = _BISECTION_STEPS
                  ) -> float:
    """Largest rate in ``[0, limit)`` whose ``miss`` is within ``budget`` (``miss`` grows with the rate),
    bisected ``steps`` times."""
    lo, hi = 0.0, limit
    for _ in range(steps):
        mid = (lo + hi) / 2
        if miss(mid) <= budget:
            lo = mid
        else:
            hi = mid
    return lo


def idle_misses(spec: ReplicaSpec, mix: RequestMix, ttft_s: float, itl_s: float) -> float:
    """The largest share of ``mix`` any of the four bounds misses on an idle ``spec`` (prompts it
    cannot prefill within ``ttft_s`` even alone; 1 when its decode step alone exceeds ``itl_s``)."""
    if itl_s <= spec.profile.fixed_step_s:
        return 1.0
    idle = UNLOADED / _work(spec, mix)
    return max(_itl_miss(spec, mix, idle, itl_s), _ttft_miss(spec, mix, idle, ttft_s),
               _seqs_miss(spec, mix, idle, ttft_s), _kv_miss(spec, mix, idle))


def idle_floor(spec: ReplicaSpec, mix: RequestMix, ttft_s: float, itl_s: float) -> float:
    """The idle misses ``replica_capacity`` holds against its ``unservable`` (one replica): each bound's
    (``idle_misses``) and, in the busy-period form (``spec.busy_period``), the four bounds' union at
    idle too, which it checks as well and which sits a hair above the largest (the ITL bound's idle
    misses, ~1e-9, united in). A share of ``mix`` in [0, 1]."""
    own = idle_misses(spec, mix, ttft_s, itl_s)
    if not spec.busy_period or own >= 1.0:
        return own
    return max(own, _busy_union(spec, mix, UNLOADED / _work(spec, mix), ttft_s, itl_s, 1))


def allowance_over(idle: Iterable[float]) -> float:
    """The rule of ``allowance`` on the idle misses (shares of a mix, each in [0, 1]) of every way a
    service can serve it: ``UNSERVABLE_SHARE`` above the fewest; ``UNSERVABLE_SHARE`` alone when even
    that is above ``MOSTLY_UNSERVABLE`` (every way then gets 0), or when there is none.
    ``models.capacity_roles.pool_allowance`` applies it to prefill/decode pairs too."""
    best = min(idle, default=0.0)
    return (best if best <= MOSTLY_UNSERVABLE else 0.0) + UNSERVABLE_SHARE


def allowance(specs: Sequence[ReplicaSpec], mix: RequestMix, ttft_s: float, itl_s: float) -> float:
    """The idle misses a variant of a service may show and keep a capacity (``replica_capacity``):
    ``UNSERVABLE_SHARE`` above the fewest any of its variants' ``specs`` shows; ``UNSERVABLE_SHARE``
    alone when even that is above ``MOSTLY_UNSERVABLE`` (every variant then gets 0): ``allowance_over``
    their ``idle_misses``."""
    return allowance_over(idle_misses(sp, mix, ttft_s, itl_s) for sp in specs)


def replica_capacity(spec: ReplicaSpec, mix: RequestMix, ttft_s: float, itl_s: float,
                     attainment: float = DEFAULT_ATTAINMENT, unservable: float = UNSERVABLE_SHARE,
                     replicas: int = 1) -> CapacityBounds:
    """The four bounds of the module docstring for one replica, requests/s. Each bound's budget of
    misses is ``1 - attainment`` on top of the misses it shows at no load (requests that miss on an
    idle replica, e.g. prompts it cannot prefill within the TTFT target: no replica count helps them,
    so they must not give a variant no capacity); a bound that misses more than ``unservable`` of its
    requests even idle gives 0 (``allowance`` sets it for a service's variants). ``shared_capacity``
    is the rate at which the four spend one budget together; in the busy-period form
    (``ReplicaSpec.busy_period``) that rate is part of the answer (``shared_rps``, ``_busy_union``: one
    budget of ``1 - attainment`` on top of the union's idle misses, 0 where those exceed
    ``unservable``), so ``rps`` is at most it.

    Args:
        spec: the replica.
        mix: the requests it serves.
        ttft_s, itl_s: the SLO's targets, seconds.
        attainment: share of requests that must meet each part of the SLO, in (0, 1).
        unservable: the most idle misses that leave a capacity.
        replicas: replicas of this spec sharing the load behind a router that sends each request to
            the least loaded (llm-d's EPP, the simulator's ``least_outstanding``). Their prefill
            queues pool as one GI/G/n queue (Kingman-Whitt: an arrival waits with the Erlang-C
            probability ``C(n, n rho)`` instead of ``rho``, and the wait's tail decays ``n`` times as
            fast), and each replica's arrivals are about every n-th of the pool's, so the prefills
            arriving during a decode vary as an Erlang-n renewal count (variance ``E[N] / n``, not
            ``E[N]``). Each replica of a pool carries more at the same misses; the seqs and KV
            bounds stay per replica. 1: one replica alone.

    Raises:
        ValueError: ``attainment`` outside (0, 1), ``replicas`` < 1, or ``itl_s`` not above the
            profile's fixed step time.
    """
    if not 0.0 < attainment < 1.0:
        raise ValueError(f"attainment must be in (0, 1), got {attainment}")
    if replicas < 1:
        raise ValueError(f"replicas must be >= 1, got {replicas}")
    mean_itl_rate(spec, mix, itl_s)  # raises when no rate can meet the ITL target
    limit = 1.0 / _work(spec, mix)
    budget = 1.0 - attainment

    def largest(miss: Callable[[float], float]) -> float:
        # What misses at any rate (a prompt this replica cannot prefill within the TTFT target even
        # alone) is not load's doing: the budget is for the misses load adds on top of it.
        floor = miss(limit * UNLOADED)
        if floor > unservable:
            return 0.0
        return _largest_rate(miss, limit, budget + floor)
    bounds = CapacityBounds(
        itl_rps=largest(lambda r: _itl_miss(spec, mix, r, itl_s, replicas)),
        ttft_rps=largest(lambda r: _ttft_miss(spec, mix, r, ttft_s, replicas)),
        seqs_rps=largest(lambda r: _seqs_miss(spec, mix, r, ttft_s)),
        kv_rps=largest(lambda r: _kv_miss(spec, mix, r)),
    )
    if not spec.busy_period or bounds.rps <= 0:
        return bounds
    # The busy-period form: the four bounds share one budget (the attainment target is over all
    # requests, and at the tightest bound's rate the others miss too: on Mooncake's trace the ITL and
    # TTFT bounds each reach 1 % at ~1.14 req/s, where the simulator misses 1.9 %)
    def union(r: float) -> float:
        return _busy_union(spec, mix, r, ttft_s, itl_s, replicas)
    floor = union(limit * UNLOADED)
    if floor > unservable:
        return replace(bounds, shared_rps=0.0)
    hi = bounds.rps
    if union(hi) <= budget + floor:
        return replace(bounds, shared_rps=hi)
    return replace(bounds, shared_rps=_largest_rate(union, hi, budget + floor, _SHARED_BISECTIONS))


_SHARED_BISECTIONS = 24  # 2^-24 of the tightest bound


def _busy_union(spec: ReplicaSpec, mix: RequestMix, rate: float, ttft_s: float, itl_s: float, replicas: int) -> float:
    """Share of ``mix`` missing any part of the SLO at ``rate`` in the busy-period form: the TTFT and
    slot-wait misses (which read the prompt alone) united per point of the prompts' marginal where
    the TTFT bound reads it (``_ttft_miss``), per point of the mix elsewhere, then united with the ITL
    and KV bounds' shares as independent (``1 - prod(1 - m)``). ``slo_miss``'s rule; the prompts that
    miss both TTFT and the slot wait (too long to prefill even idle) count once."""
    if replicas == 1 and mix.prompt_points is not None:
        view, op = _prompt_view(mix), operating_point(spec, mix, rate)
        prompt = float(view.weights @ (1.0 - (1.0 - _ttft_points(spec, view, rate, ttft_s, replicas, op=op))
                                       * (1.0 - _seqs_points(spec, view, rate, ttft_s, op=op))))
    else:
        prompt = float(mix.weights @ (1.0 - (1.0 - _ttft_points(spec, mix, rate, ttft_s, replicas))
                                      * (1.0 - _seqs_points(spec, mix, rate, ttft_s))))
    rest = (1.0 - _itl_miss(spec, mix, rate, itl_s, replicas)) * (1.0 - _kv_miss(spec, mix, rate))
    return 1.0 - (1.0 - prompt) * rest


def shared_capacity(spec: ReplicaSpec, mix: RequestMix, ttft_s: float, itl_s: float,
                    attainment: float = DEFAULT_ATTAINMENT, unservable: float = UNSERVABLE_SHARE,
                    replicas: int = 1) -> float:
    """The largest rate, requests/s, at which the four bounds' misses together (``slo_miss``) stay
    within one budget of ``1 - attainment`` on top of their idle misses (0 where those exceed
    ``unservable``): at most ``replica_capacity(...).rps``. Measured, not planned on: on the
    Mooncake trace's lengths it agrees with the simulator's knee where the tightest bound alone
    overstates it, yet planning on it cost the MPC 27 % more on the Mooncake scenario for no
    attainment (docs/controllers.md#capacity-of-a-replica-modelscapacitypy).

    Raises:
        ValueError: as ``replica_capacity``.
    """
    bounds = replica_capacity(spec, mix, ttft_s, itl_s, attainment, unservable, replicas)
    if bounds.rps == 0 or spec.busy_period:  # the busy-period form's capacity shares one budget already
        return bounds.rps
    limit = 1.0 / _work(spec, mix)
    floor = slo_miss(spec, mix, limit * UNLOADED, ttft_s, itl_s, replicas)
    if floor > unservable:
        return 0.0
    return min(bounds.rps, _largest_rate(lambda r: slo_miss(spec, mix, r, ttft_s, itl_s, replicas), limit,
                                         1.0 - attainment + floor))


def itl_concurrency(spec: ReplicaSpec, mix: RequestMix, ttft_s: float, itl_s: float,
                    attainment: float = DEFAULT_ATTAINMENT, unservable: float = UNSERVABLE_SHARE) -> float:
    """Requests in flight on one replica (running and waiting, what an endpoint picker counts) at its
    ITL bound's rate (``replica_capacity(...).itl_rps``): Little's law on the fluid operating point
    there (``OperatingPoint.concurrency``), requests. A gateway that holds each replica to about this
    many keeps its batch, and so every request's time per output token, at what the ITL bound allows
    however many requests arrive (llm-d-router's ``concurrency-detector``, ``maxConcurrency``); the
    queue then waits at the gateway, where priorities order it. 0 where the ITL bound is 0.

    Raises:
        ValueError: as ``replica_capacity``.
    """
    return concurrency_at(spec, mix, replica_capacity(spec, mix, ttft_s, itl_s, attainment, unservable).itl_rps)


def concurrency_at(spec: ReplicaSpec, mix: RequestMix, rate_rps: float) -> float:
    """Requests in flight on one replica serving ``rate_rps`` (``OperatingPoint.concurrency``; a rate
    at the fluid limit is taken just below it), requests; 0 at a rate of 0 or less."""
    if rate_rps <= 0:
        return 0.0
    limit = 1.0 / _work(spec, mix)
    return operating_point(spec, mix, min(rate_rps, limit * (1.0 - 1e-9))).concurrency


def rate_at_concurrency(spec: ReplicaSpec, mix: RequestMix, in_flight: float, hi_rps: float) -> float:
    """The rate in ``[0, hi_rps]`` at which one replica holds ``in_flight`` requests (``concurrency_at``,
    which grows with the rate), requests/s: bisection to 1e-9 of ``hi_rps``; ``hi_rps`` itself when
    even it holds no more."""
    if hi_rps <= 0 or concurrency_at(spec, mix, hi_rps) <= in_flight:
        return max(hi_rps, 0.0)
    lo, hi = 0.0, hi_rps
    while hi - lo > 1e-9 * hi_rps:
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if concurrency_at(spec, mix, mid) <= in_flight else (lo, mid)
    return lo


def tokens_in_flight_at(spec: ReplicaSpec, mix: RequestMix, rate_rps: float, charge: np.ndarray,
                        until_first_token: bool) -> float:
    """Tokens a gateway counts in flight on one replica serving ``rate_rps``: Little's law per point of
    ``mix`` on the fluid operating point (``operating_point``; a rate at the fluid limit is taken just
    below it), ``rate x sum(weight x charge x held)``, ``held`` the point's prefill time
    (``until_first_token``: the charge is released at the first token) or its whole time in the
    system, seconds; tokens. 0 at a rate of 0 or less.

    ``charge`` (one per point of ``mix``, tokens) is what the gateway counts per request
    (llm-d-router v0.10.0 ``inflight-load-producer``: the prompt, with or without an output estimate).

    Raises:
        ValueError: ``charge`` not one value per point of ``mix``.
    """
    charge = np.asarray(charge, dtype=float)
    if charge.shape != mix.weights.shape:
        raise ValueError(f"charge has {charge.size} values for a mix of {mix.weights.size} points")
    if rate_rps <= 0:
        return 0.0
    rate = min(rate_rps, (1.0 - 1e-9) / _work(spec, mix))
    op = operating_point(spec, mix, rate)
    prefill = _prefill_s(spec, mix, op.decoding, op.decode_step_s)
    held = prefill if until_first_token else prefill + mix.output_tokens * op.step_s
    return rate * float(mix.weights @ (charge * held))


def service_mix(svc: ServiceSpec) -> RequestMix:
    """The mix a service is sized for without a trace: its fleet file's ``typical_request`` means."""
    t = svc.typical_request
    return RequestMix.from_means(t.input_tokens, t.output_tokens, t.prefix_hit_rate)


def throughput_weights(svc: ServiceSpec, engine: EngineLimits, mix: RequestMix | None = None) -> dict[str, float]:
    """variant -> the rate at which one replica's mean ITL reaches the interactive ITL objective
    (``mean_itl_rate``), requests/s: its speed, which a router balances load by (never 0: the fleet
    file's ITL objectives are above every profile's fixed step time)."""
    mix = service_mix(svc) if mix is None else mix
    itl = svc.slo["interactive"].itl_s
    return {v.name: mean_itl_rate(ReplicaSpec.of(v, engine), mix, itl) for v in svc.variants}


def mix_key(mix: RequestMix) -> tuple[object, ...]:
    """A hashable key equal for two mixes of the same points, weights and parameters (``RequestMix``
    compares by identity): what a memo of a function of the mix keys on."""
    return (mix.input_tokens.tobytes(), mix.output_tokens.tobytes(), mix.weights.tobytes(), mix.prefix_hit_rate,
            mix.arrival_scv, mix.input_m2,
            None if mix.prompt_points is None or mix.prompt_weights is None
            else (mix.prompt_points.tobytes(), mix.prompt_weights.tobytes()))


class Memo:
    """A least-recently-used map of at most ``size`` entries, safe across threads: the memos of the
    capacity model's pure functions of a service's specs and mix (~50-70 ms each), which a daemon
    taking over many services on the same variants computes once per distinct input (issue 35)."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._items: dict[object, object] = {}
        self._lock = threading.Lock()

    def get(self, key: object) -> object | None:
        """The value kept for ``key`` (now the most recently used), None when none is."""
        with self._lock:
            value = self._items.pop(key, None)
            if value is not None:
                self._items[key] = value
            return value

    def put(self, key: object, value: object) -> None:
        """Keep ``value`` for ``key``, dropping the least recently used beyond ``size``."""
        with self._lock:
            self._items.pop(key, None)
            self._items[key] = value
            while len(self._items) > self.size:
                del self._items[next(iter(self._items))]


_WEIGHTS = Memo(4096)
"""``variant_weights``' memo (a few floats an entry: 4,096 hold 500 services' distinct sets many times over)."""


def variant_weights(svc: ServiceSpec, engine: EngineLimits, mix: RequestMix | None = None) -> dict[str, float]:
    """variant -> capacity of one replica (``replica_capacity(...).rps``), requests/s, at the service's
    interactive SLO and ``mix`` (default ``service_mix(svc)``); 0 for a variant that cannot meet it.

    A variant's profile describes one whole replica (all its GPUs), so ``gpus_per_replica`` changes
    its price, not its capacity here. A pure function of the variants' names and replica specs, the
    interactive SLO and the mix: the last 4,096 answers are kept (``Memo``) and a copy returned.
    """
    mix = service_mix(svc) if mix is None else mix
    slo = svc.slo["interactive"]
    specs = {v.name: ReplicaSpec.of(v, engine) for v in svc.variants}
    key = (tuple(specs.items()), slo.ttft_s, slo.itl_s, mix_key(mix))
    kept = _WEIGHTS.get(key)
    if isinstance(kept, dict):
        return dict(kept)
    limit = allowance(list(specs.values()), mix, slo.ttft_s, slo.itl_s)
    out = {name: replica_capacity(sp, mix, slo.ttft_s, slo.itl_s, unservable=limit).rps for name, sp in specs.items()}
    _WEIGHTS.put(key, dict(out))
    return out


def pool_size(serves: Callable[[int], bool], single: Mapping[str, float], demand_rps: float, most: int) -> int:
    """The fewest replicas ``n`` in ``[1, min(most, ceil(demand_rps / fastest alone))]`` for which
    ``serves(n)`` holds (a pool of ``n`` of the fastest variant carries ``demand_rps``); the upper end
    when none below it does. ``serves`` must hold from some ``n`` on (a pool's capacity per replica
    grows with its size: ``replica_capacity(..., replicas=n)``), so bisection finds it. ``single``:
    variant -> one replica's capacity alone, requests/s (1 when every one is 0)."""
    best = max(single.values(), default=0.0)
    lo, hi = 1, min(most, max(1, math.ceil(demand_rps / best))) if best > 0 else 1
    while lo < hi:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if serves(mid) else (mid + 1, hi)
    return lo


def pooled_weights(svc: ServiceSpec, engine: EngineLimits, mix: RequestMix, demand_rps: np.ndarray,
                   most: int) -> dict[str, np.ndarray]:
    """variant -> one replica's capacity per step, requests/s, shape of ``demand_rps``: its capacity
    alone (``variant_weights``) times its gain in the pool of replicas each step's demand needs
    (``pool_size``, at most ``most``): ``replica_capacity(..., replicas=n).rps`` over ``replicas=1``,
    at least 1 (1 for a variant with no capacity). The replicas behind a least-loaded router pool their
    prefill queues and smooth each one's arrivals (``replica_capacity``'s ``replicas``); ``most`` = 1
    gives the capacities alone.

    Raises:
        ValueError: ``most`` < 1, or the SLO's ITL target out of every variant's reach.
    """
    if most < 1:
        raise ValueError(f"most must be >= 1, got {most}")
    single = variant_weights(svc, engine, mix)
    slo = svc.slo["interactive"]
    specs = {v.name: ReplicaSpec.of(v, engine) for v in svc.variants}
    limit = allowance(list(specs.values()), mix, slo.ttft_s, slo.itl_s)
    gains: dict[tuple[str, int], float] = {}

    def gain(name: str, n: int) -> float:
        if (name, n) not in gains:
            pooled = replica_capacity(specs[name], mix, slo.ttft_s, slo.itl_s, unservable=limit, replicas=n).rps
            gains[name, n] = max(1.0, pooled / single[name]) if single[name] > 0 and n > 1 else 1.0
        return gains[name, n]
    demand_rps = np.asarray(demand_rps, dtype=float)
    sizes: dict[float, int] = {}
    for d in np.unique(demand_rps).tolist():
        def serves(n: int, d: float = d) -> bool:
            return n * max(single[v] * gain(v, n) for v in specs) >= d
        sizes[d] = pool_size(serves, single, d, most)
    n_at = np.array([sizes[float(d)] for d in demand_rps], dtype=int)
    return {name: np.array([single[name] * gain(name, int(n)) for n in n_at]) for name in specs}
