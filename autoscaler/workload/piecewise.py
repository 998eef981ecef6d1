"""Workloads whose request rate follows a piecewise-linear curve, built in code (no data files).

Arrivals: a Poisson process whose rate follows a piecewise-linear curve through ``(time s, req/s)``
knots (unit-rate exponential gaps mapped through the inverse cumulative rate). Request sizes:
lognormals given by their median and mean, clipped to a maximum; by default those of the embedded
default workload (``autoscaler.workload.synthetic``: Azure conv's prompt and output lengths). No
prefix sharing; each request is its own task, ``batch_fraction`` of them batch
(``autoscaler.workload.classes.assign_classes``). Same arguments and seed, same workload.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from autoscaler.workload import synthetic as syn
from autoscaler.workload.classes import assign_classes
from autoscaler.workload.shaping import MAX_REQUESTS
from autoscaler.workload.types import Request, Workload

BATCH_FRACTION = 0.2
GRID_S = 0.1
"""The step of the grid the cumulative rate is inverted on, seconds (far below any reaction time)."""
MAX_GRID_STEPS = 10_000_000
"""At most this many grid steps (about 11.6 days of knots at ``GRID_S``): the grid, the rate and the
cumulative rate are three float arrays of that length, 240 MB here; knots at 1e12 s would ask 72.8 TiB."""


def check_knots(knots: Sequence[tuple[float, float]]) -> None:
    """Check a rate curve's (time s, req/s) knots before anything sized by them is allocated.

    Raises:
        ValueError: fewer than two knots, times not increasing, a negative or non-finite value, knots
            spanning more than ``MAX_GRID_STEPS`` steps of ``GRID_S``, or a curve whose integral (the
            expected number of requests) exceeds ``shaping.MAX_REQUESTS``.
    """
    t = np.array([k[0] for k in knots], dtype=float)
    r = np.array([k[1] for k in knots], dtype=float)
    if len(knots) < 2 or not (np.all(np.isfinite(t)) and np.all(np.isfinite(r))) or np.any(np.diff(t) <= 0) \
            or np.any(r < 0):
        raise ValueError("knots need >= 2 points, finite increasing times and finite rates >= 0")
    steps = (t[-1] - t[0]) / GRID_S
    if steps > MAX_GRID_STEPS:
        raise ValueError(f"knots span {t[-1] - t[0]:.3g} s, {steps:.3g} steps of {GRID_S:g} s; at most "
                         f"{MAX_GRID_STEPS:,} ({MAX_GRID_STEPS * GRID_S / 86400:.1f} days) are drawn")
    expected = float(np.sum((r[1:] + r[:-1]) / 2 * np.diff(t)))  # the exact integral of a piecewise-linear rate
    if expected > MAX_REQUESTS:
        raise ValueError(f"knots ask ~{expected:,.0f} requests (the rate's integral); at most {MAX_REQUESTS:,} "
                         "are simulated in one run")


def piecewise_workload(
    knots: Sequence[tuple[float, float]],
    seed: int,
    name: str,
    input_tokens: tuple[float, float, int] = (syn.INPUT_MEDIAN_TOKENS, syn.INPUT_MEAN_TOKENS, syn.INPUT_MAX_TOKENS),
    output_tokens: tuple[float, float, int] = (syn.OUTPUT_MEDIAN_TOKENS, syn.OUTPUT_MEAN_TOKENS,
                                               syn.OUTPUT_MAX_TOKENS),
    batch_fraction: float = BATCH_FRACTION,
) -> Workload:
    """Requests whose rate follows the piecewise-linear ``knots`` (time s, req/s), from the first knot's time.

    Args:
        knots: (time s, req/s) points, times increasing.
        seed: random seed.
        name: the workload's name (its ``source`` is ``synthetic:<name>``).
        input_tokens, output_tokens: (median, mean, max) of the lognormal prompt and output lengths,
            tokens; the mean must be >= the median (equal: every request the same size).
        batch_fraction: share of batch requests (0..1).

    Raises:
        ValueError: bad knots (``check_knots``, before any array sized by them exists), or a size
            whose mean is below its median or whose maximum is below 1.
    """
    check_knots(knots)
    t = np.array([k[0] for k in knots], dtype=float)
    r = np.array([k[1] for k in knots], dtype=float)
    for label, (median, mean, top) in (("input_tokens", input_tokens), ("output_tokens", output_tokens)):
        if not 0 < median <= mean or top < 1:
            raise ValueError(f"{label}: need 0 < median <= mean and max >= 1, got {median}, {mean}, {top}")
    # cumulative rate on the grid, inverted by interpolation
    grid = np.linspace(t[0], t[-1], round((t[-1] - t[0]) / GRID_S) + 1)
    rate = np.interp(grid, t, r)
    cum = np.concatenate([[0.0], np.cumsum((rate[1:] + rate[:-1]) / 2 * np.diff(grid))])
    rng = np.random.default_rng(seed)
    points = np.cumsum(rng.exponential(1.0, int(cum[-1] + 10 * math.sqrt(cum[-1]) + 100)))
    arrivals = np.interp(points[points < cum[-1]], cum, grid)
    in_mu, in_sigma = syn.lognormal_params(input_tokens[0], input_tokens[1])
    out_mu, out_sigma = syn.lognormal_params(output_tokens[0], output_tokens[1])
    ins = np.clip(np.rint(rng.lognormal(in_mu, in_sigma, len(arrivals))), 1, input_tokens[2])
    outs = np.clip(np.rint(rng.lognormal(out_mu, out_sigma, len(arrivals))), 1, output_tokens[2])
    reqs = [Request(arrival_s=float(a - t[0]), input_tokens=int(i), output_tokens=int(o))
            for a, i, o in zip(arrivals, ins, outs, strict=True)]
    return assign_classes(Workload(reqs, source=f"synthetic:{name}", meta={"seed": seed}), batch_fraction, seed)
