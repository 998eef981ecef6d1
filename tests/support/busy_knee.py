"""The busy-period capacity form against the simulator's knee on one replica: the shared steps of the
slow band tests (``tests/unit/test_busy_period.py``, ``tests/unit/test_prefill_wait.py``)."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np

from autoscaler.config.fleet import FleetConfig
from autoscaler.knee import knee
from models.capacity import ReplicaSpec, RequestMix, replica_capacity


def lognormal_lengths(n: int, prompt: tuple[float, float, float], output: tuple[float, float, float],
                      seed: int = 1) -> tuple[np.ndarray, np.ndarray]:
    """``n`` (prompt, output) token counts, each lognormal with (median, log shift, sigma): the log mean
    is ``log(median) - shift``; rounded, at least 1."""
    rng = np.random.default_rng(seed)
    ins = np.clip(np.rint(rng.lognormal(math.log(prompt[0]) - prompt[1], prompt[2], n)), 1, None)
    outs = np.clip(np.rint(rng.lognormal(math.log(output[0]) - output[1], output[2], n)), 1, None)
    return ins, outs


def busy_model_and_knee(cfg: FleetConfig, ins: np.ndarray, outs: np.ndarray, served: np.ndarray, high: float,
                        steps: int) -> tuple[float, float]:
    """(the busy-period form's capacity of ``cfg``'s one replica on the ``served`` requests' mix at a
    2-s TTFT and 0.1-s ITL, req/s; the simulator's knee on all of ``ins``, ``outs``, searched over
    [0.5, ``high``] x the model in ``steps`` steps of at least 10,000 requests)."""
    spec = replace(ReplicaSpec.of(cfg.services[0].variants[0], cfg.engine), busy_period=True)
    model = replica_capacity(spec, RequestMix.from_requests(ins[served], outs[served]), 2.0, 0.1).rps
    measured, _ = knee(cfg, ins, outs, 0.5 * model, high * model, steps=steps, min_requests=10_000)
    return model, measured
