"""``autoscaler run`` (autoscaler.daemon) in a closed loop over real HTTP: two daemons with the real
``kubernetes`` client against the emulated API server (tests/kubeapi.py), a simulated fleet that
follows the emulated Deployments' ``spec.replicas`` (as a ReplicaSet controller would), served to a
real Prometheus that both daemons read. The leader scales the fleet through a surge; it is killed
mid-surge (no release) and the follower takes over within the lease; only one ever writes."""

from __future__ import annotations

import copy
import json
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from unittest.mock import ANY

import pytest
import yaml
from kubernetes import client
from support.fleets import FLEET_DOC, ramp
from support.kubectl import kubeconfig, kubectl

from autoscaler.adapters.prometheus import connect
from autoscaler.config import FleetConfig
from autoscaler.config.loading import parse_config
from autoscaler.daemon import Daemon, write_events
from autoscaler.faults.kubeapi import EmulatedCluster, deployment, emulated_cluster
from autoscaler.faults.live import FollowTheCluster
from autoscaler.faults.promserver import PromServer, Target
from autoscaler.loop.actuate import ActuationStatus
from autoscaler.loop.export import serve
from autoscaler.realtime import LiveSimulation
from autoscaler.wiring import build_source

pytestmark = pytest.mark.slow  # whole module: its fixtures run scaled real-time fleets or the fault suite

SPEED = 20.0
SETTLE_S = 120.0
"""The longest a step that normally takes a second may take on a loaded machine (a process starting,
a first election): a bound on a failure, not a timing the test measures (CI's two cores may be busy)."""
SCRAPE = "250ms"
NS = "default"
LEASE = {"duration_s": 3.0, "renew_s": 2.0, "retry_s": 0.5}  # wall seconds
QUIET_S = 4.0  # how long the daemon leaves a variant alone after another writer's change, wall seconds


@dataclass
class Run:
    cfg: FleetConfig
    cluster: EmulatedCluster
    daemons: dict[str, Daemon]
    killed_at: float
    took_over_at: float | None
    spec_history: list[dict[str, int]] = field(default_factory=list)
    other_writer: tuple[int, int] | None = None
    """Indices into the emulator's writes: just after another writer's edit, and ``QUIET_S`` x 0.8 later."""


