"""Benchmark helper: a copy of this checkout with the simulator's event core compiled by mypyc, to time it.

An experiment, not a way the project runs (issue 33: the simulator's speed goal): copies the
checkout's tracked files (uncommitted changes included) to ``--out``, marks ``Replica`` as a class that
interpreted classes may subclass (``disagg``'s replicas, ``vllm_bench``'s and the tests' subclass it),
and compiles there with mypyc (mypy's compiler, a development dependency; it needs a C compiler)
``CORE`` (the event core: ``autoscaler/simulator/engine.py`` and ``fleet.py``; ``--core-only``: just
these, the first build's set) and ``MORE`` (the simulator's metrics, prefix cache and router, the
tick's metrics source, signal types and estimate step), and with ``--tick`` the rest of the tick's
modules that compile unchanged (``TICK``). The compiled modules are C extensions beside the
sources, which Python imports in their place, so ``PYTHONPATH=OUT python benchmarks/sim_throughput.py``
times them (its rows say ``"compiled": true``). The float arithmetic is the same C double operations
in the same order, so the outputs should be the same bits: compare them, as docs/benchmarks.md did.
Tests that observe or stand in for the compiled classes fail there (docs/benchmarks.md, session F,
lists them): a compiled class cannot be patched at run time (monkeypatches of ``Replica``,
``FleetSimulator`` or ``SimMetricsSource``), and compiled code checks its arguments' types (stubs
such as a ``SimpleNamespace`` replica or a stub simulator are refused); with ``--tick`` the
compiled loop also leaves ``TickError.__cause__`` None where ``raise TickError(...) from exc`` sets
it interpreted.

With ``--check`` it then runs ``benchmarks/sim_digest.py`` (the sha256 of a run's outcomes, replica
metrics and tick records) in this checkout and in the build, at x1 and at x100 over ``0:120`` (the
``sim_throughput.py`` cases), prints both and exits 1 when they differ.

    python benchmarks/compiled_core.py --out /tmp/autoscaler-compiled [--core-only | --tick] [--check]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the benchmarks' own modules
from provenance import stamp

ROOT = Path(__file__).resolve().parents[1]
CORE = ("autoscaler/simulator/engine.py", "autoscaler/simulator/fleet.py")
# What the compiled core leaves interpreted, ranked by cProfile of the interpreted x1 and x100 runs
# (docs/benchmarks.md): the simulator's metrics, prefix cache and router, the tick's observation
# (the metrics source and the signals' types), and its estimate step.
MORE = ("autoscaler/simulator/metrics.py", "autoscaler/simulator/prefix_cache.py", "autoscaler/simulator/router.py",
        "autoscaler/adapters/simulator.py", "autoscaler/state.py", "autoscaler/loop/estimate.py")
# With --tick: the control loop's own modules and the PID controller's helpers (controllers/pid.py itself
# is left out, not tried: its class subclasses the interpreted ``Controller``).
TICK = ("autoscaler/loop/runner.py", "autoscaler/loop/guard.py", "autoscaler/loop/mix.py",
        "autoscaler/loop/fanout.py", "autoscaler/loop/drain.py", "controllers/pid_rules.py", "controllers/split.py")
CLASS_LINE = "class Replica:\n"
# --check: sim_digest.py's cases (sim_throughput.py's x1 and x100 runs)
CHECKS = (("--rate-scale", "1"), ("--rate-scale", "100", "--span", "0:120"))
MARKED = ("from mypy_extensions import mypyc_attr\n\n\n"
          "@mypyc_attr(allow_interpreted_subclasses=True)\nclass Replica:\n")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0].replace("\n", " "))
    ap.add_argument("--out", type=Path, required=True, help="folder for the compiled copy (made; must not exist)")
    ap.add_argument("--core-only", action="store_true",
                    help=f"compile only {' and '.join(Path(m).name for m in CORE)} (the first build's set)")
    ap.add_argument("--tick", action="store_true", help="also compile the control loop's tick modules (TICK)")
    ap.add_argument("--check", action="store_true",
                    help="then compare sim_digest.py's digests, this checkout against the build (x1, x100 0:120)")
    ap.add_argument("--data", type=Path, default=ROOT.parent / "shared" / "data",
                    help="with --check: folder holding azure-llm-2023/AzureLLMInferenceTrace_conv.csv")
    args = ap.parse_args()
    if args.core_only and args.tick:
        ap.error("--core-only and --tick: give one")
    out: Path = args.out
    modules = CORE if args.core_only else CORE + MORE + (TICK if args.tick else ())
    if out.exists():
        sys.exit(f"compiled_core.py: --out {out} exists: give a new folder")
    files = subprocess.run(["git", "-C", str(ROOT), "ls-files", "-z"], capture_output=True, check=True).stdout
    for name in files.decode().split("\0"):
        src = ROOT / name
        if name and src.is_file():
            (out / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, out / name)
    engine = out / CORE[0]
    text = engine.read_text()
    if text.count(CLASS_LINE) != 1:
        sys.exit(f"compiled_core.py: {engine}: expected one line {CLASS_LINE.strip()!r} to mark")
    engine.write_text(text.replace(CLASS_LINE, MARKED))
    subprocess.run([sys.executable, "-m", "mypyc", *modules], cwd=out, check=True)
    print(f"{Path(__file__).name}: {stamp()}: compiled {', '.join(modules)} in {out}: run with PYTHONPATH={out}",
          flush=True)
    if args.check and not check(out, args.data.resolve()):
        sys.exit(1)


def digest(tree: Path, data: Path, case: tuple[str, ...]) -> dict[str, object]:
    """``sim_digest.py``'s JSON object for ``case`` run with ``tree`` first on the path (its own copy)."""
    env = {**os.environ, "PYTHONPATH": str(tree)}
    cmd = [sys.executable, str(tree / "benchmarks" / "sim_digest.py"), "--data", str(data), *case]
    got: dict[str, object] = json.loads(subprocess.run(cmd, cwd=tree, env=env, capture_output=True, text=True,
                                                       check=True).stdout)
    return got


def check(out: Path, data: Path) -> bool:
    """Whether the build in ``out`` gives this checkout's digests on every case of ``CHECKS`` (printed)."""
    same = True
    for case in CHECKS:
        pure, built = digest(ROOT, data, case), digest(out, data, case)
        ok = pure["all"] == built["all"] and pure["compiled"] is False and built["compiled"] is True
        same = same and ok
        print(f"{' '.join(case)}: checkout {pure['all']} (compiled: {pure['compiled']}), "
              f"build {built['all']} (compiled: {built['compiled']}): {'same' if ok else 'DIFFERENT'}", flush=True)
    return same


if __name__ == "__main__":
    main()
