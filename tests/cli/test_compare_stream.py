"""``autoscaler compare`` streams each row's run by default (issue 33): the same rows as ``--whole``.

On a small Mooncake span copied x2 (``--rate-scale 2``: a copied stream, hash ids moved per copy):
``compare.json`` less the wall-clock figures, and each row's plot columns, are the same streamed and
whole; a row whose controller reads the whole workload (``oracle``) gets it whole, the others the
stream; a row that cannot run is still a failed row that says so.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
from support.paths import ROOT
from typer.testing import CliRunner

from autoscaler.cli import app
from autoscaler.compare import run_compare
from autoscaler.config.loading import load_config
from autoscaler.workload.build import build_any, build_workload
from autoscaler.workload.stream import WorkloadStream

MOONCAKE = ROOT.parent / "shared" / "data" / "mooncake" / "conversation_trace.jsonl"
ARGS = ["--trace", str(MOONCAKE), "--span", "600:720", "--rate-scale", "2", "--seed", "3", "--workers", "1"]


def rows_digest(args: list[str], out: Path) -> str:
    """sha256 of compare.json with each row's wall-clock figures dropped."""
    res = CliRunner().invoke(app, ["compare", *args, "--out", str(out), "-o", "json"])
    assert res.exit_code == 0, res.output
    rows = json.loads((out / "compare.json").read_text())
    for r in rows:
        del r["wall_s"], r["simulated_requests_per_s"]
    assert all(r["requests"]["total"] > 400 for r in rows)
    return hashlib.sha256(json.dumps(rows, sort_keys=True).encode()).hexdigest()


def test_streamed_compare_is_the_whole_compare(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import autoscaler.compare as compare_module

    seen: list[tuple[str, bool]] = []
    real = compare_module.run_simulation

    def spy(cfg, workload, spec, *a, **kw):
        seen.append((spec, isinstance(workload, WorkloadStream)))
        return real(cfg, workload, spec, *a, **kw)

    monkeypatch.setattr(compare_module, "run_simulation", spy)
    names = ["--controller", "pid,static,oracle"]
    streamed = rows_digest([*ARGS, *names], tmp_path / "stream")
    assert seen == [("pid", True), ("static", True), ("oracle", False)]
    seen.clear()
    assert rows_digest([*ARGS, *names, "--whole"], tmp_path / "whole") == streamed
    assert seen == [("pid", False), ("static", False), ("oracle", False)]


def test_streamed_rows_plot_the_same_and_a_failed_row_says_so() -> None:
    cfg = load_config(ROOT / "examples" / "fleet-pd.yaml")  # pools only: hpa cannot run on it
    kw = {"span": (600.0, 660.0), "rate_scale": 2.0, "seed": 1}
    stream = build_any(MOONCAKE, None, **kw)
    assert isinstance(stream, WorkloadStream)
    a = run_compare(cfg, stream, ["pid", "hpa"], workers=1)
    b = run_compare(cfg, build_workload(MOONCAKE, None, **kw), ["pid", "hpa"], workers=1)
    assert a.timelines == b.timelines and a.timelines["pid"] and a.timelines["hpa"] == []
    assert a.rows[1]["failed"] == b.rows[1]["failed"]
    assert a.rows[1]["failed"].startswith("FleetMismatchError: service llama-3.1-8b has no aggregated variant")
    for r in (*a.rows, *b.rows):
        r.pop("wall_s"), r.pop("simulated_requests_per_s", None)
    assert a.rows == b.rows


def test_help_names_the_whole_option() -> None:
    res = CliRunner().invoke(app, ["compare", "--help"], env={"COLUMNS": "200"})
    assert res.exit_code == 0 and "--whole" in res.output and "streamed" in res.output
