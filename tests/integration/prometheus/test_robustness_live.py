"""Break-it tests of ``autoscaler compare``, ``dry-run`` and ``backtest`` (bad input, broken Prometheus).

The promises under test: bad input (arguments, fleet file, controller specs, time ranges, URLs) gives a
one-line ``error: ...`` naming what is wrong, exit status 2 (1 for an unreachable Prometheus), never a
traceback; a failed, slow or 5xx query is unknown (never zero) and never causes a scale-down;
``compare.json`` rows are consistent and deterministic for a seed (serial == parallel).

Many cases were found by trying to break these commands; each test guards what must hold for it. A
fake Prometheus (``http.server`` in a thread on 127.0.0.1,
port 0) answers each query with a function of the PromQL; one test starts Debian's real
``prometheus`` on an empty TSDB (``promserver.PromServer``).
"""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import pytest
import yaml
from support.paths import ROOT
from support.promserver import LocalHTTPServer
from typer.testing import CliRunner, Result

from autoscaler.cli import app
from autoscaler.config.loading import default_config
from autoscaler.faults.promserver import PromServer, free_port

# ----------------------------------------------------------------------------- helpers
Answer = Callable[[str, str], tuple[int, bytes]]  # (path, promql) -> (HTTP status, body)


def vector(value: str | None = None, t: float | None = None) -> bytes:
    result = [] if value is None else [{"metric": {}, "value": [t or time.time(), value]}]
    return json.dumps({"status": "success", "data": {"resultType": "vector", "result": result}}).encode()


def empty(path: str, promql: str) -> tuple[int, bytes]:
    """An empty Prometheus: ``vector(1)`` answers, everything else has no series."""
    if promql == "vector(1)":
        return 200, vector("1")
    if path.endswith("query_range"):
        return 200, json.dumps({"status": "success", "data": {"resultType": "matrix", "result": []}}).encode()
    return 200, vector()


def failing(status: int, body: bytes, *, ksm: str | None = None, delay_s: float = 0.0) -> Answer:
    """Reachable (``vector(1)`` answers) but every other query fails with ``status``/``body`` after
    ``delay_s``; with ``ksm``, kube-state-metrics queries still answer that replica count."""
    def answer(path: str, promql: str) -> tuple[int, bytes]:
        if promql == "vector(1)":
            return 200, vector("1")
        if ksm is not None and "kube_deployment" in promql:
            return 200, vector(ksm)
        time.sleep(delay_s)
        return status, body
    return answer


class FakeProm:
    """A Prometheus HTTP API stand-in on 127.0.0.1 (port 0); ``answer`` decides every response."""

    def __init__(self, answer: Answer) -> None:
        self.answer = answer
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def _reply(self, query: str) -> None:
                path = urllib.parse.urlparse(self.path).path
                promql = urllib.parse.parse_qs(query).get("query", [""])[0]
                status, body = fake.answer(path, promql)
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client timed out

            def do_GET(self) -> None:
                self._reply(urllib.parse.urlparse(self.path).query)

            def do_POST(self) -> None:
                n = int(self.headers.get("Content-Length") or 0)
                self._reply(self.rfile.read(n).decode())

            def log_message(self, format: str, *args: Any) -> None:
                """Quiet."""

        self.http = LocalHTTPServer(Handler)

    @property
    def url(self) -> str:
        return self.http.url

    def close(self) -> None:
        self.http.close()


@pytest.fixture
def fake() -> Iterator[Callable[[Answer], FakeProm]]:
    servers: list[FakeProm] = []

    def start(answer: Answer) -> FakeProm:
        servers.append(FakeProm(answer))
        return servers[-1]
    yield start
    for s in servers:
        s.close()


def invoke(*args: str) -> Result:
    return CliRunner().invoke(app, list(args))


def assert_one_line_error(res: Result, status: int, *needles: str) -> str:
    """Exit ``status``, no traceback, stderr one line ``error: ...`` containing every needle."""
    assert res.exception is None or isinstance(res.exception, SystemExit), repr(res.exception)
    assert res.exit_code == status, (res.exit_code, res.stderr)
    lines = [ln for ln in res.stderr.splitlines() if ln.strip() and not ln.startswith("done: ")]
    assert len(lines) == 1 and lines[0].startswith("error: "), res.stderr
    for n in needles:
        assert n in lines[0], (n, lines[0])
    return lines[0]


