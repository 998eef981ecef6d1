"""Inputs that used to blow up (gigabytes, hours, a hang) or pass silently must be refused at once with
one line naming what is wrong and where, and a non-zero exit (issue 31, items 10 and 12).

Each case is refused before any trace is read or request drawn, so none takes more than a second or
two; the order is shown by pairing the bad option with a trace that does not exist (the old code
read, or failed to read, the trace first).
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from support.paths import ROOT
from typer.testing import CliRunner

from autoscaler.adapters.kubernetes import KubernetesError
from autoscaler.adapters.kubernetes import connect as kube_connect
from autoscaler.cli import app

HEADER = "TIMESTAMP,ContextTokens,GeneratedTokens"


def one_line_error(res: Any) -> str:
    """Assert the CLI's error contract (exit 2, one ``error:`` line on stderr, no traceback); the line."""
    assert res.exception is None or isinstance(res.exception, SystemExit), repr(res.exception)
    assert res.exit_code == 2, (res.exit_code, res.output)
    assert "Traceback" not in res.output
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, res.stderr
    assert lines[0].startswith("error: ")
    return lines[0]


@pytest.mark.parametrize("command", ["simulate", "compare"])
@pytest.mark.parametrize(("option", "value"), [
    ("--rate-scale", "0"), ("--rate-scale", "-1"), ("--rate-scale", "nan"), ("--rate-scale", "inf"),
    ("--time-scale", "0"), ("--time-scale", "nan"), ("--batch-fraction", "nan"), ("--batch-fraction", "1.5"),
])
def test_shaping_options_refused_before_the_trace_is_read(tmp_path: Path, command: str, option: str,
                                                          value: str) -> None:
    missing = tmp_path / "no-such-trace.csv"
    res = CliRunner().invoke(app, [command, "--trace", str(missing), option, value, "--out", str(tmp_path / "o")])
    line = one_line_error(res)
    assert option in line and "no-such-trace" not in line, line
    assert not (tmp_path / "o").exists()  # refused before --out was even created


def _azure(path: Path, stamps: list[str]) -> Path:
    path.write_text(HEADER + "\n" + "".join(f"{s},100,10\n" for s in stamps))
    return path


def test_a_row_dated_9999_is_refused_naming_it(tmp_path: Path) -> None:
    # Line 3 is the year-9999 row: 7,976 years after line 2, far beyond the ten years a trace may span.
    trace = _azure(tmp_path / "t.csv", ["2023-11-16 18:15:46.0", "9999-11-16 18:15:46.0", "2023-11-16 18:15:47.0"])
    res = CliRunner().invoke(app, ["simulate", "--trace", str(trace), "--out", str(tmp_path / "o")])
    line = one_line_error(res)
    assert f"{trace}: line 3:" in line and "line 2 (the earliest)" in line, line
    # 7,976 Gregorian years hold 7976 * 365 + 1934 leap days = 2,913,174 days; / 365.25 = 7,975.8
    assert "7,975.8 years" in line, line
    assert not (tmp_path / "o" / "results.json").exists()


def test_a_317_year_gap_in_a_mooncake_trace_is_refused_naming_the_row(tmp_path: Path) -> None:
    # 10^13 ms, the loader's largest timestamp, is 316.9 years after 0: two requests, a 317-year run.
    trace = tmp_path / "t.jsonl"
    trace.write_text('{"timestamp": 0, "input_length": 10, "output_length": 5, "hash_ids": [0]}\n'
                     '{"timestamp": 10000000000000, "input_length": 10, "output_length": 5, "hash_ids": [0]}\n')
    res = CliRunner().invoke(app, ["simulate", "--trace", str(trace), "--out", str(tmp_path / "o")])
    line = one_line_error(res)
    assert f"{trace}: line 2:" in line and "316.9 years" in line, line


def test_time_scale_stretching_a_trace_past_ten_years_is_refused(tmp_path: Path) -> None:
    # Two rows one second apart, stretched 1e9-fold: 1e9 s = 31.7 years > 10.
    trace = _azure(tmp_path / "t.csv", ["2023-11-16 18:15:46.0", "2023-11-16 18:15:47.0"])
    res = CliRunner().invoke(app, ["simulate", "--trace", str(trace), "--time-scale", "1e9",
                                   "--out", str(tmp_path / "o")])
    line = one_line_error(res)
    assert "--time-scale 1e+09" in line and "1e+09 s" in line, line


# ------------------------------------------------------------------ names and durations Kubernetes would refuse
def _fleet(tmp_path: Path, section: str, values: dict[str, Any]) -> Path:
    doc = yaml.safe_load((ROOT / "examples" / "fleet.yaml").read_text())
    doc.setdefault(section, {}).update(values)
    path = tmp_path / "fleet.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


