"""Benchmark: the capacity model (``models.capacity``) against the simulator's measured knee.

For each case (a GPU, engine settings, an SLO and a request mix), one replica serves Poisson
arrivals for 20 minutes (longer where that is under 10,000 requests); bisection on the rate (from
0.5 to 2.5 times the model's) finds the highest one served at 99 % interactive SLO attainment, less
what it misses even idle (``autoscaler.knee``; where the model says it misses over 1 % idle, what
each run's own requests miss idle, ``paired_idle``). The model's capacity (its tightest bound; where
that is 0 for missing more idle than the service's best variant allows, also its capacity over its
own idle misses, which the search then brackets), which bound that is, the rate at which the four
bounds share one budget of misses (``shared_capacity``) and both over the knee are printed.
Synthetic mixed cases draw lognormal lengths (seeded) with the given means and sigmas; trace cases
draw the (prompt, output) pairs of a trace in ``--data`` (those within the case's context). Issue
28's band for the ratio: 0.90-1.05, never above 1.05.

With ``--roles`` it measures a prefill or a decode replica of ``examples/fleet-pd.yaml``'s P/D pools
instead (``ROLE_CASES``): the role's model (``models.capacity_roles``) against the knee of a static P/D
fleet (``autoscaler.knee.pd_fleet``) of one replica of that role and enough of the other (four times
the role's model over the other's) that only the measured one limits, rates of the whole service.

    python benchmarks/capacity.py [--cases NAME ...] [--data ../shared/data] [--replicas N (>= 1)] [--prefill-cap]
        [--busy-period] [--backlog] [--prompt-marginal] [--seed N (>= 0)] [--json]
    python benchmarks/capacity.py --roles [--cases NAME ...] [--data ../shared/data] [--json]
        (--replicas, --prefill-cap, --busy-period, --backlog, --prompt-marginal and --seed are refused with --roles)
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from autoscaler.config import FleetConfig
from autoscaler.config.loading import load_config
from autoscaler.knee import IDLE_REQUESTS, knee, one_replica, pd_fleet
from autoscaler.workload.loader import load_trace
from models.capacity import (
    MOSTLY_UNSERVABLE,
    ReplicaSpec,
    RequestMix,
    allowance,
    idle_misses,
    mean_itl_rate,
    replica_capacity,
    shared_capacity,
)
from models.capacity_roles import RoleCapacity, decode_capacity, prefill_capacity

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the benchmarks' own modules
from provenance import stamp

ROOT = Path(__file__).resolve().parents[1]
MIN_REQUESTS = 10_000  # per simulation of the knee search: 1 % of them is 100 requests
IDLE_MISSING = 0.01  # a mix the model says a replica misses more of than this idle (long prompts) has each
# run's idle share measured on its own requests (``knee(..., paired_idle=True)``): two independent draws of
# 10,000-20,000 requests differ by +-0.4 points at 14 % idle misses (ServeGen-day lengths on an A100), and an
# A100's misses grow ~0.5 points per 0.01 req/s there, so an idle share of its own draw moved its knee ~2x


@dataclass(frozen=True)
class Case:
    """One replica's settings and its lengths: ``prompt``/``output`` means with lognormal ``sigmas``
    (fixed lengths without), or the pairs of ``trace`` (relative to ``--data``)."""

    variant: str
    kv: int = 400_000
    seqs: int = 256
    chunk: int = 8192
    ttft_s: float = 2.0
    prompt: int = 0
    output: int = 0
    sigmas: tuple[float, float] | None = None
    trace: str | None = None
    context: int = 32768


AZURE_CONV = "azure-llm-2023/AzureLLMInferenceTrace_conv.csv"
AZURE_CODE = "azure-llm-2023/AzureLLMInferenceTrace_code.csv"
MOONCAKE = "mooncake/conversation_trace.jsonl"
CASES: dict[str, Case] = {
    "seqs-bound 100/1000": Case("h100", seqs=64, prompt=100, output=1000),
    "kv-bound 1000/3000": Case("h100", kv=120_000, prompt=1000, output=3000),
    "ttft-bound 4000/50 at 0.5 s": Case("h100", ttft_s=0.5, prompt=4000, output=50),
    "itl-bound 8000/20": Case("h100", prompt=8000, output=20),
    "azure-conv-like h100": Case("h100", prompt=1154, output=211, sigmas=(1.0, 1.2)),
    "azure-conv-like a100": Case("a100", prompt=1154, output=211, sigmas=(1.0, 1.2)),
    "azure-conv-like gh200": Case("gh200", kv=500_000, prompt=1154, output=211, sigmas=(1.0, 1.2)),
    "azure-conv-like 2048-token chunks": Case("h100", chunk=2048, prompt=1154, output=211, sigmas=(1.0, 1.2)),
    "azure-code-like 2048/28": Case("h100", prompt=2048, output=28, sigmas=(0.8, 1.0)),
    "mooncake-like 9000/350": Case("h100", prompt=9000, output=350, sigmas=(0.7, 1.0)),
    "reasoning 500/2000": Case("h100", prompt=500, output=2000, sigmas=(0.8, 0.8)),
    # the shipped scenarios' lengths: each trace's own pairs, on the scenario's engine settings
    "azure-conv trace h100": Case("h100", trace=AZURE_CONV),
    "azure-conv trace a100": Case("a100", trace=AZURE_CONV),
    "azure-code trace h100, 2048-token chunks": Case("h100", chunk=2048, trace=AZURE_CODE),
    "azure-code trace gh200, 2048-token chunks": Case("gh200", kv=500_000, chunk=2048, trace=AZURE_CODE),
    "mooncake trace h100": Case("h100", trace=MOONCAKE),
    # the ServeGen days' lengths (Mooncake's pairs in a 128k context): long prompts, on A100 too
    "servegen-day lengths h100, 128k": Case("h100", trace=MOONCAKE, context=131072),
    "servegen-day lengths a100, 128k": Case("a100", trace=MOONCAKE, context=131072),
}


# P/D cases: (role measured, the lengths of a Case above) on examples/fleet-pd.yaml's H100 pools
ROLE_CASES: dict[str, tuple[str, Case]] = {
    "prefill, azure-conv-like": ("prefill", CASES["azure-conv-like h100"]),
    "decode, azure-conv-like": ("decode", CASES["azure-conv-like h100"]),
    "prefill, azure-code trace": ("prefill", Case("h100", trace=AZURE_CODE)),
    "decode, azure-code trace": ("decode", Case("h100", trace=AZURE_CODE)),
    "prefill, mooncake-like 9000/350": ("prefill", CASES["mooncake-like 9000/350"]),
    "decode, mooncake-like 9000/350": ("decode", CASES["mooncake-like 9000/350"]),
}
OTHER_POOL_MARGIN = 4.0  # the other pool's model capacity over the measured role's
ROLE_MIN_REQUESTS = 40_000  # a prefill replica's TTFT tail comes in long busy periods: 10,000 left its knee
# moving 26-29 req/s on Azure-conv-like lengths with the bracket alone


def role_models(cfg: FleetConfig, mix: RequestMix) -> tuple[RoleCapacity, RoleCapacity]:
    """(prefill, decode) capacity of one replica of ``cfg``'s first service's first pool variants."""
    svc = cfg.services[0]
    assert svc.roles is not None
    ps, ds = ReplicaSpec.of(svc.roles.prefill[0], cfg.engine), ReplicaSpec.of(svc.roles.decode[0], cfg.engine)
    slo, link, thr = svc.slo["interactive"], svc.roles.kv_transfer, svc.roles.remote_threshold
    return (prefill_capacity(ps, mix, slo.ttft_s, link, non_cached_tokens=thr),
            decode_capacity(ds, mix, slo.ttft_s, slo.itl_s, link, prefill_spec=ps, non_cached_tokens=thr))


def measure_role(name: str, data: Path) -> dict[str, Any]:
    role, case = ROLE_CASES[name]
    base = load_config(ROOT / "examples" / "fleet-pd.yaml")
    ins, outs = lengths(case, data)
    keep = ins + outs <= case.context  # the simulator rejects the rest, and counts them nowhere
    ins, outs = ins[keep], outs[keep]
    mix = RequestMix.from_requests(ins.tolist(), outs.tolist())
    pre, dec = role_models(pd_fleet(base, 1, 1, max_model_len=case.context), mix)
    model, other = (pre, dec) if role == "prefill" else (dec, pre)
    others = max(2, math.ceil(OTHER_POOL_MARGIN * model.rps / other.rps))
    cfg = pd_fleet(base, 1 if role == "prefill" else others, others if role == "prefill" else 1,
                   max_model_len=case.context)
    measured, target = knee(cfg, ins, outs, 0.5 * model.rps, 2.5 * model.rps, steps=9,
                            min_requests=ROLE_MIN_REQUESTS)
    return {"case": name, "role": role, "model_rps": model.rps, "binding": model.binding, "knee_rps": measured,
            "target": target, "ratio": model.rps / measured, "others": others, "bounds_rps": model.bounds,
            "prompt_tokens_per_s": model.prompt_tokens_per_s, "sequences": model.sequences,
            "edge": not 0.51 * model.rps < measured < 2.49 * model.rps}


def fleet(case: Case, replicas: int = 1) -> FleetConfig:
    """The example fleet reduced to ``replicas`` of the case's variant with its settings."""
    return one_replica(load_config(ROOT / "examples" / "fleet.yaml"), case.variant, replicas=replicas,
                       kv_cache_tokens=case.kv,
                       max_num_seqs=case.seqs, max_num_batched_tokens=case.chunk, ttft_s=case.ttft_s,
                       max_model_len=case.context)


