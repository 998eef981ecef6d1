"""The controller's own ``autoscaler_*`` metrics, served over HTTP and parsed back."""

from __future__ import annotations

import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families
from support.fleets import FLEET_DOC, ramp

from autoscaler.config.loading import parse_config
from autoscaler.loop.export import LoopMetrics, parse_address, serve
from autoscaler.loop.runner import ControlLoop
from autoscaler.realtime import LiveSimulation
from autoscaler.state import SIGNALS, ServiceObservation, Signals, VariantObservation
from controllers.base import Reason
from controllers.registry import build

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def scrape(metrics: LoopMetrics) -> tuple[str, Samples]:
    server = serve(metrics.registry, "127.0.0.1:0")
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{server.port}/metrics", timeout=5) as r:
            text = r.read().decode()
    finally:
        server.close()
    return text, {(s.name, tuple(sorted(s.labels.items()))): s.value
                  for fam in text_string_to_metric_families(text) for s in fam.samples}


def test_loop_metrics_of_a_simulated_run() -> None:
    live = LiveSimulation(parse_config(FLEET_DOC, "<test>"), ramp(), steady_start=False)
    live.run()
    text, s = scrape(live.metrics)
    ticks = [rec.services["llm"] for rec in live.ticks]
    last = ticks[-1]
    for v in ("h100", "a100"):
        key = (("service", "llm"), ("variant", v))
        assert s[("autoscaler_desired_replicas", key)] == last.applied[v]
        assert s[("autoscaler_current_replicas", key)] == last.estimate.variants[v].current
    counts = {r.value: s.get(("autoscaler_decisions_total", (("reason", r.value), ("service", "llm"))), 0.0)
              for r in Reason}
    assert sum(counts.values()) == len(ticks)
    # every reason a decision can be counted under is there from the start, 0 when it never happened
    assert {dict(k[1])["reason"] for k in s if k[0] == "autoscaler_decisions_total"} == {
        "scale_up", "scale_down", "no_change", "signal_unknown", "warming_up", "metrics_error", "counts_unknown",
        "idle_to_min", "scale_from_zero"}
    holds = [st.decision.code for st in ticks if st.decision.hold]
    assert counts["warming_up"] == holds.count(Reason.WARMING_UP) > 0  # the first window
    assert counts["warming_up"] + counts["signal_unknown"] == len(holds)
    ups = sum(any(n > st.estimate.current[v] for v, n in st.applied.items()) for st in ticks if not st.decision.hold)
    assert counts["scale_up"] == ups > 0
    assert counts["metrics_error"] == 0
    assert s[("autoscaler_metric_query_failures_total", (("service", "llm"),))] == 0
    assert s[("autoscaler_loop_duration_seconds_count", ())] == len(ticks)
    assert s[("autoscaler_loop_duration_seconds_bucket", (("le", "+Inf"),))] == len(ticks)
    pid = live.cfg.controller.pid
    sig = (("service", "llm"), ("signal", pid.setpoint_signal))
    if "setpoint" in last.decision.terms:
        assert s[("autoscaler_setpoint", sig)] == pid.setpoint
        assert s[("autoscaler_measured", sig)] == last.decision.terms["measurement"]
        assert s[("autoscaler_controller_term", (("controller", "pid"), ("service", "llm"), ("term", "p")))] == \
            last.decision.terms["p"]
    else:
        assert ("autoscaler_setpoint", sig) not in s
    for name, x in last.estimate.signals.flat().items():
        key = ("autoscaler_signal", (("service", "llm"), ("signal", name)))
        assert (key in s) == (x is not None)  # unknown is absent, never 0
        if x is not None:
            assert s[key] == pytest.approx(x)
    assert "# TYPE autoscaler_admission_threshold gauge" in text  # declared; the PID sets no thresholds
    assert not any(k[0] == "autoscaler_admission_threshold" for k in s)
    limits = {}
    for st in ticks:
        for limit in st.limits:
            limits[limit.value] = limits.get(limit.value, 0) + 1
    assert {k[1][0][1]: v for k, v in s.items() if k[0] == "autoscaler_guard_limits_total"} == limits
    # the simulator applies every write: every (target, result) series is there, at 0
    errors = {(dict(k[1])["target"], dict(k[1])["result"]): v for k, v in s.items()
              if k[0] == "autoscaler_actuation_errors_total"}
    assert errors == {(t, r): 0.0 for t in ("h100", "a100", "admission", "uncordon")  # the simulator drains
                      for r in ("conflict", "not_leader", "forbidden", "unreachable", "invalid", "error")}
    for v in live.cfg.services[0].variants:  # GPUs x $/GPU-hour from the fleet file
        key = ("autoscaler_replica_price_usd_per_hour", (("service", "llm"), ("variant", v.name)))
        assert s[key] == v.gpus_per_replica * v.price_per_gpu_hour
    assert s[("autoscaler_able_to_scale", (("service", "llm"), ("variant", "h100")))] == 1.0
    assert not any(k[0].startswith("autoscaler_mpc_") for k in s)  # the PID plans nothing ahead


