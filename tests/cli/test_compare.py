"""``autoscaler compare`` (autoscaler.compare and the CLI command)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from autoscaler.cli import app
from autoscaler.compare import add_ratios, check_controllers, direction_changes, markdown_table, run_compare
from autoscaler.config.loading import load_config
from autoscaler.workload.types import Request, Workload
from controllers.base import FleetMismatchError
from controllers.registry import build

WALL = ("wall_s", "simulated_requests_per_s")


def test_direction_changes_skip_holds() -> None:
    # up, (hold), up, down, (hold), down, up -> changes at up->down and down->up
    assert direction_changes([2, 0, 1, -1, 0, -3, 4]) == 2
    assert direction_changes([0, 0, 5]) == 0
    assert direction_changes([1, -1, 1, -1]) == 3


def _row(name: str, cost: float | None, interactive: float | None) -> dict:
    return {"controller": name, "cost_per_successful_request_usd": cost, "slo_attainment": {"interactive": interactive}}


def test_ratio_ranks_only_rows_that_reach_the_attainment_floor() -> None:
    # "cheap" misses the SLO (85 %): it is not the best, it is failing; "a" is the cheapest that meets 99 %.
    rows = [_row("a", 2.0, 0.995), _row("b", 4.0, 0.999), _row("c", None, 0.999), _row("cheap", 1.0, 0.85)]
    add_ratios(rows)
    assert [r["ratio_to_best_cost_per_successful_request"] for r in rows] == [1.0, 2.0, None, None]
    assert [r["meets_attainment_floor"] for r in rows] == [True, True, True, False]
    add_ratios(rows, floor=0.8)  # a lower floor ranks it
    assert [r["ratio_to_best_cost_per_successful_request"] for r in rows] == [2.0, 4.0, None, 1.0]
    rows.append(_row("oracle", 1.6, 0.999))
    add_ratios(rows)
    assert [r["ratio_to_best_cost_per_successful_request"] for r in rows] == [1.25, 2.5, None, None, 1.0]


def burst_workload() -> Workload:
    # 4 req/s for 5 min, 40 req/s for 5 min (above one replica's ~26 req/s at the ITL SLO), 4 req/s for 10 min
    t, reqs = 0.0, []
    for rate, until in ((4.0, 300.0), (40.0, 600.0), (4.0, 1200.0)):
        while t < until:
            reqs.append(Request(arrival_s=t, input_tokens=800, output_tokens=120))
            t += 1 / rate
    return Workload(reqs, source="burst")


@pytest.mark.slow
def test_parallel_equals_serial(make_fleet) -> None:
    cfg = make_fleet(replicas=1, min_replicas=1, max_replicas=6)
    wl = burst_workload()
    names = ["hpa", "kpa", "wva", "pid"]
    serial = run_compare(cfg, wl, names, workers=1)
    parallel = run_compare(cfg, wl, names, workers=2)

    def strip(rows):
        return [{k: v for k, v in r.items() if k not in WALL} for r in rows]

    assert [r["controller"] for r in parallel.rows] == names
    assert strip(serial.rows) == strip(parallel.rows)
    assert serial.timelines == parallel.timelines
    # the burst makes every adaptive controller scale up and back down at least once
    for r in serial.rows:
        assert r["scale_events"] >= 2, r["controller"]
    table = markdown_table(serial.rows)
    assert sum(line.startswith("| ") for line in table.splitlines()) == len(names) + 1  # header + rows
    assert "ratio: cost per successful request over the cheapest ranked row" in table


def test_unknown_controller_is_a_one_line_error(make_fleet) -> None:
    with pytest.raises(ValueError, match="unknown controller 'nope'; choose one of: pid, static, hpa"):
        run_compare(make_fleet(), burst_workload(), ["pid", "nope"])
    res = CliRunner().invoke(app, ["compare", "--controller", "hpa,nope"])
    assert res.exit_code == 2
    assert "error: unknown controller 'nope'" in res.output
    assert "Traceback" not in res.output


@pytest.mark.slow
def test_cli_compare_on_a_real_trace(data_dir, tmp_path) -> None:
    trace = data_dir / "azure-llm-2023" / "AzureLLMInferenceTrace_conv.csv"
    res = CliRunner().invoke(app, ["compare", "--trace", str(trace), "--rate-scale", "0.1", "--controller",
                                   "hpa,dynamo:itl=0.1:ttft=2,pid", "--seed", "3", "--out", str(tmp_path)])
    assert res.exit_code == 0, res.output
    rows = json.loads((tmp_path / "compare.json").read_text())
    assert [r["controller"] for r in rows] == ["hpa", "dynamo:itl=0.1:ttft=2", "pid"]
    results_keys = {"requests", "slo_attainment", "slo_attainment_detail", "ttft_s", "itl_s", "gpu_hours", "cost_usd",
                    "cost_per_successful_request_usd", "cost_per_successful_task_usd", "tasks", "scale_events",
                    "wall_s"}
    for r in rows:
        assert results_keys <= set(r)
        assert r["requests"]["total"] == rows[0]["requests"]["total"]  # same workload for all
        assert r["oscillations_per_hour"] >= 0
    ranked = [r["cost_per_successful_request_usd"] for r in rows if r["slo_attainment"]["interactive"] >= 0.99]
    assert [r["ratio_to_best_cost_per_successful_request"] for r in rows] == pytest.approx(
        [r["cost_per_successful_request_usd"] / min(ranked) if r["slo_attainment"]["interactive"] >= 0.99 else None
         for r in rows])
    assert (tmp_path / "compare.png").stat().st_size > 10_000
    # Piped (not a terminal): the whole table, within 100 columns, every controller and number uncut.
    table = [ln for ln in res.stdout.splitlines() if ln.startswith(("┃", "│", "┏", "┡", "└"))]
    assert table and max(len(ln) for ln in table) <= 100
    assert sum("SLO all" in ln for ln in table) == 1 and not any("…" in ln for ln in table)
    for r in rows:
        assert any(ln.startswith("│ " + r["controller"].split(":")[0]) for ln in table), r["controller"]
        assert f"{r['gpu_hours']['total']:.2f}" in res.stdout
    assert "ratio: cost per successful request over" in res.stdout and "osc./h: changes of scaling" in res.stdout
    wide = CliRunner().invoke(app, ["compare", "--trace", str(trace), "--rate-scale", "0.1", "--controller",
                                    "hpa,pid", "--seed", "3", "--out", str(tmp_path / "w"), "--wide"])
    assert wide.exit_code == 0 and "p99 ITL s" in wide.stdout and "wall s" in wide.stdout


def _failing(monkeypatch: pytest.MonkeyPatch, spec: str) -> None:
    """Make ``spec``'s run raise as a solver at its time limit would; the other runs are untouched."""
    import autoscaler.compare as comp

    real = comp.run_simulation

    def run(cfg, workload, controller, *args, **kwargs):  # type: ignore[no-untyped-def]
        if controller == spec:
            raise RuntimeError("MILP time limit reached\nwithout an incumbent")
        return real(cfg, workload, controller, *args, **kwargs)

    monkeypatch.setattr(comp, "run_simulation", run)