def lengths(case: Case, data: Path, n: int = 20_000, seed: int = 1) -> tuple[np.ndarray, np.ndarray]:
    """The case's (prompt, output) pairs: a trace's (within its context), or ``n`` drawn (seeded)."""
    if case.trace is not None:
        pairs = np.array([(r.input_tokens, r.output_tokens) for r in load_trace(data / case.trace).requests])
        pairs = pairs[pairs.sum(axis=1) <= case.context]
        return pairs[:, 0], pairs[:, 1]
    if case.sigmas is None:
        return np.full(n, case.prompt), np.full(n, case.output)
    rng = np.random.default_rng(seed)

    def ln(mean: float, s: float) -> np.ndarray:
        return np.clip(np.rint(rng.lognormal(math.log(mean) - s * s / 2, s, n)), 1, None)
    return ln(case.prompt, case.sigmas[0]), ln(case.output, case.sigmas[1])


def measure(name: str, data: Path, replicas: int = 1, prefill_cap: bool = False,
            busy_period: bool = False, seed: int = 0, backlog: bool = False,
            prompt_marginal: bool = False) -> dict[str, Any]:
    case = CASES[name]
    cfg = fleet(case, replicas)
    spec = replace(ReplicaSpec.of(cfg.services[0].variants[0], cfg.engine), prefill_cap=prefill_cap,
                   busy_period=busy_period or backlog, backlog=backlog, prompt_marginal=prompt_marginal)
    ins, outs = lengths(case, data)
    # the model sizes what the replica serves: a request over the context is rejected (HTTP 400) and
    # counted nowhere in the knee's attainment (on Mooncake-like lengths 1.4 % of the draws)
    served = ins + outs <= case.context
    mix = RequestMix.from_requests(ins[served].tolist(), outs[served].tolist())
    itl_s = cfg.services[0].slo["interactive"].itl_s
    # the idle misses a variant may show are the example service's (its best variant's, plus 5 points)
    example = load_config(ROOT / "examples" / "fleet.yaml").services[0]
    limit = allowance([replace(ReplicaSpec.of(v, cfg.engine), prefill_cap=prefill_cap,
                               busy_period=busy_period or backlog, backlog=backlog, prompt_marginal=prompt_marginal)
                       for v in example.variants], mix, case.ttft_s, itl_s)
    model = replica_capacity(spec, mix, case.ttft_s, itl_s, unservable=limit, replicas=replicas)
    shared = shared_capacity(spec, mix, case.ttft_s, itl_s, unservable=limit, replicas=replicas)
    # A variant given 0 for missing more idle than ``limit`` (the service's best variant's idle misses
    # plus ``UNSERVABLE_SHARE``) still has a capacity over its own idle misses, which is what the knee
    # measures: the search brackets that
    own = model.rps if model.rps > 0 else replica_capacity(spec, mix, case.ttft_s, itl_s, unservable=MOSTLY_UNSERVABLE,
                                                           replicas=replicas).rps
    around = own if own > 0 else 0.5 * mean_itl_rate(spec, mix, itl_s)
    idle = idle_misses(spec, mix, case.ttft_s, itl_s)
    measured, target = knee(cfg, ins, outs, 0.5 * around, 2.5 * around, steps=9, seed=seed,
                            min_requests=MIN_REQUESTS, idle_requests=IDLE_REQUESTS, paired_idle=idle > IDLE_MISSING)
    return {"case": name, "model_rps": model.rps, "binding": model.binding, "knee_rps": measured,
            "target": target, "ratio": model.rps / measured, "shared_rps": shared, "shared_ratio": shared / measured,
            "own_floor_rps": own, "own_floor_ratio": own / measured, "model_idle_misses": idle,
            "edge": not 0.51 * around < measured < 2.49 * around,
            "bounds_rps": {b: getattr(model, f"{b}_rps") for b in ("itl", "ttft", "seqs", "kv")}}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0].replace("\n", " "))
    ap.add_argument("--cases", nargs="+", choices=[*CASES, *ROLE_CASES], metavar="NAME",
                    help=f"cases to run (default: all of {', '.join(CASES)}; with --roles all of "
                         f"{', '.join(ROLE_CASES)})")
    ap.add_argument("--roles", action="store_true",
                    help="measure one prefill or decode replica of examples/fleet-pd.yaml's pools (ROLE_CASES)")
    ap.add_argument("--data", type=Path, default=ROOT.parent / "shared" / "data",
                    help="folder holding the traces the trace cases name")
    ap.add_argument("--replicas", type=int, default=None,
                    help="replicas behind the least-loaded router, >= 1 (rates per replica; the model pooled as many; "
                         "default 1); not with --roles")
    ap.add_argument("--prefill-cap", action="store_true",
                    help="the model's ITL bound counts that a step prefills at most its token budget "
                         "(models.capacity.ReplicaSpec.prefill_cap); not with --roles")
    ap.add_argument("--busy-period", action="store_true",
                    help="the model's ITL bound takes the prefill riding in a decode as an M/G/1 busy period's work "
                         "(models.capacity.ReplicaSpec.busy_period); not with --roles")
    ap.add_argument("--backlog", action="store_true",
                    help="the busy-period form (implies --busy-period) with its prefill queue as a backlog serves it: "
                         "queued prompts share a step's overhead, and the prompts a busy period admitted weigh on its "
                         "steps and the KV (models.capacity.ReplicaSpec.backlog); not with --roles")
    ap.add_argument("--prompt-marginal", action="store_true",
                    help="the model's TTFT bound reads the prompts' marginal on one replica "
                         "(models.capacity.ReplicaSpec.prompt_marginal); not with --roles")
    ap.add_argument("--seed", type=int, default=None,
                    help="the knee's simulations' seed, >= 0 (arrivals and the pairs drawn; the lengths' own draw is "
                         "fixed; default 0); not with --roles")
    ap.add_argument("--json", action="store_true", help="print one JSON object per case")
    args = ap.parse_args()
    print(f"{Path(__file__).name}: {stamp()}", file=sys.stderr if args.json else sys.stdout, flush=True)
    table = ROLE_CASES if args.roles else CASES
    names = args.cases or list(table)
    wrong = [n for n in names if n not in table]
    if wrong:
        ap.error(f"--cases: {', '.join(wrong)} {'is not a --roles case' if args.roles else 'needs --roles'}")
    if args.seed is not None and args.roles:
        ap.error("--seed: the --roles cases run on their fixed seed (measure_role takes none)")
    if args.seed is not None and args.seed < 0:
        ap.error(f"--seed: must be >= 0, got {args.seed}")
    if args.roles:
        # measure_role takes none of these: each would be silently ignored
        given = [flag for flag, on in (("--replicas", args.replicas is not None), ("--prefill-cap", args.prefill_cap),
                                       ("--busy-period", args.busy_period), ("--backlog", args.backlog),
                                       ("--prompt-marginal", args.prompt_marginal)) if on]
        if given:
            ap.error(f"{', '.join(given)}: not with --roles (the P/D role models take no such option)")
    if args.replicas is not None and args.replicas < 1:
        ap.error(f"--replicas: must be >= 1, got {args.replicas}")
    replicas = 1 if args.replicas is None else args.replicas
    seed = 0 if args.seed is None else args.seed
    if args.roles:
        for name in names:
            t = time.perf_counter()
            row = measure_role(name, args.data)
            if args.json:
                print(json.dumps(row), flush=True)
            else:
                print(f"{name:<34} model {row['model_rps']:7.3f} req/s ({row['binding']:<4}) knee "
                      f"{row['knee_rps']:7.3f} at {row['target']:.2%} ratio {row['ratio']:.2f} "
                      f"[{row['others']} of the other role]{' (knee at the edge)' if row['edge'] else ''}",
                      flush=True)
            print(f"  {name}: {time.perf_counter() - t:.0f} s", file=sys.stderr, flush=True)
        return
    for name in names:
        t = time.perf_counter()
        row = measure(name, args.data, replicas, args.prefill_cap, args.busy_period, seed, args.backlog,
                      args.prompt_marginal)
        if args.json:
            print(json.dumps(row), flush=True)
        else:
            print(f"{name:<42} model {row['model_rps']:7.3f} req/s ({row['binding']:<4}) shared budget "
                  f"{row['shared_rps']:7.3f} knee {row['knee_rps']:7.3f} at {row['target']:.2%} ratio "
                  f"{row['ratio']:.2f} shared {row['shared_ratio']:.2f}{' (knee at the edge)' if row['edge'] else ''}"
                  + (f" [0: misses {row['model_idle_misses']:.1%} idle; over its own: {row['own_floor_rps']:.4f}, "
                     f"ratio {row['own_floor_ratio']:.2f}]" if row["model_rps"] == 0 else ""),
                  flush=True)
        print(f"  {name}: {time.perf_counter() - t:.0f} s", file=sys.stderr, flush=True)


if __name__ == "__main__":
    main()
