"""Synthetic step and ramp workloads for the compare benchmarks, built in code (no data files).

Step and ramp: ``autoscaler.workload.piecewise`` (a Poisson process on a piecewise-linear rate, the
embedded default's request sizes, no prefix sharing, each request its own task, 20 % batch). Same
arguments and seed, same workload.
"""

from __future__ import annotations

import numpy as np

from autoscaler.workload import synthetic as syn
from autoscaler.workload.classes import assign_classes
from autoscaler.workload.piecewise import BATCH_FRACTION, check_knots, piecewise_workload
from autoscaler.workload.types import Request, Workload


def step_workload(base_rps: float, factor: float, before_s: float, rise_s: float, after_s: float,
                  seed: int = 0) -> Workload:
    """``base_rps`` for ``before_s``, up to ``factor`` x within ``rise_s``, held for ``after_s``."""
    t1 = before_s + rise_s
    knots = [(0.0, base_rps), (before_s, base_rps), (t1, base_rps * factor), (t1 + after_s, base_rps * factor)]
    return piecewise_workload(knots, seed, "step")


def ramp_workload(low_rps: float, high_rps: float, hold_low_s: float, up_s: float, hold_high_s: float,
                  down_s: float, seed: int = 0) -> Workload:
    """``low_rps`` for ``hold_low_s``, linear to ``high_rps`` over ``up_s``, held, back down over ``down_s``."""
    t1 = hold_low_s + up_s
    t2 = t1 + hold_high_s
    knots = [(0.0, low_rps), (hold_low_s, low_rps), (t1, high_rps), (t2, high_rps), (t2 + down_s, low_rps)]
    return piecewise_workload(knots, seed, "ramp")


SYNTHETIC = {"step": step_workload, "ramp": ramp_workload}


def surge_workload(base_rps: float, surge_rps: float, before_s: float, surge_s: float, after_s: float,
                   min_steps: int = 3, max_steps: int = 5, think_s: float = 10.0, prompt_scale: float = 1.0,
                   seed: int = 0) -> Workload:
    """Multi-step tasks whose request rate is ``base_rps``, ``surge_rps`` for ``surge_s`` (from
    ``before_s``, stepping up within a second), then ``base_rps`` again for ``after_s``.

    Each task (a workflow) has a uniform number of steps in ``[min_steps, max_steps]``; its first step
    arrives by the Poisson process above thinned to tasks (rate / mean steps), each later step an
    exponential think time (mean ``think_s``) after the one before, whatever became of it (the
    clients send on schedule; a real agent would wait for the answer). Sizes as ``piecewise_workload``,
    every prompt's length times ``prompt_scale`` (rounded, at least 1: a long-prompt mix of the same shape);
    classes and priorities per task (``assign_classes``: 20 % batch = sheddable, of the rest 25 %
    critical, 75 % standard).

    Raises:
        ValueError: rates < 0, a step count outside 1 <= min_steps <= max_steps, think_s <= 0,
            prompt_scale <= 0, or a curve of more than ``MAX_REQUESTS`` requests, steps counted (``check_knots``).
    """
    if base_rps < 0 or surge_rps < 0 or not 1 <= min_steps <= max_steps or not think_s > 0 or not prompt_scale > 0:
        raise ValueError("need rates >= 0, 1 <= min_steps <= max_steps, think_s > 0 and prompt_scale > 0")
    mean_steps = (min_steps + max_steps) / 2
    t1, t2 = before_s, before_s + surge_s
    knots = [(0.0, base_rps / mean_steps), (t1, base_rps / mean_steps), (t1 + 1.0, surge_rps / mean_steps),
             (t2, surge_rps / mean_steps), (t2 + 1.0, base_rps / mean_steps), (t2 + after_s, base_rps / mean_steps)]
    check_knots([(t, r * mean_steps) for t, r in knots])  # the requests, every step of every task counted
    starts = piecewise_workload(knots, seed, "surge").requests
    rng = np.random.default_rng((seed, 7))
    in_mu, in_sigma = syn.lognormal_params(syn.INPUT_MEDIAN_TOKENS, syn.INPUT_MEAN_TOKENS)
    out_mu, out_sigma = syn.lognormal_params(syn.OUTPUT_MEDIAN_TOKENS, syn.OUTPUT_MEAN_TOKENS)
    reqs = []
    for wf, first in enumerate(starts):
        t = first.arrival_s
        for step in range(int(rng.integers(min_steps, max_steps + 1))):
            if step:
                t += float(rng.exponential(think_s))
                ins = int(np.clip(np.rint(rng.lognormal(in_mu, in_sigma)), 1, syn.INPUT_MAX_TOKENS))
                outs = int(np.clip(np.rint(rng.lognormal(out_mu, out_sigma)), 1, syn.OUTPUT_MAX_TOKENS))
            else:
                ins, outs = first.input_tokens, first.output_tokens
            if prompt_scale != 1.0:
                ins = max(1, round(ins * prompt_scale))
            reqs.append(Request(arrival_s=t, input_tokens=ins, output_tokens=outs, workflow_id=wf, step=step))
    wl = Workload(reqs, source="synthetic:surge", meta={"seed": seed})
    return assign_classes(wl, BATCH_FRACTION, seed)


SYNTHETIC["surge"] = surge_workload
