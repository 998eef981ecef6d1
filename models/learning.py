"""Capacity learned online: how much more (or less) a replica serves than the capacity model says.

An offset-free disturbance estimate on load (offset-free MPC; Dynamo's planner corrects its TTFT and
ITL predictions the same way, by the ratio of observed to predicted). A replica is taken to behave as
the capacity model's replica of its variant at ``rate / kappa``: ``kappa`` > 1 when it carries more
than the model says before its latencies reach what they are, < 1 when less. So its capacity at the
SLO is ``kappa`` times the model's (the prior, ``models.capacity``).

The model gives, for each load ``x`` (a multiple of its capacity), the mean latencies the
observations report (``LatencyCurve``): the mean TTFT (its M/G/1 prefill queue, Kingman's mean wait,
the same queue whose tail the TTFT bound reads) and the mean time per output token (the fluid mean
step), each over its SLO target. Means, not the p95s: a mean is exact over a window
(``rate(_sum) / rate(_count)``), where a p95 is interpolated inside a histogram bucket (vLLM's
time-per-output-token buckets are 25 ms apart around 50 ms, a third of a typical ITL target). A tick
whose variant runs at ``x_obs`` (its rate per ready replica over the prior capacity) and shows a mean
ratio ``m`` is a measurement of ``log kappa = log x_obs - log x(m)``, with ``x(m)`` the model's load at
that ratio, one for TTFT and one for the time per output token. Where a curve is flat (light load) a
ratio says little about the load: the measurement's variance is ``(SIGMA_LOG_RATIO / elasticity)^2``,
the elasticity being ``d log m / d log x`` of the curve there, and a tick teaches nothing where it is
below ``MIN_ELASTICITY``, there or at the load the replica is believed to run at (``x_obs / kappa``):
at light load a latency above the model's is a slower GPU (``speed_factor``'s to correct), not load.
``CapacityPosterior`` is a scalar Kalman filter on ``log kappa`` (a random walk: the
process noise lets it follow a capacity that moves, for instance a mix that shifts), with a Huber
weight on measurements far from the posterior.

The plan (``controllers.mpc``) uses ``planned``: the posterior mean when it says less than the prior,
and only the lower end of its one-sigma band when it says more: a model that overstates capacity
misses the SLO, one that understates it costs GPUs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from models.capacity import ReplicaSpec, RequestMix, _prefill_s, operating_point

LOADS = np.geomspace(0.05, 1.6, 32)
"""Loads, as multiples of the model's capacity, at which the curves are computed."""

SIGMA_LOG_RATIO = 0.1
"""Standard deviation of the log of a mean latency over a 60-s window of one variant's pods: about
5 % for a mean over the window's requests (hundreds at the loads that teach), doubled because
consecutive 15-s ticks share three quarters of their window (four overlapping measurements carry
about one measurement's information)."""

MIN_ELASTICITY = 0.2
"""Below this ``d log m / d log x`` a ratio says almost nothing of the load: no measurement."""

PRIOR_SIGMA = 0.3
"""Standard deviation of ``log kappa`` before any measurement: the capacity model has been found
within 0.75-1.35x of the simulator's knee on mixed traffic (issue 28)."""

PROCESS_SIGMA = 0.01
"""Random-walk standard deviation of ``log kappa`` per measurement: a capacity that moves by a
fifth is followed within ~20 informative ticks once the posterior has settled."""

HUBER_K = 2.0
"""Measurements further than this many standard deviations from the posterior get a weight falling
as 1 / distance (Huber): one odd window moves the estimate by at most this much."""

KAPPA_LIMITS = (0.5, 2.0)
"""Capacities believed, as multiples of the model's: outside, the profile or the mix is wrong and
is to be fixed, not followed."""

HEDGE_Z = 1.0
"""Standard deviations below the mean at which an estimate above the prior is planned on."""

STRESS = 0.8
"""With ``learn=3`` (``observe``'s ``stress``): the p95 latency over its SLO target (the worse of TTFT and
the time per output token) at or above which a tick shows a replica near its capacity. The SLO's
target is 99 % of requests (``controllers.mpc``), so where the p95 is within 20 % of the target the
1 % tail beyond it is at the target: a correction down is taken only at or above it (a replica that
meets its SLO with this margin is not over its capacity, whatever its mean latencies say), one up
only below it (a replica near its limit shows none to spare), and at ``UP_LOAD`` or more."""

