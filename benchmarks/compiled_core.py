"""Benchmark helper: a copy of this checkout with the simulator's event core compiled by mypyc, to time it.

An experiment, not a way the project runs (issue 33: the simulator's speed goal): copies the
checkout's tracked files (uncommitted changes included) to ``--out``, marks ``Replica`` as a class that
interpreted classes may subclass (``disagg``'s replicas, ``vllm_bench``'s and the tests' subclass it),
and compiles ``autoscaler/simulator/engine.py`` and ``fleet.py`` there with mypyc (mypy's compiler, a
development dependency; it needs a C compiler). The compiled modules are C extensions beside the
sources, which Python imports in their place, so ``PYTHONPATH=OUT python benchmarks/sim_throughput.py``
times them (its rows say ``"compiled": true``). The float arithmetic is the same C double operations
in the same order, so the outputs should be the same bits: compare them, as docs/benchmarks.md did.
A compiled class cannot be patched at run time, so tests that monkeypatch ``Replica`` fail there.

    python benchmarks/compiled_core.py --out /tmp/autoscaler-compiled
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the benchmarks' own modules
from provenance import stamp

ROOT = Path(__file__).resolve().parents[1]
MODULES = ("autoscaler/simulator/engine.py", "autoscaler/simulator/fleet.py")
CLASS_LINE = "class Replica:\n"
MARKED = ("from mypy_extensions import mypyc_attr\n\n\n"
          "@mypyc_attr(allow_interpreted_subclasses=True)\nclass Replica:\n")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0].replace("\n", " "))
    ap.add_argument("--out", type=Path, required=True, help="folder for the compiled copy (made; must not exist)")
    args = ap.parse_args()
    out: Path = args.out
    if out.exists():
        sys.exit(f"compiled_core.py: --out {out} exists: give a new folder")
    files = subprocess.run(["git", "-C", str(ROOT), "ls-files", "-z"], capture_output=True, check=True).stdout
    for name in files.decode().split("\0"):
        src = ROOT / name
        if name and src.is_file():
            (out / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, out / name)
    engine = out / MODULES[0]
    text = engine.read_text()
    if text.count(CLASS_LINE) != 1:
        sys.exit(f"compiled_core.py: {engine}: expected one line {CLASS_LINE.strip()!r} to mark")
    engine.write_text(text.replace(CLASS_LINE, MARKED))
    subprocess.run([sys.executable, "-m", "mypyc", *MODULES], cwd=out, check=True)
    print(f"{Path(__file__).name}: {stamp()}: compiled {', '.join(MODULES)} in {out}: run with PYTHONPATH={out}")


if __name__ == "__main__":
    main()
