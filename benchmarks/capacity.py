"""Benchmark: the capacity model (``models.capacity``) against the simulator's measured knee.

For each case (a GPU, engine settings, an SLO and a request mix), one replica serves Poisson arrivals
for 20 minutes; bisection on the rate finds the highest one served at >= 99 % interactive SLO
attainment (the knee). The model's capacity, its binding bound and the ratio model / knee are
printed. Mixed cases draw lognormal lengths (seeded) with the given means and sigmas.

    python benchmarks/capacity.py [--cases NAME ...] [--json]
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from autoscaler.config import FleetConfig
from autoscaler.config.loading import load_config
from autoscaler.report import summarize
from autoscaler.simulate import run_simulation
from autoscaler.workload.types import Request, Workload
from controllers.static import StaticController
from models.capacity import ReplicaSpec, RequestMix, replica_capacity

ROOT = Path(__file__).resolve().parents[1]
RUN_S = 1200.0

# name: (variant, kv tokens, max_num_seqs, max_num_batched_tokens, TTFT SLO s, prompt, output, sigmas or None)
CASES: dict[str, tuple[str, int, int, int, float, int, int, tuple[float, float] | None]] = {
    "seqs-bound 100/1000": ("h100", 400_000, 64, 8192, 2.0, 100, 1000, None),
    "kv-bound 1000/3000": ("h100", 120_000, 256, 8192, 2.0, 1000, 3000, None),
    "ttft-bound 4000/50 at 0.5 s": ("h100", 400_000, 256, 8192, 0.5, 4000, 50, None),
    "itl-bound 8000/20": ("h100", 400_000, 256, 8192, 2.0, 8000, 20, None),
    "azure-conv-like h100": ("h100", 400_000, 256, 8192, 2.0, 1154, 211, (1.0, 1.2)),
    "azure-conv-like a100": ("a100", 400_000, 256, 8192, 2.0, 1154, 211, (1.0, 1.2)),
    "azure-conv-like gh200": ("gh200", 500_000, 256, 8192, 2.0, 1154, 211, (1.0, 1.2)),
    "azure-conv-like 2048-token chunks": ("h100", 400_000, 256, 2048, 2.0, 1154, 211, (1.0, 1.2)),
    "azure-code-like 2048/28": ("h100", 400_000, 256, 8192, 2.0, 2048, 28, (0.8, 1.0)),
    "mooncake-like 9000/350": ("h100", 400_000, 256, 8192, 2.0, 9000, 350, (0.7, 1.0)),
    "reasoning 500/2000": ("h100", 400_000, 256, 8192, 2.0, 500, 2000, (0.8, 0.8)),
}


def fleet(variant: str, kv: int, seqs: int, chunk: int, ttft: float) -> FleetConfig:
    """The example fleet reduced to one replica of ``variant`` with these settings."""
    cfg = load_config(ROOT / "examples" / "fleet.yaml").model_copy(deep=True)
    svc = cfg.services[0]
    svc.variants = [v for v in svc.variants if v.name == variant]
    v = svc.variants[0]
    v.min_replicas, v.kv_cache_tokens, v.quota, v.initial_replicas = 0, kv, None, 1
    svc.slo["interactive"].ttft_s = ttft
    cfg.engine.max_num_seqs, cfg.engine.max_num_batched_tokens = seqs, chunk
    return cfg


def lengths(n: int, prompt: int, output: int, sigmas: tuple[float, float] | None, seed: int) -> tuple[np.ndarray,
                                                                                                   np.ndarray]:
    """``n`` prompt and output lengths: fixed, or lognormal with these means and sigmas."""
    if sigmas is None:
        return np.full(n, prompt), np.full(n, output)
    rng = np.random.default_rng(seed)

    def ln(mean: float, s: float) -> np.ndarray:
        return np.clip(np.rint(rng.lognormal(math.log(mean) - s * s / 2, s, n)), 1, None)
    return ln(prompt, sigmas[0]), ln(output, sigmas[1])


def workload(rate: float, prompt: int, output: int, sigmas: tuple[float, float] | None, seed: int = 0) -> Workload:
    rng = np.random.default_rng(seed)
    t = np.sort(rng.uniform(0.0, RUN_S, rng.poisson(rate * RUN_S)))
    ins, outs = lengths(len(t), prompt, output, sigmas, seed + 1)
    return Workload([Request(float(a), int(i), int(o)) for a, i, o in zip(t, ins, outs, strict=True)], source="knee")


def knee(cfg: FleetConfig, prompt: int, output: int, sigmas: tuple[float, float] | None, lo: float,
         hi: float) -> float:
    one = StaticController({cfg.services[0].name: {cfg.services[0].variants[0].name: 1}}, cfg.controller.tick_s,
                           cfg.controller.window_s)
    for _ in range(8):
        mid = (lo + hi) / 2
        res = summarize(run_simulation(cfg, workload(mid, prompt, output, sigmas), one))
        lo, hi = (mid, hi) if res["slo_attainment"]["interactive"] >= 0.99 else (lo, mid)
    return (lo + hi) / 2


def measure(name: str) -> dict[str, Any]:
    variant, kv, seqs, chunk, ttft, prompt, output, sigmas = CASES[name]
    cfg = fleet(variant, kv, seqs, chunk, ttft)
    spec = ReplicaSpec.of(cfg.services[0].variants[0], cfg.engine)
    ins, outs = lengths(20_000, prompt, output, sigmas, 1)
    model = replica_capacity(spec, RequestMix.from_requests(ins, outs), ttft, cfg.services[0].slo["interactive"].itl_s)
    measured = knee(cfg, prompt, output, sigmas, 0.5 * model.rps, 1.5 * model.rps)
    return {"case": name, "model_rps": model.rps, "binding": model.binding, "knee_rps": measured,
            "ratio": model.rps / measured,
            "bounds_rps": {b: getattr(model, f"{b}_rps") for b in ("itl", "ttft", "seqs", "kv")}}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0].replace("\n", " "))
    ap.add_argument("--cases", nargs="+", default=list(CASES), choices=list(CASES), metavar="NAME")
    ap.add_argument("--json", action="store_true", help="print one JSON object per case")
    args = ap.parse_args()
    for name in args.cases:
        t = time.perf_counter()
        row = measure(name)
        if args.json:
            print(json.dumps(row), flush=True)
        else:
            print(f"{name:<36} model {row['model_rps']:7.3f} req/s ({row['binding']:<4}) knee {row['knee_rps']:7.3f} "
                  f"ratio {row['ratio']:.2f}", flush=True)
        print(f"  {name}: {time.perf_counter() - t:.0f} s", file=sys.stderr, flush=True)


if __name__ == "__main__":
    main()
