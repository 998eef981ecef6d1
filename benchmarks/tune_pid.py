"""Grid search of the PID gains on the simulator (how the defaults in ``controllers/pid.py`` were chosen).

For every (setpoint, kp, ki) it runs the PID on the Azure conv trace (rate-scale 20) and the
Mooncake conversation trace (rate-scale 4) with ``examples/fleet.yaml`` and prints SLO attainment
and GPU-hours next to static peak provisioning. Takes ~10 minutes on 2 cores.

    python benchmarks/tune_pid.py [--data ../shared/data] [--setpoint 0.45 0.5] [--kp 0.2 0.3] [--ki 0.005]
"""

from __future__ import annotations

import argparse
import itertools
from pathlib import Path

from autoscaler.cli import build_workload
from autoscaler.config import load_config
from autoscaler.report import summarize
from autoscaler.simulate import run_simulation

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, default=ROOT.parent / "shared" / "data")
    ap.add_argument("--setpoint", type=float, nargs="+", default=[0.45, 0.5, 0.55, 0.6])
    ap.add_argument("--kp", type=float, nargs="+", default=[0.2, 0.3, 0.5])
    ap.add_argument("--ki", type=float, nargs="+", default=[0.005, 0.01, 0.02])
    args = ap.parse_args()
    traces = {
        "azure-conv x20": (args.data / "azure-llm-2023" / "AzureLLMInferenceTrace_conv.csv", 20.0),
        "mooncake x4": (args.data / "mooncake" / "conversation_trace.jsonl", 4.0),
    }
    workloads = {name: build_workload(path, None, scale, 1.0, 0, 0.2) for name, (path, scale) in traces.items()}
    base = load_config(ROOT / "examples" / "fleet.yaml")
    for name, wl in workloads.items():
        r = summarize(run_simulation(base, wl, "static"))
        print(f"static        {name}: slo={r['slo_attainment']['all']:.4f} gpu_h={r['gpu_hours']['total']:.2f}")
    for sp, kp, ki in itertools.product(args.setpoint, args.kp, args.ki):
        cells = []
        for name, wl in workloads.items():
            cfg = base.model_copy(deep=True)
            cfg.controller.pid.setpoint, cfg.controller.pid.kp, cfg.controller.pid.ki = sp, kp, ki
            r = summarize(run_simulation(cfg, wl, "pid"))
            cells.append(f"{name}: slo={r['slo_attainment']['all']:.4f} gpu_h={r['gpu_hours']['total']:.2f}")
        print(f"sp={sp} kp={kp} ki={ki}  " + " | ".join(cells), flush=True)


if __name__ == "__main__":
    main()