@pytest.mark.parametrize("workers", [1, 2])
def test_a_failing_run_is_a_row_that_says_so(make_fleet, monkeypatch: pytest.MonkeyPatch, workers: int) -> None:
    """One controller raising loses nothing else: its row says why in one line with null figures and
    is not ranked; the other row equals the same run without the failure."""
    cfg = make_fleet(replicas=1, min_replicas=1, max_replicas=6)
    wl = burst_workload()
    alone = run_compare(cfg, wl, ["hpa"], workers=1).rows[0]
    _failing(monkeypatch, "kpa")
    comp = run_compare(cfg, wl, ["kpa", "hpa"], workers=workers)
    bad, good = comp.rows
    assert bad["controller"] == "kpa"
    assert bad["failed"] == "RuntimeError: MILP time limit reached without an incumbent"
    assert bad["slo_attainment"] == {"all": None, "interactive": None, "batch": None}
    assert bad["cost_per_successful_request_usd"] is None and bad["ratio_to_best_cost_per_successful_request"] is None
    assert not bad["meets_attainment_floor"] and comp.timelines["kpa"] == []
    assert {k: v for k, v in good.items() if k not in WALL} == {k: v for k, v in alone.items() if k not in WALL}
    table = markdown_table(comp.rows)
    assert "| kpa (failed) | - | - |" in table
    assert "kpa failed: RuntimeError: MILP time limit reached without an incumbent" in table


def test_a_killed_worker_fails_its_own_row_alone(make_fleet, monkeypatch: pytest.MonkeyPatch) -> None:
    """A worker killed from outside (``kill -9``, the out-of-memory killer) is its row's failure: the
    rows running beside it and those not yet started finish as they do alone (in one shared pool,
    every one of them failed with BrokenProcessPool)."""
    import os
    import signal

    import autoscaler.compare as comp_module

    cfg = make_fleet(replicas=1, min_replicas=1, max_replicas=6)
    wl = burst_workload()
    alone = {r["controller"]: r for r in run_compare(cfg, wl, ["hpa", "wva"], workers=1).rows}
    real = comp_module.run_simulation

    def run(cfg, workload, controller, *args, **kwargs):  # type: ignore[no-untyped-def]
        if controller == "kpa":  # in the forked worker
            os.kill(os.getpid(), signal.SIGKILL)
        return real(cfg, workload, controller, *args, **kwargs)

    monkeypatch.setattr(comp_module, "run_simulation", run)
    comp = run_compare(cfg, wl, ["kpa", "hpa", "wva"], workers=2)
    bad, *good = comp.rows
    assert bad["controller"] == "kpa" and bad["failed"].startswith("BrokenProcessPool: ")
    for row in good:
        strip = {k: v for k, v in row.items() if k not in WALL}
        assert strip == {k: v for k, v in alone[row["controller"]].items() if k not in WALL}