def unreachable() -> str:
    return f"http://127.0.0.1:{free_port()}"


AZURE_HEADER = "TIMESTAMP,ContextTokens,GeneratedTokens\n"


def azure_trace(path: Path, n: int, prompt: int = 400, gap_s: float = 1.0) -> Path:
    rows = [f"2023-11-16 18:{int(i * gap_s) // 60:02d}:{(i * gap_s) % 60:09.6f},{prompt + 7 * (i % 13)},{40 + i % 50}"
            for i in range(n)]
    path.write_text(AZURE_HEADER + "\n".join(rows) + "\n")
    return path


def fleet_file(tmp_path: Path, prometheus: dict[str, Any]) -> Path:
    doc = yaml.safe_load((ROOT / "examples" / "fleet.yaml").read_text())
    doc["prometheus"] = prometheus
    path = tmp_path / "fleet.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def ticks_json(res: Result) -> list[dict[str, Any]]:
    return [json.loads(ln) for ln in res.stdout.splitlines() if ln.strip()]


SERVICE = default_config().services[0].name
VARIANTS = [v.name for v in default_config().services[0].variants]
FAILURE_BOUND_S = 300.0
"""How long a wait on a subprocess may last before the test calls it hung: a bound on a failure, not a
timing (a worker starts in ~2 s on an idle machine), long enough that CI's two busy cores never reach it."""


# ============================================================================= compare: bugs
@pytest.mark.parametrize("spec", ["hpa:target=abc", "kpa:target=abc", "dynamo:ttft=abc", "hpa:tolerance=abc"])
def test_non_numeric_spec_value_is_one_line_error(tmp_path: Path, spec: str) -> None:
    # A number that is not one is refused before the trace is loaded, naming the parameter.
    res = invoke("compare", "--trace", str(azure_trace(tmp_path / "t.csv", 3)), "--controller", spec,
                 "--workers", "1", "--out", str(tmp_path / "out"))
    assert_one_line_error(res, 2, spec.split(":")[1].split("=")[0])


@pytest.mark.parametrize("spec", ["hpa:target=nan", "kpa:target=nan", "kpa:target=inf", "hpa:target=inf",
                                  "dynamo:ttft=nan", "aibrix:target=inf"])
def test_non_finite_spec_target_is_rejected(tmp_path: Path, spec: str) -> None:
    # NaN and infinity are refused (they would pass `target <= 0` checks).
    res = invoke("compare", "--trace", str(azure_trace(tmp_path / "t.csv", 3)), "--controller", spec,
                 "--workers", "1", "--out", str(tmp_path / "out"))
    assert_one_line_error(res, 2, spec.split(":")[1].split("=")[0])


@pytest.mark.parametrize("spec", ["kpa:stable_window_s=0", "kpa:stable_window_s=-60", "kpa:panic_window_percentage=0",
                                  "hpa:tolerance=-1", "hpa:downscale_window_s=-10"])
def test_out_of_range_spec_parameter_is_rejected(tmp_path: Path, spec: str) -> None:
    # Zero or negative windows and tolerances are refused up front, naming the parameter.
    res = invoke("compare", "--trace", str(azure_trace(tmp_path / "t.csv", 3)), "--controller", spec,
                 "--workers", "1", "--out", str(tmp_path / "out"))
    assert_one_line_error(res, 2, spec.split(":")[1].split("=")[0])


@pytest.mark.parametrize("sub", ["", "sub"])
def test_compare_out_is_a_file_fails_before_simulating(tmp_path: Path, sub: str) -> None:
    # A bad --out fails before any controller runs.
    (tmp_path / "afile").write_text("x")
    out = tmp_path / "afile" / sub if sub else tmp_path / "afile"
    res = invoke("compare", "--trace", str(azure_trace(tmp_path / "t.csv", 3)), "--controller", "pid,static",
                 "--out", str(out))
    assert_one_line_error(res, 2, "--out")
    assert "done:" not in res.stderr  # checked before any run