def make_daemon(cfg: FleetConfig, cluster: EmulatedCluster, prom: PromServer, name: str) -> Daemon:
    source = build_source(cfg, connect(cfg.prometheus, prom.url), speed=SPEED)
    return Daemon(cfg, "pid", source, cluster.api(user_agent=f"autoscaler/{name}"), name, "127.0.0.1:0",
                  namespace_self="autoscaler", speed=SPEED)


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Run]:
    work: Path = tmp_path_factory.mktemp("daemon")
    doc = copy.deepcopy(FLEET_DOC)
    doc["kubernetes"] = {"namespace": NS, "lease": LEASE, "other_writer_quiet_s": QUIET_S}
    cfg = parse_config(doc, "<test>")
    with emulated_cluster() as cluster:
        cluster.emu.deployment_delay_s = 0.2  # the deployment controller's status writes: the everyday 409s
        apps = client.AppsV1Api(cluster.api())
        for v in cfg.services[0].variants:
            apps.create_namespaced_deployment(NS, deployment(f"llm-{v.name}", NS, v.start_replicas))
        live = LiveSimulation(cfg, ramp(), "static", steady_start=False)
        live.loop.controller = FollowTheCluster()
        history: list[dict[str, int]] = []
        kube = client.AppsV1Api(cluster.api(user_agent="replicaset-controller"))

        reported: dict[str, tuple[int, int]] = {}

        def follow(_: float) -> None:  # the ReplicaSet controller and kubelets: pods follow spec.replicas
            wanted = {v.name: int(kube.read_namespaced_deployment(f"llm-{v.name}", NS).spec.replicas)
                      for v in cfg.services[0].variants}
            history.append(wanted)
            with live.lock:
                for v, n in wanted.items():
                    live.sim.set_replicas("llm", v, n)
                counts = {v: live.sim.services["llm"].counts(v) for v in wanted}
            for v, c in counts.items():  # the Deployment's status, as its controller reports it
                if reported.get(v) != (c.current, c.ready):
                    reported[v] = (c.current, c.ready)
                    kube.patch_namespaced_deployment_status(f"llm-{v}", NS, {"status": {
                        "replicas": c.current, "readyReplicas": c.ready}})

        server = serve(live.registry, "127.0.0.1:0")
        prom = PromServer(work / "prom", [Target(f"127.0.0.1:{server.port}")], scrape_interval=SCRAPE)
        stop = threading.Event()
        sim = threading.Thread(target=live.run, kwargs={"speed": SPEED, "stop": stop, "on_step": follow})
        daemons = {n: make_daemon(cfg, cluster, prom, n) for n in ("a", "b")}
        threads = {n: threading.Thread(target=d.run, name=f"daemon-{n}") for n, d in daemons.items()}
        try:
            prom.start()
            prom.wait_for("up", lambda r: bool(r) and r[0]["value"][1] == "1")
            sim.start()
            threads["a"].start()
            deadline = time.monotonic() + SETTLE_S
            while not daemons["a"].leading and time.monotonic() < deadline:
                time.sleep(0.05)
            threads["b"].start()
            deadline = time.monotonic() + SETTLE_S
            while live.sim.now < 200 and time.monotonic() < deadline:  # into the surge (peak from 200 s)
                time.sleep(0.05)
            daemons["a"].elector.release = lambda: False  # type: ignore[method-assign]  # killed: no release
            daemons["a"].stop()
            killed_at = time.monotonic()
            took_over_at = None
            other: tuple[int, int] | None = None
            edited_at = None
            while sim.is_alive():
                now = time.monotonic()
                if took_over_at is None and daemons["b"].leading:
                    took_over_at = now
                if took_over_at is not None and edited_at is None and now - took_over_at > 3.0:
                    # someone scales the A100s by hand; the daemon must leave them alone for QUIET_S
                    n = replicas_of(cluster, "llm-a100")
                    client.AppsV1Api(cluster.api(user_agent="kubectl")).patch_namespaced_deployment(
                        "llm-a100", NS, {"spec": {"replicas": n + 2}})
                    edited_at, start = now, len(cluster.emu.writes)
                if edited_at is not None and other is None and now - edited_at > 0.8 * QUIET_S:
                    other = (start, len(cluster.emu.writes))
                time.sleep(0.05)
            daemons["b"].stop()
            for t in threads.values():
                t.join(timeout=30)
            yield Run(cfg, cluster, daemons, killed_at, took_over_at, history, other)
        finally:
            stop.set()
            for d in daemons.values():
                d.stop()
            prom.stop()
            server.close()


def replicas_of(cluster: EmulatedCluster, name: str) -> int:
    return int(client.AppsV1Api(cluster.api()).read_namespaced_deployment(name, NS).spec.replicas)


def scale_writers(run: Run) -> list[str]:
    return [w[5] for w in run.cluster.emu.writes if w[1] == "deployments/scale"]


def test_exactly_one_writer_at_a_time_and_the_follower_takes_over(run: Run) -> None:
    writers = [w for w in scale_writers(run) if w != "kubectl"]
    assert "autoscaler/a" in writers and "autoscaler/b" in writers, writers
    first_b = writers.index("autoscaler/b")
    assert set(writers[:first_b]) == {"autoscaler/a"} and set(writers[first_b:]) == {"autoscaler/b"}
    # the follower took over once the dead leader's lease ran out (never before: that is the safety),
    # and not long after (liveness: a few retries, plus slack for a loaded machine's scheduling)
    assert run.took_over_at is not None
    failover = run.took_over_at - run.killed_at
    lease = run.cfg.kubernetes.lease
    assert lease.duration_s - lease.retry_s <= failover <= lease.duration_s + 3 * lease.retry_s + 10.0, failover