@pytest.mark.parametrize(("section", "values", "where"), [
    ("kubernetes", {"namespace": "LLM_Serving"},
     "kubernetes.namespace: namespace 'LLM_Serving' is not a Kubernetes DNS label"),
    ("kubernetes", {"namespace": "a" * 64}, "kubernetes.namespace: namespace 'aaaa"),  # 64 > 63 characters
    ("kubernetes", {"namespace_self": "ops.team"}, "kubernetes.namespace_self: namespace_self 'ops.team' is not"),
    ("prometheus", {"namespace": "-llm"}, "prometheus.namespace: namespace '-llm' is not a Kubernetes DNS label"),
    ("prometheus", {"staleness_s": 1e-300}, "prometheus.staleness_s: Input should be greater than or equal to 1"),
    ("prometheus", {"timeout_s": 1e-9}, "prometheus.timeout_s: Input should be greater than or equal to 0.1"),
    ("kubernetes", {"lease": {"duration_s": 3e-300, "renew_s": 2e-300, "retry_s": 1e-300}},
     "kubernetes.lease.duration_s: Input should be greater than or equal to 1"),
])
def test_names_and_durations_kubernetes_would_refuse_are_refused(tmp_path: Path, section: str,
                                                                 values: dict[str, Any], where: str) -> None:
    fleet = _fleet(tmp_path, section, values)
    res = CliRunner().invoke(app, ["run", "--config", str(fleet), "--prometheus-url", "http://127.0.0.1:9",
                                   "--port", "0"])
    line = one_line_error(res)
    assert f"{fleet}: {where}" in line, line


@pytest.mark.parametrize(("identity", "shown"), [
    ("daemon\nb", "'daemon\\nb'"), ("x" * 100_000, "'" + "x" * 57 + "...'"), ("a b", "'a b'"), ("x" * 129, "x" * 57),
])
def test_an_identity_no_lease_or_event_can_hold_is_refused_before_connecting(identity: str, shown: str) -> None:
    # Events' reportingInstance takes at most 128 characters; a newline would also split a log line and a header.
    res = CliRunner().invoke(app, ["run", "--config", str(ROOT / "examples" / "fleet.yaml"), "--identity", identity,
                                   "--prometheus-url", "http://127.0.0.1:9", "--port", "0",
                                   "--kubeconfig", "/nonexistent/kubeconfig"])
    line = one_line_error(res)
    assert line.startswith("error: --identity ") and shown in line and "cannot name the daemon" in line, line
    assert len(line) < 300  # the 100 KB name is cut, not echoed


def test_an_identity_of_128_visible_characters_is_taken() -> None:
    # Reaches the kubeconfig, which does not exist: the identity itself was accepted.
    res = CliRunner().invoke(app, ["run", "--config", str(ROOT / "examples" / "fleet.yaml"), "--identity", "x" * 128,
                                   "--prometheus-url", "http://127.0.0.1:9", "--port", "0",
                                   "--kubeconfig", "/nonexistent/kubeconfig"])
    assert "kubeconfig /nonexistent/kubeconfig: no such file" in one_line_error(res)


@pytest.mark.parametrize(("server", "why"), [
    ("ht!tp://::::", "must start with http:// or https://"),
    ("https://::::", "malformed server URL 'https://::::'"),
    ("https://", "no host"),
    ("https://api.example:0", "port must be in 1..65535"),
])
def test_a_kubeconfig_server_that_is_no_url_is_refused(tmp_path: Path, server: str, why: str) -> None:
    # The connection itself, not the command: with the old code `autoscaler run` went on to lead with a
    # client that fails every call, for ever.
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "x",
        "clusters": [{"name": "c", "cluster": {"server": server}}], "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}]}))
    with pytest.raises(KubernetesError) as err:
        kube_connect(kubeconfig)
    assert f"kubeconfig {kubeconfig}: malformed server URL" in str(err.value) and why in str(err.value), err.value
    assert "\n" not in str(err.value)


def test_a_kubeconfig_server_with_a_path_is_taken(tmp_path: Path) -> None:
    # Rancher and other proxies serve a cluster's API under a path: http(s)://HOST[:PORT]/path is a server.
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "x",
        "clusters": [{"name": "c", "cluster": {"server": "https://rancher.example:8443/k8s/clusters/c-1"}}],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}]}))
    assert kube_connect(kubeconfig).configuration.host == "https://rancher.example:8443/k8s/clusters/c-1"


# ------------------------------------------------------------------ faults run --out, interrupted
SETTLE_S = 120.0
"""The longest a process may take to start or to end on a loaded machine: a bound on a failure, not a
timing the test measures (CI's two cores may be busy)."""