UP_LOAD = 0.8
"""With ``stress``: the least load, as a share of the capacity the posterior believes (``kappa``), a
correction up is taken at: a replica calm near what it is believed to serve is evidence that it
serves more, one calm at half of it is not (where only calm ticks' ups pass, noise alone would
ratchet the estimate up). Measured, it did not recover what the gate loses on Azure conv x20 (96.53 %
interactive against 97.07 % without it): the loss there is the corrections down the gate refuses
(docs/controllers.md, "Learned near saturation, hedged by measured error")."""

PLAN_SIGMA_FLOOR = 0.05
"""The least standard deviation the plan's hedge reads: the filter's own shrinks with every tick,
while the model's error on a mix is systematic, not noise that averages out (on the ramp scenario a
posterior of 1.07 +- 0.01 planned on 1.06 cost 1.2 points of attainment)."""


@dataclass(frozen=True)
class Curve:
    """One latency's model ratio at each load: ``loads`` (multiples of the model's capacity,
    increasing) and ``ratios`` (non-decreasing; ``inf`` past the model's limits)."""

    loads: np.ndarray
    ratios: np.ndarray

    def load_at(self, ratio: float) -> float | None:
        """The load at which the model shows ``ratio``, or None where the curve cannot tell (at or
        below its lightest load's ratio). A ratio above every finite one reads as the heaviest finite load."""
        finite = np.isfinite(self.ratios)
        x, h = self.loads[finite], self.ratios[finite]
        if len(x) < 2 or ratio <= h[0]:
            return None
        if ratio >= h[-1]:
            return float(x[-1])
        k = int(np.searchsorted(h, ratio, side="right"))
        lo, hi = k - 1, k
        if h[hi] <= h[lo]:
            return float(x[lo])
        frac = (math.log(ratio) - math.log(h[lo])) / (math.log(h[hi]) - math.log(h[lo]))
        return float(math.exp(math.log(x[lo]) + frac * (math.log(x[hi]) - math.log(x[lo]))))

    def elasticity(self, load: float) -> float:
        """``d log ratio / d log load`` of the curve at ``load`` (0 where it is flat or unknown)."""
        finite = np.isfinite(self.ratios)
        x, h = np.log(self.loads[finite]), np.log(self.ratios[finite])
        if len(x) < 2:
            return 0.0
        k = int(np.clip(np.searchsorted(x, math.log(load)), 1, len(x) - 1))
        return float(max(0.0, (h[k] - h[k - 1]) / (x[k] - x[k - 1])))


@dataclass(frozen=True)
class LatencyCurve:
    """The model's mean TTFT / TTFT target (``ttft``) and mean time per output token / ITL target
    (``tpot``) against load (``Curve``)."""

    ttft: Curve
    tpot: Curve


def mean_latencies(spec: ReplicaSpec, mix: RequestMix, rate: float) -> tuple[float, float]:
    """The model's mean TTFT and mean time per output token at ``rate`` requests/s, seconds: the
    prefill queue's mean wait (Kingman, ``rho E[S] (ca^2 + cs^2) / (2 (1 - rho))``, the mean of the
    TTFT bound's exponential tail) plus the mean prefill and one decode step; the fluid mean step.

    Raises:
        ValueError: ``rate`` at or past the fluid limit (``models.capacity.operating_point``).
    """
    op = operating_point(spec, mix, rate)
    prefill = _prefill_s(spec, mix, op.decoding, op.decode_step_s)
    es = float(mix.weights @ prefill)
    rho = rate * es
    if rho >= 1.0:
        return math.inf, op.step_s
    cs2 = float(mix.weights @ (prefill * prefill)) / (es * es) - 1.0
    wait = rho * es * (mix.arrival_scv + cs2) / (2.0 * (1.0 - rho))
    return wait + es + op.decode_step_s, op.step_s