def test_mpc_plan_is_exported() -> None:
    live = LiveSimulation(parse_config(FLEET_DOC, "<test>"), ramp(), "mpc", steady_start=False)
    live.run()
    _, s = scrape(live.metrics)
    last = live.ticks[-1].services["llm"]
    assert last.decision.plan, last.reason
    for v, steps in last.decision.plan.items():
        for k in (1, 2, 3):
            key = (("service", "llm"), ("step", str(k)), ("variant", v))
            assert s[("autoscaler_mpc_planned_replicas", key)] == steps[k - 1]
        assert ("autoscaler_mpc_planned_replicas", (("service", "llm"), ("step", "4"), ("variant", v))) not in s
    assert s[("autoscaler_mpc_demand_rps", (("service", "llm"),))] == pytest.approx(last.decision.terms["demand_rps"])
    assert s[("autoscaler_mpc_solve_seconds", (("service", "llm"),))] == pytest.approx(
        last.decision.terms["solve_ms"] / 1000)


def test_failures_and_unknown_signals_are_exported_as_such(make_fleet) -> None:
    cfg = make_fleet(2, min_replicas=1, max_replicas=4)

    class Failing:
        def observe(self, now: float) -> dict[str, ServiceObservation]:
            sig: dict[str, float | None] = dict.fromkeys(SIGNALS)
            return {"svc": ServiceObservation("svc", now, Signals.of(sig), {"h100": VariantObservation(2, 0)},
                                              ["svc running: HTTP 503", "svc kv_usage: HTTP 503"])}

    loop = ControlLoop(cfg, Failing(), None, build("pid", cfg))
    loop.start(-cfg.controller.window_s)
    metrics = LoopMetrics(loop)
    for t in (0.0, 15.0, 30.0):
        metrics.record(loop.tick(t), 0.002)
    _, s = scrape(metrics)
    assert s[("autoscaler_metric_query_failures_total", (("service", "svc"),))] == 6  # 2 per tick
    assert s[("autoscaler_decisions_total", (("reason", "metrics_error"), ("service", "svc")))] == 3
    assert not any(k[0] == "autoscaler_signal" for k in s)
    assert not any(k[0] == "autoscaler_measured" for k in s)
    assert s[("autoscaler_desired_replicas", (("service", "svc"), ("variant", "h100")))] == 2
    assert s[("autoscaler_loop_duration_seconds_bucket", (("le", "0.005"),))] == 3  # 2 ms each


@pytest.mark.parametrize("bad", ["9090", "host:", ":80", "host:99999", "host:http"])
def test_parse_address_rejects_bad_addresses(bad: str) -> None:
    with pytest.raises(ValueError, match="HOST:PORT"):
        parse_address(bad)


def test_parse_address() -> None:
    assert parse_address("127.0.0.1:9100") == ("127.0.0.1", 9100)
    assert parse_address("[::1]:0") == ("::1", 0)


def _status(url: str, method: str = "GET") -> int:
    import urllib.error

    try:
        with urllib.request.urlopen(urllib.request.Request(url, method=method), timeout=5) as r:
            return int(r.status)
    except urllib.error.HTTPError as err:
        return int(err.code)


def _answered(url: str) -> int:
    """``_status``, or 0 for a connection closed unanswered: a server thread that closed its socket
    frees its slot a moment later (``process_request_thread``'s ``finally``), so a request in between
    finds no slot and is closed, as the extra one above is."""
    import http.client
    import urllib.error

    try:
        return _status(url)
    except (urllib.error.URLError, http.client.RemoteDisconnected, ConnectionError):
        return 0


def test_unknown_paths_and_methods_are_refused() -> None:
    """A probe with a typo fails (404), a write to a read-only endpoint is 405 (issue 31, item 8)."""
    from prometheus_client import CollectorRegistry

    server = serve(CollectorRegistry(), "127.0.0.1:0", {"/healthz": lambda: b"ok"})
    base = f"http://127.0.0.1:{server.port}"
    try:
        assert _status(base + "/metrics") == 200 and _status(base + "/healthz") == 200
        assert _status(base + "/metrics", "HEAD") == 200
        assert _status(base + "/healthzz") == 404 and _status(base + "/") == 404
        assert _status(base + "/healthz", "POST") == 405 and _status(base + "/metrics", "DELETE") == 405
    finally:
        server.close()