def test_the_new_leader_starts_from_the_cluster_state_with_a_normal_step(run: Run) -> None:
    events = sorted(client.CoreV1Api(run.cluster.api()).list_namespaced_event(NS).items,
                    key=lambda e: e.metadata.resource_version and int(e.metadata.resource_version))
    changes = [(e.source.host, e.involved_object.name, *map(int, e.message.split(" replicas")[0].split(" -> ")))
               for e in events if e.reason in ("ScaledUp", "ScaledDown")]
    last_a = {name: after for host, name, _, after in changes if host == "a"}
    _, name, before, after = next(c for c in changes if c[0] == "b")
    initial = {f"llm-{v.name}": v.start_replicas for v in run.cfg.services[0].variants}
    # b read the cluster's state, not a reset fleet: what a left, or the hand edit (kubectl, 3 s after
    # the takeover) when b's first change came after it
    writes = run.cluster.emu.writes
    first_b = next(i for i, w in enumerate(writes) if w[1] == "deployments/scale" and w[3] == name
                   and w[5].startswith("autoscaler/b"))
    edits = [w[4]["spec"]["replicas"] for w in writes[:first_b]
             if w[1] == "deployments" and w[3] == name and w[5].startswith("kubectl") and "spec" in w[4]]
    assert before == (edits[-1] if edits else last_a.get(name, initial[name]))
    guard = run.cfg.controller.guard
    assert -guard.max_step_down <= after - before <= guard.max_step_up


def test_the_fleet_is_scaled_up_through_the_surge(run: Run) -> None:
    totals = [sum(h.values()) for h in run.spec_history]
    start = sum(v.start_replicas for v in run.cfg.services[0].variants)
    assert max(totals) > start  # the surge was met with replicas, written by the daemons
    assert {w[3] for w in run.cluster.emu.writes if w[1] == "deployments/scale"} <= {"llm-h100", "llm-a100"}


def test_another_writer_is_detected_and_left_alone(run: Run) -> None:
    assert run.other_writer is not None
    start, end = run.other_writer
    during = [w for w in run.cluster.emu.writes[start:end] if w[1] == "deployments/scale" and w[3] == "llm-a100"]
    assert not during  # no write to the edited Deployment while it is left alone
    events = client.CoreV1Api(run.cluster.api()).list_namespaced_event(NS).items
    (other,) = [e for e in events if e.reason == "OtherWriter"]
    assert other.type == "Warning" and other.involved_object.name == "llm-a100" and other.source.host == "b"
    assert "by another writer" in other.message


def test_each_change_is_an_event_and_the_lease_is_released_on_stop(run: Run) -> None:
    events = client.CoreV1Api(run.cluster.api()).list_namespaced_event(NS).items
    by = {e.source.host for e in events if e.reason in ("ScaledUp", "ScaledDown")}
    assert by == {"a", "b"}
    assert all(e.involved_object.kind == "Deployment" and " -> " in e.message for e in events
               if e.reason != "OtherWriter")
    lease = client.CoordinationV1Api(run.cluster.api()).read_namespaced_lease("autoscaler-leader", "autoscaler")
    assert not lease.spec.holder_identity  # b released it when stopped


