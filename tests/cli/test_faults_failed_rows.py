"""``faults run``: a row whose run raises, or whose worker is killed, is a failed row; the others count."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from autoscaler.cli import app

SHORT_SCENARIO = """name: short
reported: [x/y#1]
failure: f
harmful: h
workload: {piecewise: {knots: [[0, 5], [300, 5]]}}
harm: [{rule: overshoot}]
"""


def _breaking(monkeypatch: pytest.MonkeyPatch) -> None:
    """``static`` raises an error no row handles itself; ``hpa``'s worker is killed (``kill -9``)."""
    import autoscaler.faults.suite as suite

    real = suite.run_sim_row

    def run(sc, name, *args, **kwargs):  # type: ignore[no-untyped-def]
        if name == "static":
            raise KeyError("a row's own bug")
        if name == "hpa":  # only ever in a forked worker (workers=2)
            os.kill(os.getpid(), signal.SIGKILL)
        return real(sc, name, *args, **kwargs)

    monkeypatch.setattr(suite, "run_sim_row", run)


@pytest.mark.parametrize("workers", [1, 2])
def test_failed_rows_say_why_and_the_others_are_written(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                         workers: int) -> None:
    (tmp_path / "suite").mkdir()
    (tmp_path / "suite" / "short.yaml").write_text(SHORT_SCENARIO)
    names = "static,pid,hpa" if workers == 2 else "static,pid"
    args = ["faults", "run", "--suite", str(tmp_path / "suite"), "--workers", str(workers), "--data", str(tmp_path)]
    clean = CliRunner().invoke(app, [*args, "--out", str(tmp_path / "clean"), "--controller", "pid"])
    assert clean.exit_code == 0, clean.output
    (pid_alone,) = json.loads((tmp_path / "clean" / "faults.json").read_text())
    _breaking(monkeypatch)
    res = CliRunner().invoke(app, [*args, "--out", str(tmp_path / "out"), "--controller", names])
    assert res.exit_code == 1, res.output
    rows = {r["controller"]: r for r in json.loads((tmp_path / "out" / "faults.json").read_text())}
    assert rows["static"]["failed"] == "KeyError: \"a row's own bug\""
    assert rows["static"]["harmful_actions"] is None and rows["static"]["cost_usd"] is None
    if workers == 2:
        assert rows["hpa"]["failed"].startswith("BrokenProcessPool: ")
    assert {k: v for k, v in rows["pid"].items() if k != "wall_s"} == \
        {k: v for k, v in pid_alone.items() if k != "wall_s"}
    table = (tmp_path / "out" / "faults.md").read_text()
    assert "| short | static | failed: KeyError: \"a row's own bug\" | - | - | - | - |" in table
    assert "rows failed: short x static" in res.output


def test_the_faults_table_writes_money_and_shares_as_simulate_does() -> None:
    """``faults.md`` and the table printed: ``96.78%`` (no space) and ``$42.74`` (was ``96.78 %`` and
    ``42.74``), as simulate and compare write them; a failed row's figures stay ``-``."""
    from autoscaler.faults.rows import markdown_table

    row = {"scenario": "cascade", "controller": "pid", "harm": {"overshoot": 0}, "harmful_actions": 0,
           "slo_attainment_interactive": 0.9678, "requests_failed": 3, "retries": 1331, "cost_usd": 42.74}
    table = markdown_table([row])
    assert table.splitlines()[0].endswith("| retries | cost |")
    assert "| cascade | pid | 0 | 96.78% | 3 | 1331 | $42.74 |" in table


PD_SCENARIO = """name: pd
reported: [x/y#1]
failure: f
harmful: h
base_fleet: examples/fleet-pd.yaml
workload: {piecewise: {knots: [[0, 2], [120, 2]], input_tokens: [500, 600, 2000], output_tokens: [20, 30, 100]}}
faults: [{kind: crash, time_s: 60, fraction: 0.5, role: decode}]
harm: [{rule: down_while_pool_lost}]
"""


def _run_pd(tmp_path: Path, controllers: str) -> dict[str, dict[str, Any]]:
    """``faults run`` of PD_SCENARIO alone under ``controllers`` (exit 0 asserted): its rows by controller."""
    (tmp_path / "suite").mkdir()
    (tmp_path / "suite" / "pd.yaml").write_text(PD_SCENARIO)
    res = CliRunner().invoke(app, ["faults", "run", "--suite", str(tmp_path / "suite"), "--workers", "1",
                                   "--data", str(tmp_path), "--out", str(tmp_path / "out"),
                                   "--controller", controllers])
    assert res.exit_code == 0, res.output
    return {r["controller"]: r for r in json.loads((tmp_path / "out" / "faults.json").read_text())}


def test_a_controller_that_cannot_run_the_pools_is_a_not_applicable_row_not_a_failure(tmp_path: Path) -> None:
    # examples/fleet-pd.yaml has prefill/decode pools only: the HPA calibrates on aggregated variants
    rows = _run_pd(tmp_path, "hpa,dynamo-pd")
    assert rows["hpa"]["not_applicable"].startswith("service llama-3.1-8b has no aggregated variant")
    assert rows["hpa"]["harmful_actions"] is None and "failed" not in rows["hpa"]
    assert "failed" not in rows["dynamo-pd"] and rows["dynamo-pd"]["harm"].keys() == {"down_while_pool_lost"}
    table = (tmp_path / "out" / "faults.md").read_text()
    # the cell is short and the reason one footnote under the table; faults.json keeps it in the row
    assert "| pd | hpa | n/a [1] | - | - | - | - |" in table.splitlines()
    assert table.count("has no aggregated variant") == 1
    assert "- n/a [1]: service llama-3.1-8b has no aggregated variant" in table


def test_an_admission_policy_on_a_fleet_of_pools_is_a_not_applicable_row_not_a_failure(tmp_path: Path) -> None:
    # the simulator has no gateway flow control with prefill/decode pools (FleetSimulator refuses it): a
    # pid@pid row there cannot run, which is not a failure of the controller; pid without one runs
    rows = _run_pd(tmp_path, "pid@pid,pid")
    assert rows["pid@pid"]["not_applicable"] == ("pid@pid: admission policy pid with prefill/decode pools (the "
                                                 "gateway's flow control there is not simulated yet)")
    assert "failed" not in rows["pid@pid"] and rows["pid@pid"]["harmful_actions"] is None
    assert "failed" not in rows["pid"] and "not_applicable" not in rows["pid"]