def test_silent_connections_are_bounded_and_timed_out() -> None:
    """At most ``max_connections`` at once (one more is closed at once), and a silent one is closed
    by the server after ``idle_timeout_s``: 50 idle sockets cannot hold 50 threads. No upper bound on
    time is asserted (a busy machine only delays): the client's own timeout raises rather than
    returning b"", so an empty read shows the server closed it, and a timer never fires early."""
    import socket
    import time

    from prometheus_client import CollectorRegistry

    idle_timeout_s, client_timeout_s = 1.0, 30.0
    server = serve(CollectorRegistry(), "127.0.0.1:0", idle_timeout_s=idle_timeout_s, max_connections=2)
    try:
        t0 = time.monotonic()
        held = [socket.create_connection(("127.0.0.1", server.port), timeout=client_timeout_s) for _ in range(2)]
        time.sleep(0.2)  # both accepted and waiting for a request
        extra = socket.create_connection(("127.0.0.1", server.port), timeout=client_timeout_s)
        assert extra.recv(1) == b""  # closed without an answer: no slot
        extra.close()
        assert held[0].recv(1) == b"" and held[1].recv(1) == b""  # closed by the server, not timed out here ...
        assert time.monotonic() - t0 >= idle_timeout_s  # ... and not before its idle timeout
        for s in held:
            s.close()
        deadline = time.monotonic() + client_timeout_s  # a bound on a failure (slots never freed), not a timing
        while _answered(f"http://127.0.0.1:{server.port}/metrics") != 200:  # the slots come back
            assert time.monotonic() < deadline
            time.sleep(0.1)
    finally:
        server.close()


def test_pool_replicas_are_exported_per_role() -> None:
    # A service of a prefill pool (1 replica) and a decode pool (2) under the PID, which scales both: the
    # pool gauges carry llm-d's role label and equal the last tick's counts and what the loop applied.
    pool = {"gpu": "H100-SXM", "price_per_gpu_hour": 2.0, "min_replicas": 1, "max_replicas": 4,
            "kv_cache_tokens": 400_000, "profile": "llama-3-8b/h100-sxm"}
    doc = {"services": [{"name": "pd", "model": "m", "slo": FLEET_DOC["services"][0]["slo"], "variants": [],
                         "roles": {"prefill": [{**pool, "name": "pre", "initial_replicas": 1}],
                                   "decode": [{**pool, "name": "dec", "initial_replicas": 2}]}}]}
    live = LiveSimulation(parse_config(doc, "<pd>"), ramp(), "pid", steady_start=False)
    live.run()
    _, s = scrape(live.metrics)
    last = live.ticks[-1].services["pd"]
    for role, v in (("prefill", "pre"), ("decode", "dec")):
        key = (("llm_d_ai_role", role), ("service", "pd"), ("variant", v))
        obs = last.estimate.pools[role].variants[v]
        assert s[("autoscaler_pool_ready_replicas", key)] == obs.ready
        assert s[("autoscaler_pool_current_replicas", key)] == obs.current
        assert s[("autoscaler_pool_desired_replicas", key)] == last.pool_applied.get(v, obs.current)
    assert not any(k[0] == "autoscaler_ready_replicas" for k in s)  # no aggregated variant


def test_a_pool_variants_failed_writes_are_exported() -> None:
    # examples/fleet-pd.yaml: one service with prefill and decode pools. Three conflicts counted for a
    # prefill variant's writes (as ``ControlLoop._write`` counts them, by the variant's name) must reach
    # /metrics under that target; every pool variant's series is there from the start, at 0.
    from support.paths import ROOT

    from autoscaler.config.loading import load_config
    from autoscaler.loop.actuate import ActuationStatus

    cfg = load_config(ROOT / "examples" / "fleet-pd.yaml")
    svc = cfg.services[0]
    pools = [v.name for _, v in svc.role_variants()]
    assert len(pools) >= 2
    loop = ControlLoop(cfg, None, None, build("pid", cfg))  # type: ignore[arg-type]  # exported, never ticked
    loop.actuation_errors[(svc.name, pools[0], ActuationStatus.CONFLICT)] = 3
    _, s = scrape(LoopMetrics(loop))
    errors = {(dict(k[1])["target"], dict(k[1])["result"]): v for k, v in s.items()
              if k[0] == "autoscaler_actuation_errors_total"}
    assert errors[(pools[0], "conflict")] == 3
    assert all(errors[(p, "conflict")] == 0 for p in pools[1:])