def test_kubectl_describe_shows_the_daemons_events_on_each_deployment(run: Run, tmp_path: Path) -> None:
    """kubectl describe finds an object's Events by ``involvedObject.uid`` (and name, namespace, kind),
    so the daemon's appear there only because they carry the Deployment's uid (docs/daemon.md)."""
    config = kubeconfig(tmp_path / "kubeconfig", run.cluster.url)
    out = {}
    for name in ("llm-h100", "llm-a100"):
        proc = subprocess.run([kubectl(), "--kubeconfig", str(config), "-n", NS, "describe", "deployment", name],
                              capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, proc.stderr
        out[name] = proc.stdout.split("Events:", 1)[1]
    assert "ScaledUp" in out["llm-h100"] and "autoscaler" in out["llm-h100"]
    assert "OtherWriter" in out["llm-a100"] and "OtherWriter" not in out["llm-h100"]  # each its own Events


def test_a_follower_answers_health_and_readiness_and_never_writes(tmp_path: Path) -> None:
    doc = copy.deepcopy(FLEET_DOC)
    doc["kubernetes"] = {"namespace": NS, "lease": LEASE}
    doc["prometheus"] = {"url": "http://127.0.0.1:1"}  # nothing there: the loop would hold
    cfg = parse_config(doc, "<test>")
    with emulated_cluster() as cluster:
        client.CoordinationV1Api(cluster.api()).create_namespaced_lease("autoscaler", client.V1Lease(
            metadata={"name": "autoscaler-leader"},
            spec=client.V1LeaseSpec(holder_identity="someone-else", lease_duration_seconds=3600)))
        source = build_source(cfg, connect(cfg.prometheus, "http://127.0.0.1:1"))
        d = Daemon(cfg, "pid", source, cluster.api(user_agent="autoscaler/c"), "c", "127.0.0.1:0",
                   namespace_self="autoscaler")
        t = threading.Thread(target=d.run)
        t.start()
        try:
            deadline = time.monotonic() + SETTLE_S
            while not d.elected_once.is_set() and time.monotonic() < deadline:
                time.sleep(0.05)
            base = f"http://127.0.0.1:{d.server.port}"
            for path in ("/healthz", "/readyz"):
                with urllib.request.urlopen(base + path, timeout=5) as r:
                    assert r.status == 200
            with urllib.request.urlopen(base + "/metrics", timeout=5) as r:
                assert 'autoscaler_leader{identity="c"} 0.0' in r.read().decode()
            with pytest.raises(urllib.error.HTTPError) as err:  # a follower serves no thresholds
                urllib.request.urlopen(base + "/v1/admission", timeout=5)
            assert err.value.code == 503 and json.loads(err.value.read())["leader"] == "someone-else"
            time.sleep(1.0)
            assert not d.leading and d.loop is None
            assert not [w for w in cluster.emu.writes if w[5] == "autoscaler/c"]  # not even the Lease
        finally:
            d.stop()
            t.join(timeout=SETTLE_S)
        assert not t.is_alive()


def test_sigterm_finishes_and_releases_the_lease(tmp_path: Path) -> None:
    doc = copy.deepcopy(FLEET_DOC)
    doc["kubernetes"] = {"namespace": NS, "namespace_self": "autoscaler", "lease": LEASE}
    fleet = tmp_path / "fleet.yaml"
    fleet.write_text(yaml.safe_dump(doc))
    with emulated_cluster() as cluster:
        cmd = [str(Path(sys.executable).parent / "autoscaler"), "run", "--config", str(fleet), "--kubeconfig",
               str(kubeconfig(tmp_path / "kubeconfig", cluster.url)), "--prometheus-url", "http://127.0.0.1:1",
               "--port", "0", "--host", "127.0.0.1", "--identity", "d1", "--log-format", "json"]
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        leases = client.CoordinationV1Api(cluster.api())
        try:
            deadline = time.monotonic() + SETTLE_S
            holder = None
            while time.monotonic() < deadline and holder != "d1":
                try:
                    holder = leases.read_namespaced_lease("autoscaler-leader", "autoscaler").spec.holder_identity
                except client.ApiException:
                    holder = None
                time.sleep(0.1)
            assert holder == "d1", proc.stderr.read() if proc.poll() is not None else "no lease"
            proc.send_signal(signal.SIGTERM)
            _, err = proc.communicate(timeout=SETTLE_S)
        finally:
            if proc.poll() is None:
                proc.kill()
        assert proc.returncode == 0, err
        assert not leases.read_namespaced_lease("autoscaler-leader", "autoscaler").spec.holder_identity
        lines = [json.loads(line) for line in err.splitlines() if line.startswith("{")]
        assert any("released the lease" in r["msg"] for r in lines)
        assert all({"ts", "level", "logger", "msg"} <= set(r) for r in lines)
        assert all(datetime.fromisoformat(r["ts"]).utcoffset() is not None for r in lines)  # RFC 3339
        assert [r for r in lines if r["msg"] == "d1: shutting down"] == [
            {"ts": ANY, "level": "info", "logger": "autoscaler.daemon", "msg": "d1: shutting down", "identity": "d1",
             "signal": "SIGTERM"}]
        decisions = [r for r in lines if r["msg"].endswith(": decision")]
        assert decisions and all(isinstance(r["applied"], dict) and r["hold"] is True for r in decisions)
        # Prometheus down: one warning per tick and service (every query failed for one cause), not one per
        # query (the workloads the emulated cluster lacks are the Kubernetes adapters' own warnings)
        warnings = [r for r in lines if r["level"] == "warning"
                    and r["logger"] in ("autoscaler.loop.runner", "autoscaler.adapters.prometheus")]
        assert len(warnings) == len(decisions), warnings
        assert all(r["logger"] == "autoscaler.loop.runner" and "Connection refused" in r["cause"] for r in warnings)
        # it held while Prometheus was unreachable: no scale write at all
        assert not [w for w in cluster.emu.writes if w[1] == "deployments/scale"]


def test_a_new_leader_writes_only_while_it_leads_and_scales_nothing_down_for_a_cool_down() -> None:
    from autoscaler.daemon import LeaderOnly

    doc = copy.deepcopy(FLEET_DOC)
    doc["kubernetes"] = {"namespace": NS, "lease": LEASE}
    cfg = parse_config(doc, "<test>")
    with emulated_cluster() as cluster:
        client.AppsV1Api(cluster.api()).create_namespaced_deployment(NS, deployment("llm-a100", NS, 1))
        source = build_source(cfg, connect(cfg.prometheus, "http://127.0.0.1:1"))
        d = Daemon(cfg, "pid", source, cluster.api(), "d", "127.0.0.1:0", namespace_self="autoscaler")
        try:
            assert d.elector.try_acquire_or_renew() and d.leading
            loop = d._new_loop(now=100.0)
            assert all(g.last_scale_up_s == 100.0 for g in loop.guards.values())
            gate = loop.actuator
            assert isinstance(gate, LeaderOnly) and gate.scale("llm", "a100", 2).ok
            d.elector.last_renewed = -1e9  # its renewal is long overdue: it no longer leads
            res = gate.scale("llm", "a100", 3)
            assert res.status is ActuationStatus.NOT_LEADER and "no longer leads" in res.message
            assert client.AppsV1Api(cluster.api()).read_namespaced_deployment("llm-a100", NS).spec.replicas == 2
        finally:
            d.server.close()


def test_pending_pods_are_timed_in_the_loops_seconds_at_its_speed() -> None:
    """At 20x real time a pod's unschedulable wait (and the pending timeout) is in the loop's seconds, which
    the controllers compare with ``PENDING_GRACE_S`` and the fleet file's ``pending_timeout_s``: on plain
    wall seconds a 15-s wait would read 0.75 s."""
    from autoscaler.daemon import scaled_clock

    doc = copy.deepcopy(FLEET_DOC)
    doc["kubernetes"] = {"namespace": NS, "lease": LEASE}
    cfg = parse_config(doc, "<test>")
    with emulated_cluster() as cluster:
        source = build_source(cfg, connect(cfg.prometheus, "http://127.0.0.1:1"), speed=SPEED)
        d = Daemon(cfg, "pid", source, cluster.api(), "d", "127.0.0.1:0", namespace_self="autoscaler", speed=SPEED)
        try:
            before = time.monotonic()
            read = d.source.pods.clock()
            after = time.monotonic()
            assert SPEED * before <= read <= SPEED * after  # 20x, not the wall clock's 1x
        finally:
            d.server.close()
    with pytest.raises(ValueError, match="scaled_clock"):
        scaled_clock(0.0)


def _holder(cluster: EmulatedCluster) -> str | None:
    lease = client.CoordinationV1Api(cluster.api()).read_namespaced_lease("autoscaler-leader", "autoscaler")
    return lease.spec.holder_identity or None


def test_a_stalled_tick_gives_the_lease_up_until_it_returns() -> None:
    """Issue 31, item 3: a tick hung in a call left the election thread renewing for a loop that did
    nothing. Past ``stall_s`` (here 2 lease durations, 6 s) the Lease is released, probes say why,
    nothing is renewed while the tick hangs, and the daemon takes part again once it returns."""
    doc = copy.deepcopy(FLEET_DOC)
    doc["kubernetes"] = {"namespace": NS, "lease": LEASE}
    doc["prometheus"] = {"timeout_s": 1.0}  # its deadline (1 s) + a lease duration is below 2 durations
    cfg = parse_config(doc, "<test>")
    with emulated_cluster() as cluster:
        source = build_source(cfg, connect(cfg.prometheus, "http://127.0.0.1:1"))
        d = Daemon(cfg, "pid", source, cluster.api(user_agent="autoscaler/s"), "s", "127.0.0.1:0",
                   namespace_self="autoscaler", speed=SPEED)
        assert d.stall_s == 2 * LEASE["duration_s"]  # > 3 periods of 15 s / SPEED, > 1 s + a duration
        hang, entered = threading.Event(), threading.Event()

        def hung_tick() -> None:  # a call that does not return, as the breaking pass's GET
            if d.leading and not hang.is_set():
                entered.set()
                hang.wait(SETTLE_S)

        d.tick = hung_tick  # type: ignore[method-assign]
        t = threading.Thread(target=d.run)
        t.start()
        base = f"http://127.0.0.1:{d.server.port}"
        try:
            assert entered.wait(SETTLE_S)
            deadline = time.monotonic() + SETTLE_S
            while _holder(cluster) == "s" and time.monotonic() < deadline:
                time.sleep(0.1)
            assert _holder(cluster) is None and not d.leading
            for path in ("/healthz", "/readyz"):
                with pytest.raises(urllib.error.HTTPError) as err:
                    urllib.request.urlopen(base + path, timeout=5)
                assert err.value.code == 503
            renewals = len([w for w in cluster.emu.writes if w[1] == "leases"])
            time.sleep(5 * LEASE["retry_s"])  # five election rounds while the tick still hangs
            assert len([w for w in cluster.emu.writes if w[1] == "leases"]) == renewals
            assert _holder(cluster) is None
            hang.set()  # the call returns: the daemon is a candidate again, and leads the free Lease
            deadline = time.monotonic() + SETTLE_S
            while _holder(cluster) != "s" and time.monotonic() < deadline:
                time.sleep(0.1)
            assert _holder(cluster) == "s"
            with urllib.request.urlopen(base + "/healthz", timeout=5) as r:
                assert r.status == 200
        finally:
            hang.set()
            d.stop()
            t.join(timeout=SETTLE_S)
        assert not t.is_alive() and not d.abandoned


def test_sigterm_exits_within_the_grace_while_a_tick_hangs(tmp_path: Path) -> None:
    """Issue 31, item 3: after SIGTERM the process waited for a hung call until killed. Prometheus
    here accepts and never answers, with an hour-long timeout: the tick hangs in its first query, and
    the process still exits (status 0, Lease released) after ``stop_grace_s`` (1 s)."""
    import socket

    doc = copy.deepcopy(FLEET_DOC)
    doc["kubernetes"] = {"namespace": NS, "namespace_self": "autoscaler", "lease": LEASE, "stop_grace_s": 1.0}
    doc["prometheus"] = {"timeout_s": 3600}
    fleet = tmp_path / "fleet.yaml"
    fleet.write_text(yaml.safe_dump(doc))
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(64)  # accepts (the kernel completes the handshake) and never answers
    with emulated_cluster() as cluster:
        cmd = [str(Path(sys.executable).parent / "autoscaler"), "run", "--config", str(fleet), "--kubeconfig",
               str(kubeconfig(tmp_path / "kubeconfig", cluster.url)), "--prometheus-url",
               f"http://127.0.0.1:{silent.getsockname()[1]}", "--port", "0", "--host", "127.0.0.1",
               "--identity", "d2", "--log-format", "json"]
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            deadline = time.monotonic() + SETTLE_S
            while time.monotonic() < deadline and proc.poll() is None:
                try:
                    if _holder(cluster) == "d2":
                        break
                except client.ApiException:
                    pass
                time.sleep(0.1)
            assert _holder(cluster) == "d2", proc.stderr.read() if proc.poll() is not None else "no lease"
            silent.settimeout(SETTLE_S)
            held = silent.accept()[0]  # a query came: the tick is in progress, hung on it
            proc.send_signal(signal.SIGTERM)
            _, err = proc.communicate(timeout=SETTLE_S)  # without the grace: an hour
            held.close()
        finally:
            if proc.poll() is None:
                proc.kill()
            silent.close()
        assert proc.returncode == 0, err
        assert _holder(cluster) is None
        messages = [json.loads(line)["msg"] for line in err.splitlines() if line.startswith("{")]
        assert any("did not finish within 1 s of the stop" in m for m in messages), messages
        assert any(m.endswith("released the lease") for m in messages) and messages[-1] == "d2 stopped"


def test_the_admission_endpoint_serves_the_leaders_term_and_nothing_once_it_no_longer_leads() -> None:
    """Issue 31, item 7: a former leader served its last document indefinitely, and generations
    restarted with each daemon. The leader's document names it and starts at its term's base
    (term * 2**32); it is 503 once the daemon no longer leads, and a later term's first document is
    newer than the last of the earlier one."""
    doc = copy.deepcopy(FLEET_DOC)
    doc["kubernetes"] = {"namespace": NS, "lease": LEASE}
    cfg = parse_config(doc, "<test>")
    with emulated_cluster() as cluster:
        source = build_source(cfg, connect(cfg.prometheus, "http://127.0.0.1:1"))
        d = Daemon(cfg, "pid", source, cluster.api(), "d", "127.0.0.1:0", namespace_self="autoscaler")
        url = f"http://127.0.0.1:{d.server.port}/v1/admission"
        try:
            assert d.elector.try_acquire_or_renew() and d.elector.term == 0
            loop = d._new_loop(now=0.0)
            assert loop.admission is not None and loop.admission.publish("llm", {"sheddable": 2.0}).ok
            with urllib.request.urlopen(url, timeout=5) as r:
                served = json.loads(r.read())
            assert (served["leader"], served["generation"]) == ("d", 1)
            cm = client.CoreV1Api(cluster.api()).read_namespaced_config_map("autoscaler-admission-llm", NS)
            assert json.loads(cm.data["thresholds.json"])["generation"] == 1  # the ConfigMap agrees
            d.elector.last_renewed = -1e9  # its renewal is long overdue: it no longer leads
            with pytest.raises(urllib.error.HTTPError) as err:
                urllib.request.urlopen(url, timeout=5)
            assert err.value.code == 503
            assert d.elector.release()  # the Lease is free; the daemon takes it again, a new term
            assert d.elector.try_acquire_or_renew() and d.elector.term == 1
            with pytest.raises(urllib.error.HTTPError):  # leading, but its new term's document is not begun
                urllib.request.urlopen(url, timeout=5)
            d._new_loop(now=0.0)
            with urllib.request.urlopen(url, timeout=5) as r:
                served = json.loads(r.read())
            assert served["generation"] == 2**32 and served["services"] == {}  # newer than generation 1
        finally:
            d.server.close()


def test_admission_on_its_own_port_leaves_the_metrics_port_to_scrapers_and_probes() -> None:
    """Issue 31, item 8: ``--admission-port`` serves /v1/admission alone; the main port keeps the
    metrics and probes and no longer serves the document."""
    cfg = parse_config(copy.deepcopy(FLEET_DOC), "<test>")
    with emulated_cluster() as cluster:
        source = build_source(cfg, connect(cfg.prometheus, "http://127.0.0.1:1"))
        d = Daemon(cfg, "pid", source, cluster.api(), "d", "127.0.0.1:0", dry_run=True,
                   admission_address="127.0.0.1:0")
        try:
            assert d.admission_server is not None and d.admission_server.port != d.server.port
            main, adm = (f"http://127.0.0.1:{s.port}" for s in (d.server, d.admission_server))
            d._new_loop(now=0.0)
            with urllib.request.urlopen(adm + "/v1/admission", timeout=5) as r:
                assert json.loads(r.read())["kind"] == "AdmissionThresholds"
            with urllib.request.urlopen(main + "/metrics", timeout=5) as r:
                assert "autoscaler_leader" in r.read().decode()
            for url in (main + "/v1/admission", adm + "/metrics", adm + "/healthz"):
                with pytest.raises(urllib.error.HTTPError) as err:
                    urllib.request.urlopen(url, timeout=5)
                assert err.value.code == 404, url
        finally:
            d.server.close()
            if d.admission_server is not None:
                d.admission_server.close()


@pytest.mark.parametrize("controller", ["pid", "mpc"])
def test_a_shard_without_services_ticks_with_the_others(controller: str) -> None:
    """The name hash can leave a shard empty (10 services on 10 shards do); the daemon leading it
    built that shard's controller for no service and every tick failed (IndexError), its other
    shards' included. Here the only service is pinned to shard 0 of 2 and one daemon leads both."""
    doc = copy.deepcopy(FLEET_DOC)
    name = doc["services"][0]["name"]
    doc["kubernetes"] = {"namespace": NS, "lease": LEASE, "shards": 2, "service_shards": {name: 0}}
    cfg = parse_config(doc, "<test>")
    with emulated_cluster() as cluster:
        source = build_source(cfg, connect(cfg.prometheus, "http://127.0.0.1:1"))
        d = Daemon(cfg, controller, source, cluster.api(), "d", "127.0.0.1:0", namespace_self="autoscaler")
        try:
            assert [e.try_acquire_or_renew() for e in d.shards.electors] == [True, True]
            assert d.shards.led() == [0, 1]
            rec = d.tick()
            assert rec is not None and sorted(d.loops) == [0, 1]
            assert list(rec.services) == [name]  # shard 0's service decided (held: nothing to read there)
            assert d.loops[1].cfg.services == []
        finally:
            d.server.close()


def test_events_of_different_workloads_are_written_together_each_workloads_in_order(caplog) -> None:
    """Issue 35: a tick that scaled 100 services wrote its 100 Events one after another. Three
    workloads' jobs meet at a barrier of three (sequential writes would never all arrive: the barrier
    breaks after 30 s), each job's calls keep their order, and a call that raises is logged while the
    rest still run."""
    barrier = threading.Barrier(3, timeout=30)
    done: list[tuple[str, int]] = []
    lock = threading.Lock()

    def call(name: str, i: int, meet: bool = False, fail: bool = False):  # type: ignore[no-untyped-def]
        def run() -> None:
            if meet:
                barrier.wait()
            if fail:
                raise RuntimeError(f"{name} broke")
            with lock:
                done.append((name, i))
        return run

    jobs = [[call(w, 0, meet=True), call(w, 1)] for w in ("a", "b", "c")]
    jobs.append([call("d", 0, fail=True), call("d", 1)])
    write_events(jobs, workers=3)
    assert not barrier.broken
    assert sorted(done) == [(w, i) for w in "abcd" for i in (0, 1) if (w, i) != ("d", 0)]
    for w in "abc":
        assert done.index((w, 0)) < done.index((w, 1))
    assert any("event not written" in r.getMessage() and r.exc_info for r in caplog.records)
    done.clear()
    write_events([[call("x", 0), call("x", 1)], [call("y", 0)]], workers=1)  # one at a time: in order
    assert done == [("x", 0), ("x", 1), ("y", 0)]


def test_a_ticks_events_are_written_for_each_changed_workload_only_while_the_daemon_leads() -> None:
    """Issue 35: the Events now go through ``write_events``; the rule before them is unchanged: one
    Event per changed count (and one per other writer's change), none for a write that changed nothing,
    and none at all once the daemon no longer leads the service's shard."""
    from types import SimpleNamespace

    from autoscaler.loop.actuate import ActuationResult, ActuationStatus, ExternalChange
    from autoscaler.loop.runner import TickRecord

    doc = copy.deepcopy(FLEET_DOC)
    doc["kubernetes"] = {"namespace": NS, "lease": LEASE}
    cfg = parse_config(doc, "<test>")
    with emulated_cluster() as cluster:
        source = build_source(cfg, connect(cfg.prometheus, "http://127.0.0.1:1"))
        d = Daemon(cfg, "pid", source, cluster.api(), "d", "127.0.0.1:0", namespace_self="autoscaler")
        calls: list[tuple[str, ...]] = []
        lock = threading.Lock()

        class Events:
            def result(self, name: str, v: str, res: ActuationResult, reason: str) -> int:
                with lock:
                    calls.append(("result", name, v, reason))
                return 1

            def other_writer(self, name: str, v: str, ours: int, theirs: int, quiet_s: float) -> bool:
                with lock:
                    calls.append(("other", name, v))
                return True

        d.events = Events()  # type: ignore[assignment]
        record = TickRecord(0.0)
        record.services["llm"] = SimpleNamespace(reason="up", actuation={  # type: ignore[assignment]
            "h100": ActuationResult(ActuationStatus.APPLIED, before=0, after=2),
            "a100": ActuationResult(ActuationStatus.APPLIED, before=1, after=1)})  # no change: no Event
        found = {("llm", "a100"): ExternalChange(1, 3, 600.0)}
        try:
            assert d.elector.try_acquire_or_renew()
            d._record(found, record)
            assert sorted(calls) == [("other", "llm", "a100"), ("result", "llm", "h100", "up")]
            calls.clear()
            d.elector.last_renewed = -1e9  # its renewal long overdue: it no longer leads
            d._record(found, record)
            assert calls == []
        finally:
            d.server.close()