LONG_SCENARIO = """name: long
reported: [x/y#1]
failure: f
harmful: h
workload: {piecewise: {knots: [[0, 30], [7200, 30]]}}
harm: [{rule: overshoot}]
"""


def test_a_sigtermed_faults_run_exits_143_and_leaves_no_results_that_look_complete(tmp_path: Path) -> None:
    (tmp_path / "suite").mkdir()
    (tmp_path / "suite" / "long.yaml").write_text(LONG_SCENARIO)  # two hours at 30 req/s: far from done when stopped
    out = tmp_path / "out"
    out.mkdir()
    for name in ("faults.json", "faults.md"):  # a previous run's results, complete-looking
        (out / name).write_text("[]\n" if name.endswith("json") else "| scenario |\n")
    exe = Path(sys.executable).with_name("autoscaler")
    proc = subprocess.Popen([str(exe), "faults", "run", "--suite", str(tmp_path / "suite"), "--controller",
                             "pid,static", "--workers", "2", "--out", str(out), "--data", str(tmp_path)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + SETTLE_S
        # both removed: the run unlinks them one after the other, so wait for the pair, not the first
        while (((out / "faults.json").exists() or (out / "faults.md").exists())
               and proc.poll() is None and time.monotonic() < deadline):
            time.sleep(0.05)
        assert not (out / "faults.json").exists() and not (out / "faults.md").exists(), \
            "the previous run's results were not removed when this one started"
        assert proc.poll() is None, proc.communicate()
        proc.send_signal(signal.SIGTERM)
        _, stderr = proc.communicate(timeout=SETTLE_S)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 143, stderr
    assert "interrupted: no results written to" in stderr and "Traceback" not in stderr, stderr
    assert sorted(p.name for p in out.iterdir()) == []  # no faults.json, faults.md or temporary file


@pytest.mark.parametrize(("controller", "window"), [("pid", 300.0), ("mpc", 60.0)])
def test_the_daemon_reads_rates_over_its_controller_s_window(monkeypatch: pytest.MonkeyPatch, controller: str,
                                                             window: float) -> None:
    # As dry-run does: the MPC reads its rates over its own 60-s window (controllers.mpc.DEFAULT_WINDOW_S),
    # the PID over controller.window_s (examples/fleet.yaml: 300 s). Before, `run` built every
    # controller's source over controller.window_s. The source is captured, then the kubeconfig refused.
    import autoscaler.wiring

    seen: list[float | None] = []
    real = autoscaler.wiring.build_source

    def spy(*args: Any, **kw: Any) -> Any:
        seen.append(kw.get("window_s"))
        return real(*args, **kw)

    monkeypatch.setattr(autoscaler.wiring, "build_source", spy)
    res = CliRunner().invoke(app, ["run", "--config", str(ROOT / "examples" / "fleet.yaml"), "--controller",
                                   controller, "--prometheus-url", "http://127.0.0.1:9", "--port", "0",
                                   "--kubeconfig", "/nonexistent/kubeconfig"])
    assert "kubeconfig /nonexistent/kubeconfig: no such file" in one_line_error(res)
    assert seen == [window]


@pytest.mark.parametrize("argv", [
    ["simulate", "--span", "0:60", "--out", ""],
    ["simulate", "--span", "0:60", "--out="],
    ["compare", "--controller", "pid,static", "--span", "0:60", "--workers", "1", "--out", ""],
    ["faults", "run", "--scenarios", "cascade", "--controller", "pid", "--out", ""],
    ["dashboards", "export", "--out", ""],
    ["profile", "fit", "--model", "llama-3-8b", "--gpu", "H100-SXM", "--bench", "run.json", "--out", ""],
])
def test_an_empty_out_is_refused_not_read_as_the_working_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                    argv: list[str]) -> None:
    # typer reads --out '' as Path(''), which is Path('.'): simulate wrote results.json and timeline.csv, compare
    # compare.json, dashboards export its bundle into the working directory (an unset $OUT in a script), exit 0
    monkeypatch.chdir(tmp_path)
    assert one_line_error(CliRunner().invoke(app, argv)) == "error: --out is empty: name where to write"
    assert list(tmp_path.iterdir()) == []


def test_an_out_given_as_a_value_after_double_dash_or_named_is_left_to_the_command() -> None:
    from autoscaler.cli.common import empty_out

    assert empty_out(["--out", ""]) and empty_out(["--out", "  "]) and empty_out(["--x", "1", "--out="])
    assert not empty_out(["--out", "."]) and not empty_out(["--out=runs"]) and not empty_out(["--out"])
    assert not empty_out(["--", "--out", ""])  # past '--': arguments, not options
