"""Grid search of the PID gains on the simulator (how the defaults in ``controllers/pid.py`` were chosen).

For every (setpoint, deadband, window, kp, ki, error_clip) it runs the PID with ``examples/fleet.yaml`` on the Azure
conv trace (rate-scale 20), the Mooncake conversation trace (rate-scale 6) and the embedded
synthetic day (the README's main job), with the CLI's class assignment (20% batch, seed 0), and
prints SLO attainment and GPU-hours next to static peak provisioning. Runs on ``--jobs`` processes
(~6 s per run and trace on this 2-core machine).

    python benchmarks/tune_pid.py [--data ../shared/data] [--signal slo_mean_ratio] [--setpoint 0.3]
        [--deadband 0.25] [--window-s 300] [--kp 0.2] [--ki 0.005] [--error-clip 3] [--jobs 2]

Defaults are the shipped settings, so with no grid arguments it prints them against static.
"""

from __future__ import annotations

import argparse
import itertools
import sys
from multiprocessing import Pool
from pathlib import Path

from autoscaler.config import FleetConfig
from autoscaler.config.loading import load_config
from autoscaler.report import summarize
from autoscaler.simulate import run_simulation
from autoscaler.workload.build import DEFAULT_BATCH_FRACTION, build_workload
from autoscaler.workload.types import Workload

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the benchmarks' own modules
from provenance import stamp

ROOT = Path(__file__).resolve().parents[1]

_workloads: dict[str, Workload] = {}


def _traces(data: Path) -> dict[str, tuple[Path | None, float]]:
    return {
        "azure-conv x20": (data / "azure-llm-2023" / "AzureLLMInferenceTrace_conv.csv", 20.0),
        "mooncake x6": (data / "mooncake" / "conversation_trace.jsonl", 6.0),
        "embedded default": (None, 1.0),
    }


Job = tuple[str, Path | None, float, str, dict[str, float | str]]


def _run(job: Job) -> tuple[str, str, dict[str, float | str], float, float]:
    """One simulation: (trace, path, rate-scale, controller, overrides) -> (trace, controller, overrides,
    SLO attainment, GPU-hours). ``window_s`` is a controller setting, the other overrides PID ones."""
    name, path, scale, controller, pid = job
    if name not in _workloads:
        _workloads[name] = build_workload(path, None, scale, 1.0, 0, DEFAULT_BATCH_FRACTION)
    cfg: FleetConfig = load_config(ROOT / "examples" / "fleet.yaml").model_copy(deep=True)
    for key, value in pid.items():
        setattr(cfg.controller if key == "window_s" else cfg.controller.pid, key, value)
    r = summarize(run_simulation(cfg, _workloads[name], controller))
    return name, controller, pid, r["slo_attainment"]["all"], r["gpu_hours"]["total"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0].replace("\n", " "))
    ap.add_argument("--data", type=Path, default=ROOT.parent / "shared" / "data",
                    help="folder holding the Azure and Mooncake traces")
    ap.add_argument("--signal", nargs="+", default=["slo_mean_ratio"], help="grid of controller.pid.setpoint_signal")
    ap.add_argument("--setpoint", type=float, nargs="+", default=[0.3], help="grid of controller.pid.setpoint")
    ap.add_argument("--deadband", type=float, nargs="+", default=[0.25], help="grid of controller.pid.deadband")
    ap.add_argument("--window-s", type=float, nargs="+", default=[300.0], help="grid of controller.window_s, s")
    ap.add_argument("--kp", type=float, nargs="+", default=[0.2], help="grid of controller.pid.kp")
    ap.add_argument("--ki", type=float, nargs="+", default=[0.005], help="grid of controller.pid.ki, 1/s")
    ap.add_argument("--error-clip", type=float, nargs="+", default=[3.0], help="grid of controller.pid.error_clip")
    ap.add_argument("--jobs", type=int, default=2, help="processes")
    args = ap.parse_args()
    print(f"{Path(__file__).name}: {stamp()}", flush=True)
    traces = _traces(args.data)
    jobs: list[tuple[str, Path | None, float, str, dict[str, float | str]]] = [
        (name, path, scale, "static", {}) for name, (path, scale) in traces.items()]
    grid = itertools.product(args.signal, args.setpoint, args.deadband, args.window_s, args.kp, args.ki,
                             args.error_clip)
    for signal, sp, db, win, kp, ki, clip in grid:
        pid: dict[str, float | str] = {"setpoint_signal": signal, "setpoint": sp, "deadband": db, "window_s": win,
                                       "kp": kp, "ki": ki, "error_clip": clip}
        jobs += [(name, path, scale, "pid", pid) for name, (path, scale) in traces.items()]
    results: dict[tuple[str, ...], dict[str, tuple[float, float]]] = {}
    with Pool(args.jobs) as pool:
        for name, controller, pid, slo, gpu_h in pool.imap(_run, jobs):
            key = (controller, *(f"{k}={v:g}" if isinstance(v, float) else f"{k}={v}" for k, v in pid.items()))
            results.setdefault(key, {})[name] = (slo, gpu_h)
            if len(results[key]) == len(traces):
                cells = " | ".join(f"{n}: slo={s:.4f} gpu_h={g:.2f}" for n, (s, g) in results[key].items())
                print(f"{' '.join(key):<100} {cells}", flush=True)


if __name__ == "__main__":
    main()
