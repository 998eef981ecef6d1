"""Benchmark: ``autoscaler compare`` on the shipped scenarios (``benchmarks/scenarios/*.yaml``).

Each scenario names a trace relative to ``--data`` (with its rate scale, and for a ServeGen folder
its ``span`` and the trace its lengths come from, ``lengths_from``) or a synthetic workload built in
``benchmarks/scenarios/synthetic.py`` (with its parameters), a seed and the controllers to run, on
``examples/fleet.yaml`` with the scenario's ``fleet`` patch, if any (mappings merge key by key, the
``services`` and ``variants`` lists entry by entry on ``name``), ranking the rows that reach its
``floor`` of interactive SLO attainment (default 0.99). For each scenario this prints a
Markdown table (``autoscaler.compare``) and writes ``<out>/<scenario>/compare.json``, ``compare.png``
and the fleet it ran on, ``fleet.yaml``. Trace scenarios are the same as

    autoscaler compare --config <out>/<scenario>/fleet.yaml --trace ../shared/data/<trace> --rate-scale R \
        --seed S [--span START:END --lengths-from ../shared/data/<trace>]

    python benchmarks/compare.py [SCENARIO ...] [--data ../shared/data] [--out runs/compare] [--workers N] [--seed S]
        [--controller a,b]

``--controller`` (comma-separated, as ``autoscaler compare``'s) runs those instead of each scenario's;
the old ``--controllers`` still works with the CLI's deprecation warning.
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
import time
from pathlib import Path
from typing import Any

import yaml
from rich.console import Console

from autoscaler.cli.common import controller_list
from autoscaler.compare import check_names, failed, markdown_table, progress_rows, run_compare, write_comparison
from autoscaler.config.loading import merged, moved_keys, parse_config
from autoscaler.progress import Display
from autoscaler.workload.build import build_any, build_workload
from autoscaler.workload.stream import AnyWorkload, count
from autoscaler.workload.types import Workload

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the benchmarks' own modules
from provenance import stamp

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
SCENARIOS = HERE / "scenarios"


def _synthetic() -> dict[str, Any]:
    spec = importlib.util.spec_from_file_location("scenario_synthetic", SCENARIOS / "synthetic.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.SYNTHETIC


def scenario_workload(sc: dict[str, Any], data: Path) -> Workload:
    """The scenario's workload, whole: a trace under ``data`` shaped by its rate scale, or a synthetic one."""
    if "trace" in sc:
        return build_workload(*_trace_args(sc, data))
    return _synthetic()[sc["synthetic"]](**sc.get("params", {}), seed=int(sc["seed"]))


def scenario_stream(sc: dict[str, Any], data: Path) -> AnyWorkload:
    """``scenario_workload``'s workload, a trace streamed where it streams (``build_any``: each row of
    a comparison replays it, ``autoscaler.compare``)."""
    if "trace" in sc:
        return build_any(*_trace_args(sc, data))
    return scenario_workload(sc, data)


def _trace_args(sc: dict[str, Any], data: Path) -> tuple[Any, ...]:
    """``build_workload``'s arguments for a trace scenario."""
    span = tuple(float(x) for x in sc["span"]) if "span" in sc else None
    lengths = data / sc["lengths_from"] if "lengths_from" in sc else None
    return data / sc["trace"], None, float(sc.get("rate_scale", 1.0)), 1.0, int(sc["seed"]), 0.2, span, lengths


def scenario_fleet(sc: dict[str, Any]) -> dict[str, Any]:
    """The example fleet document with the scenario's ``fleet`` patch laid over it."""
    patch = moved_keys(sc.get("fleet", {}), f"scenario {sc.get('name')}: fleet")
    return merged(yaml.safe_load((ROOT / "examples" / "fleet.yaml").read_text()), patch)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line; ``controllers`` is the ``--controller`` list (None: each scenario's own).

    Exits 2 (argparse) on both spellings of the option, an empty entry or an unknown controller, before
    any scenario runs.
    """
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0].replace("\n", " "))
    ap.add_argument("scenarios", nargs="*", help="scenario names (default: all in benchmarks/scenarios)")
    ap.add_argument("--data", type=Path, default=ROOT.parent / "shared" / "data",
                    help="folder holding the traces the scenarios name")
    ap.add_argument("--out", type=Path, default=ROOT / "runs" / "compare",
                    help="folder for each scenario's results (default: runs/compare)")
    ap.add_argument("--workers", type=int, default=None, help="processes (default: min(controllers, CPUs))")
    ap.add_argument("--controller", default=None,
                    help="comma-separated controller specs (as autoscaler compare's): run these instead of the "
                         "scenario's")
    ap.add_argument("--controllers", default=None, help=argparse.SUPPRESS)  # the old spelling, deprecated
    ap.add_argument("--seed", type=int, default=None, help="workload seed instead of the scenario's")
    args = ap.parse_args(argv)
    try:
        given = controller_list(args.controller, args.controllers, "")
        args.controllers = given.split(",") if given else None
        if args.controllers is not None:
            if "" in args.controllers:
                raise ValueError(f"'{given}': an empty entry (two commas, or one at an end)")
            check_names(args.controllers)
    except ValueError as exc:
        ap.error(f"--controller: {exc}")
    return args


def main() -> None:
    args = parse_args()
    names = args.scenarios or sorted(p.stem for p in SCENARIOS.glob("*.yaml"))
    failures: list[str] = []
    for name in names:
        sc = yaml.safe_load((SCENARIOS / f"{name}.yaml").read_text())
        if args.seed is not None:
            sc["seed"] = args.seed
        fleet = scenario_fleet(sc)
        cfg = parse_config(fleet, f"{name} fleet")
        (args.out / name).mkdir(parents=True, exist_ok=True)
        (args.out / name / "fleet.yaml").write_text(yaml.safe_dump(fleet, sort_keys=False))
        t = time.perf_counter()
        wl = scenario_stream(sc, args.data)
        controllers = args.controllers or sc["controllers"]
        total = len(controllers)
        finished: list[str] = []

        def done(row: dict[str, Any], total: int = total, finished: list[str] = finished, name: str = name) -> None:
            finished.append(row["controller"])
            print(f"{name}: {len(finished)}/{total} done ({row['controller']}, {row['wall_s']:.0f} s)",
                  file=sys.stderr, flush=True)

        shown = progress_rows(controllers, wl)  # on stderr: a bar per running row, or a line every 15 s piped
        with Display(shown, name, Console(stderr=True)):
            comp = run_compare(cfg, wl, controllers, workers=args.workers, done=done,
                               floor=float(sc.get("floor", 0.99)), progress=shown)
        write_comparison(comp, cfg, None, args.out / name)
        scale = f", rate x{sc['rate_scale']:g}" if "rate_scale" in sc else ""
        source = sc.get('trace', 'synthetic ' + sc.get('synthetic', ''))
        print(f"\n### {name}: {count(wl)} requests ({source}{scale}, seed {sc['seed']}; "
              f"{time.perf_counter() - t:.0f} s; {stamp()})\n")
        print(markdown_table(comp.rows), flush=True)
        failures += [f"{name}/{r['controller']}" for r in failed(comp.rows)]
    if failures:  # every table is printed and written; the exit status says some row is missing
        sys.exit(f"failed rows: {', '.join(failures)}")


if __name__ == "__main__":
    main()