def test_cli_compare_writes_the_rows_and_exits_1_when_one_failed(make_fleet, monkeypatch: pytest.MonkeyPatch,
                                                                 tmp_path) -> None:
    _failing(monkeypatch, "kpa")
    out = tmp_path / "out"
    res = CliRunner().invoke(app, ["compare", "--controller", "kpa,hpa", "--span", "0:600", "--workers", "1",
                                   "--out", str(out)])
    assert res.exit_code == 1, res.output
    rows = json.loads((out / "compare.json").read_text())
    assert [r["controller"] for r in rows] == ["kpa", "hpa"] and "failed" in rows[0] and "failed" not in rows[1]
    assert (out / "compare.png").is_file()  # the row that ran is plotted
    assert "error: 1 of 2 rows failed: kpa" in res.output and "Traceback" not in res.output


@pytest.mark.parametrize("workers", [1, 2])
def test_every_row_reports_its_progress_and_ends_done(make_fleet, workers: int) -> None:
    from autoscaler.compare import progress_rows
    from autoscaler.progress import DONE

    wl = burst_workload()
    rows = progress_rows(["hpa", "kpa"], wl)
    assert rows.totals_s == [wl.requests[-1].arrival_s] * 2
    run_compare(make_fleet(replicas=1, min_replicas=1, max_replicas=6), wl, ["hpa", "kpa"], workers=workers,
                progress=rows)
    for i in range(2):  # written by the worker process too; the last write may be up to 0.5 s of wall time old
        assert rows.state(i) == DONE and 0 < rows.simulated_s(i) <= 1200 + 4 * 3600