@pytest.mark.parametrize("workers", ["0", "-1"])
def test_compare_workers_below_one_is_rejected(tmp_path: Path, workers: str) -> None:
    # --workers below 1 is refused, not run serially.
    res = invoke("compare", "--trace", str(azure_trace(tmp_path / "t.csv", 3)), "--controller", "pid,static",
                 "--workers", workers, "--out", str(tmp_path / "out"))
    assert_one_line_error(res, 2, "--workers")


def test_compare_negative_seed_names_the_option(tmp_path: Path) -> None:
    # The error names --seed.
    res = invoke("compare", "--trace", str(azure_trace(tmp_path / "t.csv", 3)), "--controller", "pid",
                 "--seed", "-1", "--out", str(tmp_path / "out"))
    assert_one_line_error(res, 2, "--seed")


# ============================================================================= compare: controller lists
@pytest.mark.parametrize(("spec", "needle"), [
    ("pid,pid", "listed twice"), ("pid,,hpa", "an empty entry"), ("pid,", "an empty entry"),
    (",,", "no controller given"), ("", "no controller given"),
    ("bogus", "unknown controller 'bogus'"), ("pid:x=1", "bad parameter 'x=1' for pid; its spec takes no parameters"),
    ("hpa:target=-1", "target must be > 0"), ("kpa:target=0", "target must be > 0"),
    ("hpa:metric=bogus", "metric must be one of"), ("dynamo:predictor=bogus", "predictor must be one of"),
    ("hpa:target", "bad parameter"), ("hpa:", "bad parameter"),
])
def test_compare_bad_controller_list_is_one_line_error(tmp_path: Path, spec: str, needle: str) -> None:
    res = invoke("compare", "--trace", str(azure_trace(tmp_path / "t.csv", 3)), "--controller", spec,
                 "--workers", "1", "--out", str(tmp_path / "out"))
    assert_one_line_error(res, 2, needle)


def test_compare_rate_scale_leaving_nothing_is_one_line_error(tmp_path: Path) -> None:
    res = invoke("compare", "--trace", str(azure_trace(tmp_path / "t.csv", 3)), "--controller", "pid",
                 "--rate-scale", "1e-9", "--out", str(tmp_path / "out"))
    assert_one_line_error(res, 2, "no requests left")


def _consistent(rows: list[dict[str, Any]], names: list[str]) -> None:
    assert [r["controller"] for r in rows] == names
    for r in rows:
        for frac in (*r["slo_attainment"].values(), r["prefix_cache_hit_rate"]):
            assert frac is None or 0.0 <= frac <= 1.0, r["controller"]
        assert all(c >= 0 for c in r["cost_usd"].values()) and all(h >= 0 for h in r["gpu_hours"].values())
        for k in ("cost_per_successful_request_usd", "cost_per_successful_task_usd",
                  "ratio_to_best_cost_per_successful_request", "oscillations_per_hour"):
            assert r[k] is None or r[k] >= 0, (r["controller"], k)
        req = r["requests"]
        assert req["completed"] + req["rejected"] + req["failed"] <= req["total"]


def test_compare_every_request_rejected_gives_consistent_rows(tmp_path: Path) -> None:
    trace = azure_trace(tmp_path / "t.csv", 3, prompt=40_000)  # longer than max_model_len 32768
    names = ["pid", "static", "hpa", "wva"]
    res = invoke("compare", "--trace", str(trace), "--controller", ",".join(names), "--workers", "1", "-o", "json",
                 "--out", str(tmp_path / "out"))
    assert res.exit_code == 0, res.stderr
    rows = json.loads(res.stdout)
    _consistent(rows, names)
    for r in rows:
        assert r["requests"]["rejected"] == 3 and r["slo_attainment"]["all"] is None
        assert r["cost_per_successful_request_usd"] is None


