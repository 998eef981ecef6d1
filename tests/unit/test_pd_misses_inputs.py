"""``benchmarks/pd_misses.py`` on bad input: one line naming the option, exit 2 (argparse's), never a
traceback. Each case raised out of ``main`` before (FileNotFoundError, ValueError, ConfigError,
FleetMismatchError)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest
from support.paths import ROOT

SPEC = importlib.util.spec_from_file_location("bench_pd_misses", ROOT / "benchmarks" / "pd_misses.py")
assert SPEC is not None and SPEC.loader is not None
bench = importlib.util.module_from_spec(SPEC)
sys.modules["bench_pd_misses"] = bench
SPEC.loader.exec_module(bench)


def trace(tmp_path: Path) -> Path:
    """Three requests, Azure's columns."""
    p = tmp_path / "t.csv"
    p.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.0,374,44\n"
                 "2023-11-16 18:15:50.0,396,109\n2023-11-16 18:15:55.0,100,10\n")
    return p


@pytest.mark.parametrize(("args", "message"), [
    (["--controller", "pid", "--config", "/nonexistent/fleet.yaml"], "/nonexistent/fleet.yaml"),
    (["--controller", "pid", "--span", "60:0"], "--span '60:0': expected START:END in seconds with 0 <= START < END"),
    (["--controller", "mpc:bogus=1"], "bad parameter 'bogus=1' for mpc"),
    (["--controller", "pid", "--rate-scale", "nan"], "--rate-scale"),
    (["--controller", "pid", "--trace", "/nonexistent/t.csv"], "/nonexistent/t.csv"),
    # built only once the run starts: refused there, the spec being well-formed
    (["--controller", "dynamo-pd", "--config", str(ROOT / "examples" / "fleet.yaml")],
     "--controller dynamo-pd: dynamo-pd scales prefill/decode pools: service llama-3.1-8b has none"),
])
def test_bad_input_is_one_line_and_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str],
                                          message: str) -> None:
    argv = ["--trace", str(trace(tmp_path)), "--span", "0:60", "--config",
            str(ROOT / "examples" / "fleet-mixed-pd.yaml"), *args]
    with pytest.raises(SystemExit) as exc:
        bench.main(argv)
    assert exc.value.code == 2
    err = capsys.readouterr().err
    last = err.strip().splitlines()[-1]
    assert ": error: " in last and message in last and "Traceback" not in err  # argparse's: "<prog>: error: ..."