def test_cli_compare_piped_prints_progress_lines_on_stderr_and_the_table_on_stdout(
        monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    import re

    import autoscaler.progress as progress

    monkeypatch.setattr(progress, "LINE_EVERY_S", 0.0)  # a line at every poll of a running row
    monkeypatch.setattr(progress, "POLL_S", 0.05)
    res = CliRunner().invoke(app, ["compare", "--controller", "kpa,hpa", "--span", "0:300", "--workers", "2",
                                   "--out", str(tmp_path)])
    assert res.exit_code == 0, res.output
    assert res.stderr.splitlines()[0].startswith("compare: 2 rows on "), res.stderr  # before any row's progress
    for name in ("kpa", "hpa"):
        assert re.search(rf"^compare: {name} \d+% \(\d+/\d+ s simulated\), \d+ s$", res.stderr, re.MULTILINE), \
            res.stderr
        assert re.search(rf"^done [12]/2: {name} \(\d+\.\d s\)$", res.stderr, re.MULTILINE), res.stderr
    assert not re.search(r"^compare: |s simulated\)", res.stdout, re.MULTILINE), res.stdout
    assert "│ kpa" in res.stdout and "│ hpa" in res.stdout


def _table_row(name: str, att: float | None, cost: float | None, task: float | None = None) -> dict:
    """A compare row as ``run_compare`` gives it (before ``add_ratios``), with hand-set figures."""
    return {"controller": name, "slo_attainment": {"all": att, "interactive": att, "batch": att},
            "ttft_s": {"p99": 0.5}, "itl_s": {"p99": 0.03}, "gpu_hours": {"total": 7.01},
            "cost_usd": {"total": 14.94}, "cost_per_successful_request_usd": cost,
            "cost_per_successful_task_usd": task, "scale_events": 6, "oscillations_per_hour": 0.5, "wall_s": 1.0}


def test_the_table_and_every_line_under_it_fit_100_columns(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    """At COLUMNS=100, with the longest legend (a bound row, a row below the floor, a failed row with a
    long error), no line of stdout is wider than 100 (the bound's ratio line was 114 and wrapped)."""
    import autoscaler.compare as comp_module
    from autoscaler.compare import Comparison, failed_row

    def fake(cfg, wl, names, *args, **kwargs):  # type: ignore[no-untyped-def]
        rows = [_table_row("oracle", 0.995, 4.2e-05), _table_row("bound", 0.991, 4.0e-05),
                _table_row("static", 0.5, 6.0e-05),
                failed_row("pid", RuntimeError("MILP time limit reached " + "without an incumbent " * 6), 2.0)]
        comp_module.add_ratios(rows)
        return Comparison(rows, {r["controller"]: [] for r in rows})

    monkeypatch.setattr(comp_module, "run_compare", fake)
    monkeypatch.setattr(comp_module, "check_controllers", lambda *a, **k: None)  # no bound built
    monkeypatch.setenv("COLUMNS", "100")
    monkeypatch.chdir(tmp_path)  # "wrote out/compare.json": a path as short on every machine
    res = CliRunner().invoke(app, ["compare", "--controller", "oracle,bound,static,pid", "--span", "0:60"])
    assert res.exit_code == 1, res.output  # the failed row
    lines = res.stdout.splitlines()
    assert lines[-7:] == [
        "ratio: cost per successful request over the bound (the cheapest oracle schedule reaching the floor",
        "  in simulation); only rows reaching 99.0% interactive SLO attainment are ranked.",
        "*: below the 99.0% floor, not ranked.",
        "osc./h: changes of scaling direction (up after down or down after up) per simulated hour.",
        "pid failed: RuntimeError: MILP time limit reached without an incumbent without an incumbent without",
        "  an incumbent without an incumbent without an incumbent without an incumbent",
        "wrote out/compare.json"]
    assert max(len(ln) for ln in lines) <= 100, [ln for ln in lines if len(ln) > 100]


def test_compare_writes_money_and_shares_as_simulate_does() -> None:
    """compare's table cells: $ and 7 places per request or task, $ and cents for a total, a share in
    percent with no space (simulate's ``$0.0000417``, ``$14.94``, ``99.50%``); JSON keeps numbers."""
    from autoscaler.compare import table_cells

    row = _table_row("pid", 0.995, 4.169e-05, 6.02e-05)
    add_ratios([row])
    cells = dict(zip(["controller", "SLO all", "SLO int.", "SLO batch", "p99 TTFT s", "GPU-h", "$/succ. req",
                      "ratio", "osc./h", "p99 ITL s", "$", "$/succ. task", "scale events", "wall s"],
                     table_cells([row], wide=True)[0], strict=True))
    assert cells["SLO all"] == cells["SLO int."] == "99.50%"
    assert cells["$/succ. req"] == "$0.0000417" and cells["$/succ. task"] == "$0.0000602"
    assert cells["$"] == "$14.94"
    assert row["cost_per_successful_request_usd"] == 4.169e-05  # the row (compare.json) is untouched


def test_one_row_is_one_row(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    """"compare: 1 row on ...", not "1 rows"; a failed one is "1 of 1 row failed"."""
    import autoscaler.compare as comp_module
    from autoscaler.compare import Comparison, failed_row

    def fake(cfg, wl, names, *args, **kwargs):  # type: ignore[no-untyped-def]
        rows = [failed_row("pid", RuntimeError("boom"), 1.0)]
        comp_module.add_ratios(rows)
        return Comparison(rows, {"pid": []})

    monkeypatch.setattr(comp_module, "run_compare", fake)
    res = CliRunner().invoke(app, ["compare", "--controller", "pid", "--span", "0:60", "--out", str(tmp_path)])
    assert res.exit_code == 1, res.output
    assert res.stderr.splitlines()[0].startswith("compare: 1 row on ") and " requests of " in res.stderr
    assert "error: 1 of 1 row failed: pid" in res.stderr


def test_a_controller_that_cannot_run_on_the_fleet_is_a_failed_row_not_a_refused_comparison(tmp_path) -> None:
    # examples/fleet-pd.yaml has pools only: hpa calibrates on aggregated variants and cannot run on it;
    # pid scales the pools. Before, building every controller up front refused the whole comparison.
    cfg = load_config(Path(__file__).resolve().parents[2] / "examples" / "fleet-pd.yaml")
    wl = Workload([Request(arrival_s=float(i), input_tokens=500, output_tokens=50) for i in range(20)], source="t")
    with pytest.raises(FleetMismatchError, match="no aggregated variant"):
        build("hpa", cfg, None, wl)
    check_controllers(["pid", "hpa"], cfg, wl, None)  # left to its run
    with pytest.raises(ValueError, match="target"):  # a bad parameter is still refused before any run
        check_controllers(["pid", "hpa:target=-1"], cfg, wl, None)
    rows = run_compare(cfg, wl, ["pid", "hpa"], workers=1).rows
    assert [r["controller"] for r in rows] == ["pid", "hpa"]
    assert rows[0].get("failed") is None
    assert rows[1]["failed"].startswith("FleetMismatchError: service llama-3.1-8b has no aggregated variant")
