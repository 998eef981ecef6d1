"""Tests for the ``autoscaler simulate`` command (typer CliRunner, in process)."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
from support.paths import ROOT
from typer.testing import CliRunner

from autoscaler.cli import app

HEADER = "TIMESTAMP,ContextTokens,GeneratedTokens"
N_ROWS = 200


def azure_csv(path: Path, n: int = N_ROWS) -> Path:
    """An Azure-format trace: one request every 0.5 s from 18:15:46, varied sizes."""
    lines = [HEADER]
    for i in range(n):
        half_s = 92 + i  # 46 s + i * 0.5 s, in half-seconds
        minute, sec, frac = 15 + half_s // 120, (half_s % 120) // 2, 5_000_000 * (half_s % 2)
        lines.append(f"2023-11-16 18:{minute:02d}:{sec:02d}.{frac:07d},"
                     f"{200 + (i * 97) % 1500},{10 + (i * 31) % 300}")
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.fixture(scope="module")
def run_result(tmp_path_factory) -> tuple[object, Path]:
    d = tmp_path_factory.mktemp("cli")
    trace = azure_csv(d / "trace.csv")
    out = d / "out"
    res = CliRunner().invoke(app, ["simulate", "--trace", str(trace), "--out", str(out), "--plot", "--seed", "1"])
    return res, out


def test_simulate_exit_code_and_files(run_result) -> None:
    res, out = run_result
    assert res.exit_code == 0, res.output
    assert (out / "results.json").is_file()
    assert (out / "timeline.csv").is_file()


def test_results_json_documented_keys_and_consistency(run_result) -> None:
    _, out = run_result
    r = json.loads((out / "results.json").read_text())
    req = r["requests"]
    assert set(req) == {"total", "completed", "rejected", "failed", "rejected_admission"}
    assert req["total"] == N_ROWS
    assert req["completed"] + req["rejected"] + req["failed"] + req["rejected_admission"] == N_ROWS
    assert req["rejected_admission"] == 0 == r["admission"]["shed"]  # no admission policy: nothing is shed
    assert r["admission"]["policy"] == "none"
    assert set(r["slo_attainment_by_priority"]) == {"sheddable", "standard", "critical"}
    assert set(r["goodput_rps"]) == {"mean", "min_60s"}
    assert req["rejected"] == 0  # every request is far below max_model_len 32768

    assert set(r["slo_attainment"]) == {"interactive", "batch", "all"}
    for v in r["slo_attainment"].values():
        assert 0.0 <= v <= 1.0
    for k in ("ttft_s", "itl_s"):
        q = r[k]
        assert set(q) == {"p50", "p95", "p99"}
        assert 0 < q["p50"] <= q["p95"] <= q["p99"]

    variants = {"h100", "a100", "gh200"}  # the embedded example fleet
    for k in ("gpu_hours", "cost_usd"):
        assert set(r[k]) <= variants | {"total"} and "total" in r[k]
        assert r[k]["total"] == pytest.approx(sum(v for name, v in r[k].items() if name != "total"))
    # the example fleet starts with 2 GH200 replicas (min 1): cost is positive
    assert r["cost_usd"]["total"] > 0
    # cost per successful request = total cost / requests meeting the SLO (= attainment x accepted)
    n_ok = round(r["slo_attainment"]["all"] * (req["completed"] + req["failed"]))
    assert r["cost_per_successful_request_usd"] == pytest.approx(r["cost_usd"]["total"] / n_ok)
    # Azure traces have no workflows: a task is a request
    assert r["cost_per_successful_task_usd"] == pytest.approx(r["cost_per_successful_request_usd"])

    assert isinstance(r["scale_events"], int) and r["scale_events"] >= 0
    assert r["wall_s"] > 0
    assert r["simulated_requests_per_s"] == pytest.approx(N_ROWS / r["wall_s"])


def test_timeline_csv(run_result) -> None:
    _, out = run_result
    with (out / "timeline.csv").open() as f:
        rows = list(csv.DictReader(f))
    assert rows
    for col in ("time_s", "service", "arrival_rate_rps", "ttft_p95_s", "reason",
                "ready_h100", "ready_gh200", "desired_gh200"):
        assert col in rows[0]
    times = [float(x["time_s"]) for x in rows]
    # one row per 15-s tick (one service)
    assert times == pytest.approx([15.0 * (i + 1) for i in range(len(rows))])
    # the trace spans 99.5 s, so the run has at least ceil(99.5/15) = 7 ticks
    assert len(rows) >= 7
    # arrival rate over the first tick: rows at 0, 0.5, ..., 15.0 -> 31 requests in [0, 15] / 15 s
    assert float(rows[0]["arrival_rate_rps"]) == pytest.approx(31 / 15)
    # every request is counted in exactly one tick: summing rate x tick length gives back all 200
    counted, prev = 0.0, 0.0
    for x in rows:
        t = float(x["time_s"])
        counted += float(x["arrival_rate_rps"]) * (t - prev)
        prev = t
    assert counted == pytest.approx(N_ROWS)


def test_plot_writes_png(run_result) -> None:
    _, out = run_result
    png = out / "timeline.png"
    assert png.is_file()
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_json_flag_prints_results(tmp_path: Path) -> None:
    trace = azure_csv(tmp_path / "t.csv", n=20)
    res = CliRunner().invoke(app, ["simulate", "--trace", str(trace), "--out", str(tmp_path / "o"), "-o", "json"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    assert doc["requests"]["total"] == 20


def one_line_error(res) -> str:
    assert res.exit_code == 2, res.output
    assert "Traceback" not in res.output
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, res.stderr
    assert lines[0].startswith("error: ")
    return lines[0]


def test_malformed_trace_line_3(tmp_path: Path) -> None:
    trace = tmp_path / "bad.csv"
    trace.write_text(f"{HEADER}\n2023-11-16 18:15:46.0000000,100,10\n2023-11-16 18:15:47.0000000,abc,10\n")
    res = CliRunner().invoke(app, ["simulate", "--trace", str(trace), "--out", str(tmp_path / "o")])
    line = one_line_error(res)
    assert str(trace) in line and "line 3" in line
    assert not (tmp_path / "o" / "results.json").exists()


def test_bad_config(tmp_path: Path) -> None:
    trace = azure_csv(tmp_path / "t.csv", n=5)
    cfg = tmp_path / "fleet.yaml"
    cfg.write_text("services: []\n")
    res = CliRunner().invoke(app, ["simulate", "--config", str(cfg), "--trace", str(trace),
                                   "--out", str(tmp_path / "o")])
    line = one_line_error(res)
    assert str(cfg) in line and "services" in line


def test_unknown_controller(tmp_path: Path) -> None:
    trace = azure_csv(tmp_path / "t.csv", n=5)
    res = CliRunner().invoke(app, ["simulate", "--trace", str(trace), "--controller", "mpcx",
                                   "--out", str(tmp_path / "o")])
    line = one_line_error(res)
    assert "mpcx" in line and "pid" in line and "static" in line


def test_unknown_service(tmp_path: Path) -> None:
    trace = azure_csv(tmp_path / "t.csv", n=5)
    res = CliRunner().invoke(app, ["simulate", "--trace", str(trace), "--service", "nope",
                                   "--out", str(tmp_path / "o")])
    line = one_line_error(res)
    assert "nope" in line and "llama-3.1-8b" in line


def simulate_with_edited_fleet(tmp_path: Path, old: str, new: str) -> str:
    """``simulate`` with examples/fleet.yaml where ``old`` is replaced by ``new``; its one-line error."""
    trace = azure_csv(tmp_path / "t.csv", n=5)
    doc = ROOT.joinpath("examples", "fleet.yaml").read_text()
    cfg = tmp_path / "fleet.yaml"
    cfg.write_text(doc.replace(old, new))
    res = CliRunner().invoke(app, ["simulate", "--config", str(cfg), "--trace", str(trace),
                                   "--out", str(tmp_path / "o")])
    return one_line_error(res)


def test_config_error_names_list_items_verbatim(tmp_path: Path) -> None:
    # The key path names list items by their `name` in brackets; the terminal output must keep the
    # brackets (they look like rich markup and were once swallowed).
    line = simulate_with_edited_fleet(tmp_path, "price_per_gpu_hour: 2.99", "price_per_gpu_hour: -2.99")
    assert "services[llama-3.1-8b].variants[h100].price_per_gpu_hour" in line


def test_config_error_with_a_newline_in_a_name_stays_one_line(tmp_path: Path) -> None:
    line = simulate_with_edited_fleet(tmp_path, "profile: llama-3-8b/h100-sxm", 'profile: "nope\\nline2"')
    assert "unknown performance profile 'nope\\nline2'" in line


# ------------------------------------------------------------------------------------ output a person reads
def test_flags_show_no_value_in_help() -> None:
    out = CliRunner().invoke(app, ["simulate", "--help"], terminal_width=100).stdout
    plot = next(ln for ln in out.splitlines() if "--plot" in ln)
    assert "<bool>" not in plot and "Write timeline.png." in plot


def test_progress_is_a_line_per_tenth_when_not_a_terminal(tmp_path: Path) -> None:
    res = CliRunner().invoke(app, ["simulate", "--trace", str(azure_csv(tmp_path / "t.csv")),
                                   "--out", str(tmp_path / "o")])
    assert res.exit_code == 0, res.output
    lines = [ln for ln in res.stderr.splitlines() if ln.startswith("simulating")]
    assert [ln.rsplit(" ", 1)[1] for ln in lines] == [f"{p}%" for p in range(10, 101, 10)]


def test_an_interrupted_run_exits_130_and_leaves_no_old_results(tmp_path: Path, monkeypatch) -> None:
    out = tmp_path / "o"
    trace = str(azure_csv(tmp_path / "t.csv"))
    assert CliRunner().invoke(app, ["simulate", "--trace", trace, "--out", str(out)]).exit_code == 0
    assert (out / "results.json").is_file()

    def interrupt(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr("autoscaler.simulate.run_simulation", interrupt)
    res = CliRunner().invoke(app, ["simulate", "--trace", trace, "--out", str(out)])
    assert res.exit_code == 130
    assert res.stderr.startswith("interrupted: no results written to")
    assert not (out / "results.json").exists() and not (out / "timeline.csv").exists()


def test_results_are_written_atomically(tmp_path: Path, monkeypatch) -> None:
    # A write that fails half-way leaves no file under the final name and no temporary file behind.
    from autoscaler import files

    target = tmp_path / "results.json"
    with pytest.raises(RuntimeError), files.atomic(target) as tmp:
        tmp.write_text('{"half": ')
        raise RuntimeError("disk full")
    assert not target.exists() and list(tmp_path.iterdir()) == []
    files.write_text(target, "{}\n")
    assert target.read_text() == "{}\n" and [p.name for p in tmp_path.iterdir()] == ["results.json"]


def test_a_trace_spanning_a_year_is_a_warning_with_its_cost(tmp_path: Path) -> None:
    trace = azure_csv(tmp_path / "t.csv", n=20)
    with trace.open("a") as f:
        f.write("2024-11-16 18:16:00.0000000,300,20\n")  # one row a year late
    res = CliRunner().invoke(app, ["simulate", "--trace", str(trace), "--out", str(tmp_path / "o")])
    assert res.exit_code == 0, res.output
    line = next(ln for ln in res.stderr.splitlines() if ln.startswith("warning:"))
    # the example fleet's minimum is one GH200 ($1.49/h) for 366 days (2024 is a leap year)
    assert "arrivals span 366.0 days (a gap of 366.0 days after request 20)" in line
    assert "at least 8,784 GPU-hours ($13,088) at its minimum replicas" in line


@pytest.mark.parametrize(("extra", "needle"), [
    (["--span", "100"], "START:END"),
    (["--span", "150:160"], "no request in --span 150:160"),  # the 200-row trace lasts 99.5 s
    (["--lengths-from", "LENGTHS"], "needs --trace to be a ServeGen folder"),
])
def test_span_and_lengths_errors(tmp_path: Path, extra: list[str], needle: str) -> None:
    trace = azure_csv(tmp_path / "t.csv")
    extra = [str(trace) if x == "LENGTHS" else x for x in extra]
    res = CliRunner().invoke(app, ["simulate", "--trace", str(trace), *extra, "--out", str(tmp_path / "o")])
    assert needle in one_line_error(res)


def test_span_crops_the_trace(tmp_path: Path) -> None:
    # rows every 0.5 s from 0 to 99.5 s: [10, 20) holds 20 of them
    trace = azure_csv(tmp_path / "t.csv")
    res = CliRunner().invoke(app, ["simulate", "--trace", str(trace), "--span", "10:20", "--controller", "static",
                                   "-o", "json", "--out", str(tmp_path / "o")])
    assert res.exit_code == 0, res.output
    assert json.loads((tmp_path / "o" / "results.json").read_text())["requests"]["total"] == 20


def test_simulate_a_servegen_folder(tmp_path: Path) -> None:
    folder = tmp_path / "m"
    folder.mkdir()
    (folder / "chunk-0-trace.csv").write_text("0,2.0,1.0,Gamma,1.0,0.5\n600,0,0,,0,0\n")
    lengths = azure_csv(tmp_path / "t.csv")
    res = CliRunner().invoke(app, ["simulate", "--trace", str(folder), "--span", "0:300", "--lengths-from",
                                   str(lengths), "--controller", "static", "--out", str(tmp_path / "o")])
    assert res.exit_code == 0, res.output
    total = json.loads((tmp_path / "o" / "results.json").read_text())["requests"]["total"]
    assert abs(total - 600) < 5 * 600 ** 0.5  # Poisson, 2 req/s for 300 s


@pytest.mark.parametrize("policy", ["none", "pid"])
def test_the_results_table_title_names_the_admission_policy(tmp_path: Path, policy: str) -> None:
    # as compare names a row SPEC@POLICY; with --admission none the title said "pid on ..." alone
    res = CliRunner().invoke(app, ["simulate", "--span", "0:60", "--admission", policy, "--out", str(tmp_path)],
                             terminal_width=200)
    assert res.exit_code == 0, res.output
    assert f"pid@{policy} on synthetic:default" in res.stdout


def test_simulate_says_when_bound_is_searching(tmp_path: Path) -> None:
    # bound simulates up to `simulations` candidates before its own run: each says so on stderr
    res = CliRunner().invoke(app, ["simulate", "--controller", "bound:simulations=1", "--span", "0:60",
                                   "--out", str(tmp_path)])
    assert res.exit_code == 0, res.output
    assert res.stderr.splitlines()[0] == "bound:simulations=1: searching, run 1 of at most 1"


def test_docs_name_every_results_json_key(tmp_path: Path) -> None:
    # a run with an admission policy and the MPC, so the optional keys (solve_ms) are there too; every key
    # the run wrote, and those of its nested documents, is named in docs/simulator.md's list
    out = tmp_path / "out"
    res = CliRunner().invoke(app, ["simulate", "--trace", str(azure_csv(tmp_path / "t.csv")), "--out", str(out),
                                   "--controller", "mpc", "--admission", "pid"])
    assert res.exit_code == 0, res.output
    doc = json.loads((out / "results.json").read_text())
    text = (ROOT / "docs" / "simulator.md").read_text()
    listing = text[text.index("`results.json`: `controller`"):]
    listing = listing[:listing.index("\n\n")]
    nested = ("requests", "slo_attainment", "slo_attainment_by_priority", "goodput_rps", "admission", "tasks",
              "solve_ms")
    keys = [*doc, *(f"{k}.{sub}" for k in nested for sub in doc[k])]
    missing = [k for k in keys if f"`{k.rsplit('.', 1)[-1]}`" not in listing]
    assert {"slo_attainment_by_priority", "goodput_rps", "admission", "solve_ms"} <= doc.keys()
    assert not missing, missing
