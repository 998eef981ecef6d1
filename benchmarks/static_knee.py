"""How much an adaptive controller can save on a trace: fixed fleets around peak provisioning, and
two-level schedules chosen in hindsight.

For the trace it runs, with ``examples/fleet.yaml``: static peak provisioning (the ``--controller
static`` fleet), the same fleet with one and two replicas fewer (removed from the variant with the
highest cost per capacity first, as ``controllers.split`` removes them), and schedules that hold the
one-smaller fleet until a switch time and the peak fleet after it (``ScheduledController``). A fleet
one replica smaller that still meets the SLO target means peak provisioning has slack; when it
misses, the best schedule bounds what any controller, knowing the future, could save. Then the PID.

    python benchmarks/static_knee.py [--trace ../shared/data/mooncake/conversation_trace.jsonl]
        [--rate-scale 6] [--switch-s 900 1200 1500] [--jobs 2]

Prints one line per run: fleet, SLO attainment over all classes, GPU-hours, and the GPU-hours
relative to static peak provisioning.
"""

from __future__ import annotations

import argparse
import sys
from multiprocessing import Pool
from pathlib import Path

from autoscaler.config.loading import load_config
from autoscaler.report import summarize
from autoscaler.simulate import run_simulation
from autoscaler.workload.build import DEFAULT_BATCH_FRACTION, build_workload
from autoscaler.workload.types import Workload
from controllers.split import cost_per_capacity
from controllers.static import ScheduledController, StaticController, peak_provisioning
from models.capacity import variant_weights

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the benchmarks' own modules
from provenance import stamp

ROOT = Path(__file__).resolve().parents[1]


def smaller(fleet: dict[str, int], order: list[str], mins: dict[str, int]) -> dict[str, int]:
    """``fleet`` less one replica of the first variant in ``order`` that is above its minimum."""
    out = dict(fleet)
    for name in order:
        if out[name] > mins[name]:
            out[name] -= 1
            return out
    raise ValueError(f"fleet {fleet} is already at its minimum")


_workload: list[Workload] = []  # one per worker process, built on its first job


def _run(job: tuple[str, object, argparse.Namespace]) -> tuple[str, float, float]:
    label, controller, args = job
    cfg = load_config(ROOT / "examples" / "fleet.yaml")
    if not _workload:
        _workload.append(build_workload(args.trace, None, args.rate_scale, 1.0, args.seed, DEFAULT_BATCH_FRACTION))
    r = summarize(run_simulation(cfg, _workload[0], controller))  # type: ignore[arg-type]
    return label, r["slo_attainment"]["all"], r["gpu_hours"]["total"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0].replace("\n", " "))
    ap.add_argument("--trace", type=Path,
                    default=ROOT.parent / "shared" / "data" / "mooncake" / "conversation_trace.jsonl",
                    help="request trace (default: the Mooncake conversation trace)")
    ap.add_argument("--rate-scale", type=float, default=6.0, help="rate scale of the trace")
    ap.add_argument("--seed", type=int, default=0, help="workload seed")
    ap.add_argument("--switch-s", type=float, nargs="+", default=[900.0, 1200.0, 1500.0],
                    help="times (s) at which a schedule switches from the one-smaller fleet to the peak fleet")
    ap.add_argument("--jobs", type=int, default=2, help="processes")
    args = ap.parse_args()
    print(f"{Path(__file__).name}: {stamp()}", flush=True)

    cfg = load_config(ROOT / "examples" / "fleet.yaml")
    svc = cfg.services[0]
    wl = build_workload(args.trace, None, args.rate_scale, 1.0, args.seed, DEFAULT_BATCH_FRACTION)
    w = variant_weights(svc, cfg.engine)
    dearest_first = [v.name for v in sorted(svc.variants, key=lambda v: -cost_per_capacity(v, w[v.name]))]
    mins = {v.name: v.min_replicas for v in svc.variants}
    peak = peak_provisioning(svc, cfg.engine, wl)
    minus1 = smaller(peak, dearest_first, mins)
    minus2 = smaller(minus1, dearest_first, mins)

    tick, window = cfg.controller.tick_s, cfg.controller.window_s

    def fleet(f: dict[str, int]) -> str:
        return "+".join(f"{n}{name}" for name, n in f.items() if n)

    jobs: list[tuple[str, object, argparse.Namespace]] = [
        (f"static {fleet(peak)} (peak)", "static", args),
        (f"static {fleet(minus1)}", StaticController({svc.name: minus1}, tick, window), args),
        (f"static {fleet(minus2)}", StaticController({svc.name: minus2}, tick, window), args),
    ]
    for t in args.switch_s:
        schedule = [(0.0, {svc.name: minus1}), (t, {svc.name: peak})]
        jobs.append((f"schedule {fleet(minus1)} then {fleet(peak)} at {t:g} s",
                     ScheduledController(schedule, tick, window), args))
    jobs.append(("pid", "pid", args))
    print(f"{args.trace.name} x{args.rate_scale:g}, seed {args.seed}")
    base: float | None = None
    with Pool(args.jobs) as pool:
        for label, slo, gpu_h in pool.imap(_run, jobs):
            base = gpu_h if base is None else base
            print(f"  {label:<52} SLO {slo:7.2%}  GPU-h {gpu_h:6.2f}  ({gpu_h / base - 1:+.1%} vs peak)", flush=True)


if __name__ == "__main__":
    main()
