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
from autoscaler.workload.types import Request, Workload

BATCH_FRACTION = 0.2


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
        ValueError: fewer than two knots, times not increasing, a negative rate, or a size whose
            mean is below its median or whose maximum is below 1.
    """
    t = np.array([k[0] for k in knots], dtype=float)
    r = np.array([k[1] for k in knots], dtype=float)
    if len(knots) < 2 or np.any(np.diff(t) <= 0) or np.any(r < 0):
        raise ValueError("knots need >= 2 points, increasing times and rates >= 0")
    for label, (median, mean, top) in (("input_tokens", input_tokens), ("output_tokens", output_tokens)):
        if not 0 < median <= mean or top < 1:
            raise ValueError(f"{label}: need 0 < median <= mean and max >= 1, got {median}, {mean}, {top}")
    # cumulative rate on a 0.1 s grid (far below any reaction time), inverted by interpolation
    grid = np.linspace(t[0], t[-1], round((t[-1] - t[0]) * 10) + 1)
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