def latency_curve(spec: ReplicaSpec, mix: RequestMix, ttft_s: float, itl_s: float, capacity_rps: float,
                  loads: np.ndarray = LOADS) -> LatencyCurve:
    """``mean_latencies`` over the SLO targets at each of ``loads`` x ``capacity_rps`` (requests/s);
    ``inf`` at or past the fluid limit; made non-decreasing.

    Raises:
        ValueError: ``capacity_rps`` not > 0.
    """
    if not capacity_rps > 0:
        raise ValueError(f"capacity_rps must be > 0, got {capacity_rps}")
    ttft, tpot = [], []
    for x in loads:
        try:
            a, b = mean_latencies(spec, mix, float(x) * capacity_rps)
        except ValueError:  # at or past the fluid limit
            a = b = math.inf
        ttft.append(a / ttft_s)
        tpot.append(b / itl_s)
    xs = np.asarray(loads, dtype=float)
    return LatencyCurve(Curve(xs, np.maximum.accumulate(np.asarray(ttft))),
                        Curve(xs, np.maximum.accumulate(np.asarray(tpot))))


@dataclass
class CapacityPosterior:
    """Belief about ``log kappa`` (module docstring): mean and variance; ``measurements`` taken."""

    mean: float = 0.0
    var: float = PRIOR_SIGMA ** 2
    measurements: int = 0

    @property
    def kappa(self) -> float:
        """The posterior mean's capacity multiple, ``exp(mean)``."""
        return math.exp(self.mean)

    @property
    def sigma(self) -> float:
        """The posterior standard deviation of ``log kappa``."""
        return math.sqrt(self.var)

    def planned(self, z: float = HEDGE_Z) -> float:
        """The multiple the plan uses: the mean below 1, else ``max(1, exp(mean - z max(sigma,
        PLAN_SIGMA_FLOOR)))``."""
        if self.mean <= 0.0:
            return self.kappa
        return max(1.0, math.exp(self.mean - z * max(self.sigma, PLAN_SIGMA_FLOOR)))

    def observe(self, load: float, ttft_ratio: float, tpot_ratio: float, curve: LatencyCurve,
                stress: float | None = None) -> bool:
        """Update on one tick: a replica at ``load`` (its rate over the prior capacity, > 0) showing
        mean TTFT and mean time per output token over their targets; one measurement each
        (``measure``, both with ``stress``). False when neither taught anything."""
        a = self.measure(load, ttft_ratio, curve.ttft, stress)
        b = self.measure(load, tpot_ratio, curve.tpot, stress)
        return a or b

    def measure(self, load: float, ratio: float, curve: Curve, stress: float | None = None) -> bool:
        """Update on one latency: a replica at ``load`` (its rate over the prior capacity, > 0) showing
        ``ratio`` (> 0) where the model shows ``curve``. False, unchanged, when it cannot show capacity
        (the curve cannot place the ratio, or is too flat there). With ``stress`` (the tick's p95
        latency over its SLO, ``STRESS``), a measurement below the posterior mean is taken only at or
        above ``STRESS`` and one above it only below ``STRESS`` at ``UP_LOAD`` or more: the sign of a
        correction agrees with what the SLO shows (learned from means alone, bursty arrivals read as load and moved the
        capacity down where the SLO was met: docs/controllers.md#capacity-learned-online)."""
        if not (load > 0 and ratio > 0 and math.isfinite(ratio)):
            return False
        x = curve.load_at(ratio)
        if x is None or curve.elasticity(load * self.kappa) < MIN_ELASTICITY:
            return False  # where the replica is believed to run, latencies hardly move with load
        e = curve.elasticity(x)
        if e < MIN_ELASTICITY:
            return False
        z = math.log(load / x)
        if stress is not None and (z < self.mean) != (stress >= STRESS):
            return False  # the latency's means and the SLO's tail disagree on the sign: no correction
        if stress is not None and z > self.mean and load / self.kappa < UP_LOAD:
            return False  # calm far below its believed capacity: no evidence of more
        r = (SIGMA_LOG_RATIO / e) ** 2
        prior_var = self.var + PROCESS_SIGMA ** 2
        spread = math.sqrt(prior_var + r)
        d = abs(z - self.mean) / spread
        if d > HUBER_K:  # Huber: a far measurement counts as one HUBER_K spreads away
            r = (prior_var + r) * (d / HUBER_K) - prior_var
        gain = prior_var / (prior_var + r)
        lo, hi = (math.log(k) for k in KAPPA_LIMITS)
        self.mean = min(max(self.mean + gain * (z - self.mean), lo), hi)
        self.var = (1.0 - gain) * prior_var
        self.measurements += 1
        return True
