"""The API server's faults as they come in production (autoscaler.faults.kubeapi: ``close_port``,
``slow``, ``throttled``, ``conflicts_left``) against the daemon's actuator with the client as
``autoscaler run`` configures it (``connect``: no client retries, a deadline per call): none of them
scales anything down, crashes or is mistaken for another writer; a 429's ``Retry-After`` is waited out."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes import client
from support.kubectl import kubeconfig

from autoscaler.adapters.kubernetes import KubernetesActuator, connect
from autoscaler.config.loading import parse_config
from autoscaler.faults.kubeapi import EmulatedCluster, deployment, emulated_cluster
from autoscaler.loop.actuate import ActuationStatus

NS = "llm"
DEADLINE_S = 0.5
SETTLE_S = 60.0
"""A bound on a failure (CI's two cores may be busy), never a timing the tests measure."""


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


@pytest.fixture
def cluster() -> Iterator[EmulatedCluster]:
    with emulated_cluster() as c:
        client.AppsV1Api(c.api()).create_namespaced_deployment(NS, deployment("svc-h100", NS, 4))
        yield c


@pytest.fixture
def fleet(make_fleet):
    doc = make_fleet(2, min_replicas=0, max_replicas=8).model_dump(mode="json", exclude_unset=True)
    return parse_config({**doc, "kubernetes": {"namespace": NS, "conflict_retries": 2,
                                               "other_writer_quiet_s": 600}}, "<test>")


def actuator(cluster: EmulatedCluster, fleet, tmp_path: Path, clock: Clock | None = None) -> KubernetesActuator:
    """The daemon's actuator on a client made as ``autoscaler run`` makes it (User-Agent ``daemon``)."""
    api = connect(kubeconfig(tmp_path / "kubeconfig", cluster.url), timeout_s=DEADLINE_S)
    api.user_agent = "daemon"
    return KubernetesActuator(fleet.kubernetes, fleet.services, api, sleep=lambda _: None,
                              clock=clock or Clock())


def replicas(c: EmulatedCluster) -> int:
    return int(client.AppsV1Api(c.api()).read_namespaced_deployment("svc-h100", NS).spec.replicas)


def scale_puts(c: EmulatedCluster) -> list[int]:
    return [w[4] for w in c.emu.writes if w[1] == "deployments/scale"]


def test_a_closed_port_is_unreachable_and_changes_nothing(cluster, fleet, tmp_path) -> None:
    act = actuator(cluster, fleet, tmp_path)
    assert act.check_writers() == {}  # the first read: 4 replicas
    cluster.close_port()
    try:
        res = act.scale("svc", "h100", 1)
        assert res.status is ActuationStatus.UNREACHABLE and not res.changed
        assert act.check_writers() == {}  # nothing read, nothing inferred
    finally:
        cluster.open_port()
    assert replicas(cluster) == 4 and scale_puts(cluster) == []
    assert act.scale("svc", "h100", 3).ok and replicas(cluster) == 3  # the next tick writes


def test_a_write_past_the_deadline_is_sent_once_and_not_taken_for_another_writer(cluster, fleet, tmp_path) -> None:
    """The API server answers after the client's deadline and applies the write anyway. The client does
    not send it again (urllib3's default retries would have sent it four times), and the daemon reads
    the count it may have written as its own: no OtherWriter pause of ``other_writer_quiet_s``."""
    act = actuator(cluster, fleet, tmp_path)
    conn = act.connectors[("svc", "h100")]
    original = conn.read_scale

    def read_then_slow_down():  # the read is answered; the write is not, within its deadline
        got = original()
        cluster.emu.slow["daemon"] = 3 * DEADLINE_S
        return got

    conn.read_scale = read_then_slow_down  # type: ignore[method-assign]
    try:
        res = act.scale("svc", "h100", 6)
    finally:
        conn.read_scale = original  # type: ignore[method-assign]
        cluster.emu.slow.clear()
    assert res.status is ActuationStatus.UNREACHABLE and not res.changed
    deadline = time.monotonic() + SETTLE_S
    while replicas(cluster) != 6 and time.monotonic() < deadline:  # it lands once the server gets to it
        time.sleep(0.05)
    assert replicas(cluster) == 6 and scale_puts(cluster) == [6]  # one PUT, not one per urllib3 retry
    assert act.check_writers() == {} and not act.paused("svc", "h100")
    again = act.scale("svc", "h100", 6)
    assert again.ok and not again.changed and again.external is None


def test_a_429_is_not_retried_before_its_retry_after(cluster, fleet, tmp_path) -> None:
    clock = Clock()
    act = actuator(cluster, fleet, tmp_path, clock)
    cluster.emu.throttled["daemon"] = 30
    res = act.scale("svc", "h100", 2)
    assert res.status is ActuationStatus.UNREACHABLE and "HTTP 429" in res.message
    refused = list(cluster.emu.refused)
    assert [r[3] for r in refused] == [429] and scale_puts(cluster) == []  # one call, refused, no retry
    clock.t = 29.0  # within Retry-After: no call at all
    held = act.scale("svc", "h100", 2)
    assert held.status is ActuationStatus.UNREACHABLE and "retry after 1 s more" in held.message
    assert cluster.emu.refused == refused and replicas(cluster) == 4
    cluster.emu.throttled.clear()
    clock.t = 30.0
    assert act.scale("svc", "h100", 2).ok and replicas(cluster) == 2


def test_transient_conflicts_are_retried_and_a_longer_run_is_reported(cluster, fleet, tmp_path) -> None:
    act = actuator(cluster, fleet, tmp_path)
    cluster.emu.conflicts_left = 2  # conflict_retries 2: the third attempt passes
    res = act.scale("svc", "h100", 5)
    assert res.ok and replicas(cluster) == 5 and res.external is None
    cluster.emu.conflicts_left = 3  # one more than the attempts: reported, nothing written
    res = act.scale("svc", "h100", 3)
    assert res.status is ActuationStatus.CONFLICT and "after 3 attempts" in res.message
    assert replicas(cluster) == 5 and res.external is None and not act.paused("svc", "h100")
    assert act.scale("svc", "h100", 3).ok and replicas(cluster) == 3  # the next tick's write passes
