"""Rate shaping: speed a workload up or down in time, and thin or multiply its request rate.

Rules (all randomness from ``np.random.default_rng((seed, classes.SHAPE_STREAM))``, a stream of its own;
same input and seed -> same output):
    * Units: a request's unit is its workflow if it has one, else the request itself. Thinning and
      jitter act on whole units, so a kept conversation keeps all its steps, in order.
    * ``time_scale``: every arrival is multiplied by it (0.5 = the same requests in half the time,
      i.e. twice the rate).
    * ``rate_scale`` < 1: each unit of the original is kept with probability ``rate_scale``.
    * ``rate_scale`` >= 1: the original, plus floor(rate_scale) - 1 extra copies, plus one more copy
      thinned to the remainder rate_scale - floor(rate_scale). Each unit of extra copy k >= 1 is shifted
      by one offset drawn uniformly in [-jitter_s, +jitter_s] (seconds, after ``time_scale``); a time
      pushed below 0 is reflected (|t|). Default jitter 5 s: wider than the 1-10 s scales an autoscaler
      reacts on, so copies do not arrive in lock-step, yet far below the minutes-long rate swings.
    * Hash ids of copy k are ``id + k * (max_id + 1)`` — disjoint from the original and every other
      copy — except *shared* ids, those present in at least ``shared_min_fraction`` (default 1 %) of
      the requests, which stay as they are: they model a system prompt every user sends. On the
      Mooncake conversation trace only id 0 (in 100 % of requests) is shared; the next most common id
      is in 43 of 12,031 requests (0.36 %). Because ids are chained, a shared id's prefix is shared too.
      Below ~1 / shared_min_fraction requests every id counts as shared: pass a larger fraction there.
    * Workflow ids of copy k are ``id + k * (max_workflow_id + 1)``; steps are unchanged.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from autoscaler.workload.classes import SHAPE_STREAM, SHARED_MIN_FRACTION, shared_ids, unit_index
from autoscaler.workload.types import Request, Workload

# Requests in one shaped workload. A simulated request costs ~0.3-0.45 KB of memory (its `Request`,
# ~250 B, plus 65-193 B of run heap) and ~1/27,000 s at x20-x100 (docs/benchmarks.md, 'Simulator
# speed'): 20 M is ~6-9 GB and ~12 minutes; beyond it is almost surely a typo.
MAX_REQUESTS = 20_000_000
JITTER_S = 5.0
"""Half-width of an extra copy's per-unit arrival shift, seconds (module rules: why 5 s)."""


def copy_plan(rate_scale: float) -> list[tuple[int, float]]:
    """(copy index, keep probability) of each copy ``rate_scale`` makes, the original first (copy 0;
    module rules): ``[(0, r)]`` for r < 1, else floor(r) whole copies and one thinned to the rest."""
    if rate_scale < 1:
        return [(0, rate_scale)]
    whole = math.floor(rate_scale)
    plan = [(k, 1.0) for k in range(whole)]
    if rate_scale > whole:
        plan.append((whole, rate_scale - whole))
    return plan


def shape(
    workload: Workload,
    time_scale: float = 1.0,
    rate_scale: float = 1.0,
    seed: int = 0,
    jitter_s: float = JITTER_S,
    shared_min_fraction: float = SHARED_MIN_FRACTION,
) -> Workload:
    """Return a time-scaled and rate-scaled copy of ``workload`` (the input is not modified).

    Args:
        workload: the requests to shape.
        time_scale: factor on arrival times (> 0); the mean rate becomes rate / time_scale.
        rate_scale: factor on the number of requests (> 0), see the module rules.
        seed: random seed for thinning and jitter.
        jitter_s: half-width of the uniform shift of each unit of an extra copy, seconds (>= 0).
        shared_min_fraction: fraction of requests (in (0, 1]) an id must appear in to stay shared
            across copies.

    Returns:
        the shaped ``Workload``; ``meta`` gains ``time_scale``, ``rate_scale`` and ``shape_seed``.

    Raises:
        ValueError: a non-finite or out-of-range argument, or more than ``MAX_REQUESTS`` requests.
    """
    for name, value in (("time_scale", time_scale), ("rate_scale", rate_scale)):
        if not (math.isfinite(value) and value > 0):
            raise ValueError(f"{name} must be a finite number > 0, got {value}")
    if not (math.isfinite(jitter_s) and jitter_s >= 0):
        raise ValueError(f"jitter_s must be a finite number >= 0 seconds, got {jitter_s}")
    if not 0 < shared_min_fraction <= 1:
        raise ValueError(f"shared_min_fraction must be in (0, 1], got {shared_min_fraction}")

    reqs = workload.requests
    if len(reqs) * rate_scale > MAX_REQUESTS:
        raise ValueError(f"rate_scale {rate_scale:g} would make ~{len(reqs) * rate_scale:,.0f} requests from "
                         f"{len(reqs):,}; at most {MAX_REQUESTS:,} are simulated in one run")
    units = unit_index(reqs)
    n_units = int(units.max()) + 1 if len(units) else 0
    id_stride = max((max(r.hash_ids) for r in reqs if r.hash_ids), default=-1) + 1
    wf_stride = max((r.workflow_id for r in reqs if r.workflow_id is not None), default=-1) + 1
    shared = shared_ids(reqs, shared_min_fraction)

    plan = copy_plan(rate_scale)
    rng = np.random.default_rng((seed, SHAPE_STREAM))
    out: list[Request] = []
    for k, keep_p in plan:
        keep = rng.random(n_units) < keep_p if keep_p < 1 else np.ones(n_units, dtype=bool)
        shift = rng.uniform(-jitter_s, jitter_s, n_units) if k > 0 else np.zeros(n_units)
        for r, u in zip(reqs, units, strict=True):
            if not keep[u]:
                continue
            if k == 0:
                out.append(dataclasses.replace(r, arrival_s=r.arrival_s * time_scale))
                continue
            out.append(
                dataclasses.replace(
                    r,
                    arrival_s=abs(r.arrival_s * time_scale + float(shift[u])),
                    hash_ids=tuple(h if h in shared else h + k * id_stride for h in r.hash_ids),
                    workflow_id=None if r.workflow_id is None else r.workflow_id + k * wf_stride,
                )
            )
    meta = {**workload.meta, "time_scale": time_scale, "rate_scale": rate_scale, "shape_seed": seed}
    return Workload(out, workload.block_tokens, workload.source, meta)