@pytest.mark.slow
def test_interrupted_compare_stops_its_workers_and_leaves_no_results(tmp_path: Path) -> None:
    """Ctrl-C (SIGINT to the console script) during a two-worker compare of the embedded default: exit 130,
    one 'interrupted:' line, no outputs, and no worker left running (forked workers share its command line)."""
    out = tmp_path / "o"
    exe = Path(sys.executable).with_name("autoscaler")
    proc = subprocess.Popen([str(exe), "compare", "--controller", "pid,static", "--workers", "2", "--out", str(out)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, preexec_fn=default_sigint)
    deadline = time.monotonic() + FAILURE_BOUND_S  # the workers never start
    while len(_same_command(out)) < 3 and time.monotonic() < deadline:  # the command and its two workers
        time.sleep(0.2)
    assert len(_same_command(out)) == 3, "the workers never started"
    proc.send_signal(signal.SIGINT)
    _, stderr = proc.communicate(timeout=FAILURE_BOUND_S)
    assert proc.returncode == 130, (proc.returncode, stderr)
    assert "Traceback" not in stderr and stderr.strip().splitlines()[-1].startswith("interrupted:"), stderr
    assert list(out.iterdir()) == []
    deadline = time.monotonic() + FAILURE_BOUND_S  # the workers end on their own
    while _same_command(out) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert _same_command(out) == []


def _same_command(out: Path) -> list[str]:
    """Pids of the processes whose command line names ``out``."""
    pids = []
    for p in Path("/proc").iterdir():
        try:
            if p.name.isdigit() and str(out).encode() in (p / "cmdline").read_bytes():
                pids.append(p.name)
        except OSError:  # the process ended while we looked
            pass
    return pids


@pytest.mark.slow
def test_compare_json_is_valid_consistent_and_serial_equals_parallel(tmp_path: Path) -> None:
    trace = azure_trace(tmp_path / "t.csv", 150, gap_s=0.5)
    names = ["pid", "static", "hpa", "kpa", "dynamo"]
    runs = []
    for workers in ("1", "2"):
        res = invoke("compare", "--trace", str(trace), "--controller", ",".join(names), "--rate-scale", "3",
                     "--seed", "5", "--workers", workers, "-o", "json", "--out", str(tmp_path / f"out{workers}"))
        assert res.exit_code == 0, res.stderr
        rows = json.loads(res.stdout, parse_constant=lambda c: pytest.fail(f"non-JSON constant {c}"))
        assert rows == json.loads((tmp_path / f"out{workers}" / "compare.json").read_text())
        _consistent(rows, names)
        runs.append([{k: v for k, v in r.items() if k not in ("wall_s", "simulated_requests_per_s")} for r in rows])
    assert runs[0] == runs[1]


# ============================================================================= dry-run: bugs
def assert_queries_failed(res: Any, failed: int, ticks: int) -> None:
    """A bounded dry-run whose queries failed still prints every tick, then exits 1 saying so."""
    assert res.exit_code == 1, res.stderr
    last = res.stderr.strip().splitlines()[-1]
    assert last == f"error: queries failed on {failed} of {ticks} tick(s); the loop held there", last


@pytest.mark.parametrize("url", ["127.0.0.1:9090", "localhost", "ftp://127.0.0.1:9", "http://[::1",
                                 "http://127.0.0.1:99999", "http://"])
def test_malformed_prometheus_url_is_bad_input(url: str) -> None:
    # A malformed URL is bad input (exit 2, naming it), not an unreachable server.
    res = invoke("dry-run", "--prometheus-url", url, "--once")
    line = assert_one_line_error(res, 2, url)
    assert "malformed response" not in line


@pytest.mark.parametrize("args", [["--once", "--speed", "nan"], ["--once", "--speed", "inf"],
                                  ["--ticks", "2", "--interval", "nan"], ["--ticks", "2", "--interval", "inf"]])
def test_non_finite_speed_or_interval_is_rejected(args: list[str], fake: Callable[[Answer], FakeProm]) -> None:
    # NaN and infinity are refused for --speed and --interval, before the first tick.
    prom = fake(empty)
    res = invoke("dry-run", "--prometheus-url", prom.url, "--output", "json", *args)
    assert_one_line_error(res, 2, args[-2])


def test_replica_counts_are_not_zero_when_only_vllm_queries_fail(fake: Callable[[Answer], FakeProm]) -> None:
    # kube-state-metrics answers 4 replicas per variant; every vLLM query fails (HTTP 500). The counts
    # come from kube-state-metrics all the same, and the loop holds at 4: a failed query is never read
    # as zero, and never recommends 4 -> 0.
    prom = fake(failing(500, b'{"status":"error","errorType":"internal","error":"boom"}', ksm="4"))
    res = invoke("dry-run", "--prometheus-url", prom.url, "--once", "--output", "json")
    assert_queries_failed(res, 1, 1)
    st = ticks_json(res)[0]["services"][SERVICE]
    assert st["decision"]["hold"] is True and st["errors"]
    for v in VARIANTS:
        var = st["variants"][v]
        assert var["current_replicas"] in (None, 4), var
        assert var["desired_replicas"] in (None, 4), var


def test_unknown_replica_counts_are_null_not_zero(fake: Callable[[Answer], FakeProm]) -> None:
    # Every query but the reachability probe fails on the first tick: the replica counts are unknown.
    # Unknown counts are null, never printed as 0 current / 0 desired.
    prom = fake(failing(503, b"unavailable"))
    res = invoke("dry-run", "--prometheus-url", prom.url, "--once", "--output", "json")
    assert_queries_failed(res, 1, 1)
    st = ticks_json(res)[0]["services"][SERVICE]
    assert st["decision"]["hold"] is True
    for v in VARIANTS:
        assert st["variants"][v]["current_replicas"] is None, st["variants"][v]
        assert st["variants"][v]["desired_replicas"] is None, st["variants"][v]


@pytest.mark.parametrize("command", [["dry-run", "--once"], ["backtest", "--start", "0", "--end", "60"]])
def test_url_credentials_are_not_printed(command: list[str], tmp_path: Path) -> None:
    # The password in the URL is masked in the error.
    out = ["--out", str(tmp_path / "out")] if command[0] == "backtest" else []
    res = invoke(*command, *out, "--prometheus-url", f"http://user:s3cret@127.0.0.1:{free_port()}")
    assert res.exit_code == 1
    assert "s3cret" not in res.stderr + res.stdout


def test_malformed_selector_is_a_config_error(tmp_path: Path) -> None:
    # A selector that is not PromQL matchers is refused when the fleet file is read (else every query
    # would get HTTP 400, forever), before connecting.
    cfg = fleet_file(tmp_path, {"selectors": {SERVICE: {"service": "this is not a matcher"}}})
    res = invoke("dry-run", "--config", str(cfg), "--prometheus-url", unreachable(), "--once")
    assert_one_line_error(res, 2, "selectors")


# ============================================================================= dry-run: arguments
@pytest.mark.parametrize("args", [["--interval", "0"], ["--interval", "-1"], ["--once", "--interval", "5"],
                                  ["--once", "--ticks", "3"], ["--ticks", "0"], ["--output", "bogus", "--once"],
                                  ["--speed", "0", "--once"], ["--speed", "-2", "--once"]])
def test_dry_run_bad_arguments_exit_2(args: list[str]) -> None:
    assert_one_line_error(invoke("dry-run", "--prometheus-url", unreachable(), *args), 2)


@pytest.mark.parametrize(("section", "needle"), [
    ({"query_set": "bogus"}, "prometheus.query_set"), ({"selectors": {"nosuch": {}}}, "unknown service"),
    ({"timeout_s": 0}, "prometheus.timeout_s"), ({"max_concurrency": 0}, "prometheus.max_concurrency"),
    ({"bearer_token_file": "/nonexistent/token"}, "bearer_token_file"),
    ({"queries": {"bogus_signal": "up"}}, "unknown signal"),
])
def test_dry_run_bad_prometheus_section_exit_2(tmp_path: Path, section: dict[str, Any], needle: str) -> None:
    res = invoke("dry-run", "--config", str(fleet_file(tmp_path, section)), "--prometheus-url", unreachable(),
                 "--once")
    assert_one_line_error(res, 2, needle)


def test_dry_run_metrics_port_in_use_names_the_address(fake: Callable[[Answer], FakeProm]) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        address = f"127.0.0.1:{busy.getsockname()[1]}"
        res = invoke("dry-run", "--prometheus-url", fake(empty).url, "--once", "--serve-metrics", address)
    line = assert_one_line_error(res, 2)
    assert line == f"error: --serve-metrics {address}: Address already in use", line


def test_dry_run_without_any_url_exit_2() -> None:
    assert_one_line_error(invoke("dry-run", "--once"), 2, "no Prometheus URL")


@pytest.mark.parametrize(("answer", "needle"), [
    (None, "connection failed"),
    (lambda path, q: (200, b"<html>not prometheus</html>"), "malformed response"),
    (lambda path, q: (500, b'{"status":"error","errorType":"internal","error":"boom"}'), "HTTP 500"),
])
def test_dry_run_unusable_prometheus_exit_1(answer: Answer | None, needle: str,
                                            fake: Callable[[Answer], FakeProm]) -> None:
    url = unreachable() if answer is None else fake(answer).url
    assert_one_line_error(invoke("dry-run", "--prometheus-url", url, "--once"), 1, "cannot query Prometheus", needle)


@pytest.mark.parametrize(("answer", "problem"), [
    (failing(500, b'{"status":"error","errorType":"internal","error":"boom"}'), "HTTP 500"),
    (failing(503, b"overloaded"), "HTTP 503"),
    (failing(200, b"{not json"), "malformed response"),
    (failing(200, vector("1"), delay_s=1.5), "timed out"),
])
@pytest.mark.slow
def test_dry_run_failed_queries_are_unknown_and_hold(tmp_path: Path, answer: Answer, problem: str,
                                                      fake: Callable[[Answer], FakeProm]) -> None:
    cfg = fleet_file(tmp_path, {"timeout_s": 0.5})
    res = invoke("dry-run", "--config", str(cfg), "--prometheus-url", fake(answer).url, "--once", "--output", "json")
    assert_queries_failed(res, 1, 1)
    st = ticks_json(res)[0]["services"][SERVICE]
    assert st["decision"]["hold"] is True and "metric queries failed" in st["decision"]["reason"]
    assert st["errors"] and all(problem in e for e in st["errors"]), st["errors"]
    assert all(v is None for v in st["signals"].values())
    for var in st["variants"].values():
        assert var["desired_replicas"] == var["current_replicas"]


@pytest.mark.parametrize("output", ["table", "json"])
def test_dry_run_once_matching_no_series_exits_1_naming_the_selectors(output: str,
                                                                      fake: Callable[[Answer], FakeProm]) -> None:
    res = invoke("dry-run", "--prometheus-url", fake(empty).url, "--once", "-o", output)
    assert res.exit_code == 1
    line = res.stderr.splitlines()[-1]
    assert line.startswith("error: --once: no series matched the fleet's selectors in this Prometheus: ")
    for v in VARIANTS:  # each variant's selectors, as the fleet file makes them
        assert (f'{SERVICE}/{v}: no series match the selectors (pods: model_name="meta-llama/Llama-3.1-8B-Instruct",'
                f'namespace="default",pod=~"{SERVICE.replace(".", chr(92) * 2 + ".")}-{v}-.*"; deployment: '
                f'namespace="default",deployment="{SERVICE}-{v}")') in line


def test_dry_run_once_matching_some_series_exits_0(fake: Callable[[Answer], FakeProm]) -> None:
    # kube-state-metrics counts the replicas: something matched, the tick stands
    def ksm_only(path: str, promql: str) -> tuple[int, bytes]:
        return (200, vector("2")) if "kube_deployment" in promql else empty(path, promql)

    res = invoke("dry-run", "--prometheus-url", fake(ksm_only).url, "--once", "-o", "json")
    assert res.exit_code == 0, res.stderr


def test_dry_run_empty_prometheus_holds_with_warnings(fake: Callable[[Answer], FakeProm]) -> None:
    res = invoke("dry-run", "--prometheus-url", fake(empty).url, "--ticks", "2", "--interval", "0.05",
                 "--output", "json")
    assert res.exit_code == 0, res.stderr
    ticks = ticks_json(res)
    assert len(ticks) == 2
    for tick in ticks:
        st = tick["services"][SERVICE]
        assert st["errors"] == [] and st["decision"]["hold"] is True
        assert all(v is None for v in st["signals"].values())
        assert any("no series match the selectors" in w for w in st["warnings"])
        for var in st["variants"].values():  # no Deployment series and no pod: unknown, never 0
            assert var["current_replicas"] is None and var["desired_replicas"] is None


# ============================================================================= backtest: bugs
@pytest.mark.parametrize(("args", "option"), [
    (["--start", "nan", "--end", "600"], "--start"), (["--start", "inf", "--end", "600"], "--start"),
    (["--start", "0", "--end", "-inf"], "--end"), (["--start", "0", "--end", "600", "--step", "inf"], "--step"),
    (["--start", "0", "--end", "600", "--step", "nan"], "--step"),
])
def test_non_finite_times_and_steps_are_one_line_errors(tmp_path: Path, args: list[str], option: str,
                                                            fake: Callable[[Answer], FakeProm]) -> None:
    # NaN and infinity are one-line errors naming the option.
    res = invoke("backtest", "--prometheus-url", fake(empty).url, "--out", str(tmp_path / "out"), *args)
    assert_one_line_error(res, 2, option)


@pytest.mark.parametrize("args", [["--start", "100", "--end", "50"], ["--start", "0", "--end", "60", "--step", "0"],
                                  ["--start", "0", "--end", "31536000", "--step", "15"]])
def test_backtest_range_errors_do_not_need_prometheus(tmp_path: Path, args: list[str]) -> None:
    # The range is checked before connecting, so an unreachable URL cannot hide a bad range.
    res = invoke("backtest", "--prometheus-url", unreachable(), "--out", str(tmp_path / "out"), *args)
    assert_one_line_error(res, 2)


def test_backtest_time_beyond_calendar_is_rejected(tmp_path: Path, fake: Callable[[Answer], FakeProm]) -> None:
    # 1e15 s is past year 9999 (milliseconds passed as seconds): refused, not run as failing queries.
    res = invoke("backtest", "--prometheus-url", fake(empty).url, "--start", "1e15", "--end", "1000000000000060",
                 "--out", str(tmp_path / "out"))
    assert_one_line_error(res, 2, "--start")


def test_backtest_out_is_a_file_names_the_option(tmp_path: Path, fake: Callable[[Answer], FakeProm]) -> None:
    # A bad --out is named, before any range query.
    (tmp_path / "afile").write_text("x")
    res = invoke("backtest", "--prometheus-url", fake(empty).url, "--start", "0", "--end", "60",
                 "--out", str(tmp_path / "afile"))
    assert_one_line_error(res, 2, "--out")


# ============================================================================= backtest: ranges
@pytest.mark.parametrize(("args", "needle"), [
    (["--start", "100", "--end", "50"], "--end must be after --start"),
    (["--start", "100", "--end", "100"], "--end must be after --start"),
    (["--start", "yesterday", "--end", "50"], "neither unix seconds nor an ISO 8601 time"),
    (["--start", "", "--end", "50"], "neither unix seconds nor an ISO 8601 time"),
    (["--start", "0", "--end", "600", "--step", "0"], "--step must be a whole number"),
    (["--start", "0", "--end", "600", "--step", "-5"], "--step must be a whole number"),
    (["--start", "0", "--end", "600", "--step", "0.5"], "--step must be a whole number"),
    (["--start", "0", "--end", "31536000", "--step", "15"], "exceed Prometheus's 11000 points"),
])
def test_backtest_bad_ranges_exit_2(tmp_path: Path, args: list[str], needle: str,
                                    fake: Callable[[Answer], FakeProm]) -> None:
    res = invoke("backtest", "--prometheus-url", fake(empty).url, "--out", str(tmp_path / "out"), *args)
    assert_one_line_error(res, 2, needle)


def test_backtest_iso_with_offset_and_no_data_holds(tmp_path: Path, fake: Callable[[Answer], FakeProm]) -> None:
    res = invoke("backtest", "--prometheus-url", fake(empty).url, "--start", "2025-01-01T02:00:00+02:00",
                 "--end", "2025-01-01T00:01:00Z", "-o", "json", "--out", str(tmp_path / "out"))
    assert res.exit_code == 0, res.stderr
    assert "warning: 5 of 5 ticks: " in res.stderr and "no series match the selectors" in res.stderr
    summary = json.loads(res.stdout)
    assert summary["ticks"] == 5  # 0, 15, ..., 60 s at the default 15 s tick
    assert summary["holds"] == 5 and summary["scale_changes"] == 0 and summary["query_failures"] == 0


def test_backtest_failed_range_queries_hold_and_exit_1(tmp_path: Path, fake: Callable[[Answer], FakeProm]) -> None:
    # The loop holds on every tick and the outputs are written, but a range whose queries failed did
    # not show what the loop would do: exit 1 with one line, as dry-run's bounded runs do.
    prom = fake(failing(500, b'{"status":"error","errorType":"internal","error":"boom"}'))
    res = invoke("backtest", "--prometheus-url", prom.url, "--start", "0", "--end", "30", "-o", "json",
                 "--out", str(tmp_path / "out"))
    assert res.exit_code == 1, res.stderr
    summary = json.loads(res.stdout)
    assert summary["holds"] == summary["ticks"] == 3
    assert summary["scale_changes"] == 0 and summary["query_failures"] > 0
    assert "error: queries failed on 3 of 3 tick(s); the loop held there" in res.stderr
    assert (tmp_path / "out" / "timeline.csv").is_file()


@pytest.mark.parametrize(("command", "speed"), [("backtest", "1e308"), ("backtest", "1e-300"), ("dry-run", "1e308"),
                                                ("dry-run", "1e-300")])
def test_a_speed_that_leaves_no_window_is_a_one_line_error(tmp_path: Path, command: str, speed: str) -> None:
    # The 300-s window at 1e308x is 3e-306 wall seconds, below PromQL's 1 ms; at 1e-300x it is 3e302 s,
    # past any retention: refused before connecting.
    args = ["--start", "0", "--end", "600", "--out", str(tmp_path / "out")] if command == "backtest" else ["--once"]
    res = invoke(command, "--prometheus-url", unreachable(), "--speed", speed, *args)
    assert_one_line_error(res, 2, f"--speed {float(speed):g} makes the 300-s signal window")


# ============================================================================= a real, empty Prometheus
def test_real_empty_prometheus_dry_run_and_backtest_hold(tmp_path: Path) -> None:
    with PromServer(tmp_path / "prom") as prom:
        res = invoke("dry-run", "--prometheus-url", prom.url, "--once", "--output", "json")
        assert res.exit_code == 1, res.stderr  # nothing matched: every count unknown (below)
        st = ticks_json(res)[0]["services"][SERVICE]
        assert st["errors"] == [] and st["decision"]["hold"] is True
        assert all(v is None for v in st["signals"].values())
        assert all(v["desired_replicas"] is None and v["current_replicas"] is None for v in st["variants"].values())
        table = invoke("dry-run", "--prometheus-url", prom.url, "--once")
        assert "? (?+?)" in table.stdout  # the table says unknown too
        assert table.exit_code == 1 and "no series matched the fleet's selectors" in table.stderr
        now = int(time.time())
        res = invoke("backtest", "--prometheus-url", prom.url, "--start", str(now - 600), "--end", str(now),
                     "-o", "json", "--out", str(tmp_path / "out"))
        assert res.exit_code == 0, res.stderr
        summary = json.loads(res.stdout)
        assert summary["ticks"] == 41 and summary["holds"] == 41
        assert summary["scale_changes"] == 0 and summary["query_failures"] == 0


def default_sigint() -> None:
    """In the child, before exec: SIGINT back to its default, so Python turns it into KeyboardInterrupt
    (a shell running the tests in the background starts them with SIGINT ignored, and children inherit it)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def test_a_port_taken_before_prometheus_binds_it_is_given_up_for_another(tmp_path: Path) -> None:
    # Another process takes the port between free_port and Prometheus's bind (a busy CI machine):
    # the server starts on a new port instead of failing with "address already in use".
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        prom = PromServer(tmp_path / "prom")
        prom.port = taken.getsockname()[1]
        with prom:
            assert prom.port != taken.getsockname()[1]
            with urllib.request.urlopen(f"{prom.url}/-/ready", timeout=5) as r:
                assert r.status == 200
