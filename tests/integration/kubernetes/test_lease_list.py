"""One election round's API calls (autoscaler.adapters.shards, "One read a round") counted at the
emulated API server: one LIST for every shard Lease instead of a GET each, a write only for the Leases
held or taken, the GET per Lease back when the LIST is forbidden, and a take from a listed Lease that
changed since the list lost with a 409, as after a GET."""

from __future__ import annotations

import copy
from collections import Counter
from typing import Any

from kubernetes import client
from support.fleets import FLEET_DOC

from autoscaler.adapters.lease import LeaderElector
from autoscaler.adapters.shards import ShardElection
from autoscaler.config import FleetConfig
from autoscaler.config.loading import parse_config
from autoscaler.faults.kubeapi import EmulatedCluster, emulated_cluster

NS = "autoscaler"
SHARDS = 4
SLOW = {"duration_s": 30.0, "renew_s": 20.0, "retry_s": 5.0}  # nothing runs out during a test


def fleet(shards: int = SHARDS) -> FleetConfig:
    doc: dict[str, Any] = copy.deepcopy(FLEET_DOC)
    svc = doc["services"][0]
    doc["services"] = [{**copy.deepcopy(svc), "name": f"s{i}"} for i in range(shards)]
    doc.pop("simulator")
    doc["kubernetes"] = {"namespace": "default", "shards": shards, "lease": SLOW,
                         "service_shards": {f"s{i}": i for i in range(shards)}}
    doc["prometheus"] = {"url": "http://127.0.0.1:1"}
    return parse_config(doc, "<test>")


def lease_calls(cluster: EmulatedCluster, before: Counter[tuple[str, str]]) -> dict[str, int]:
    """The Lease calls since ``before`` (a copy of the emulator's counter), by verb."""
    now = cluster.emu.requests
    return {verb: n for (verb, plural), n in (now - before).items() if plural == "leases"}


def test_a_round_reads_every_shard_lease_with_one_list() -> None:
    """One daemon, four shards. Its first round: the members' PATCH (404: the members Lease is then
    created), one LIST, and a create per shard (all four absent; alone, it takes all: ceil(4 / 1)).
    Its second round: the PATCH, one LIST and four renewals, no GET (before this change: four GETs).
    A second daemon's round while the first holds all four: the PATCH, the members' create (its
    first), one LIST, and no Lease write."""
    cfg = fleet()
    with emulated_cluster() as cluster:
        a = ShardElection(cfg, cluster.api(user_agent="autoscaler/a"), NS, "a")
        before = copy.copy(cluster.emu.requests)
        a.round()
        assert lease_calls(cluster, before) == {"patch": 1, "create": 1 + SHARDS, "list": 1}
        assert a.led() == list(range(SHARDS))
        before = copy.copy(cluster.emu.requests)
        a.round()
        assert lease_calls(cluster, before) == {"patch": 1, "list": 1, "update": SHARDS}
        assert a.led() == list(range(SHARDS))
        b = ShardElection(cfg, cluster.api(user_agent="autoscaler/b"), NS, "b")
        before = copy.copy(cluster.emu.requests)
        b.round()
        assert lease_calls(cluster, before) == {"patch": 1, "list": 1}
        assert b.led() == []


def test_a_forbidden_list_falls_back_to_a_get_per_lease() -> None:
    """With ``list`` on leases refused (403, a Role from before this change), the round reads each
    shard's Lease with a GET, as before, and later rounds do not try the LIST again."""
    cfg = fleet()
    with emulated_cluster() as cluster:
        cluster.emu.forbidden.add(("list", "leases", None))
        a = ShardElection(cfg, cluster.api(user_agent="autoscaler/a"), NS, "a")
        a.round()  # the LIST refused once; each absent Lease read by GET (404) and taken
        assert a.led() == list(range(SHARDS))
        before = copy.copy(cluster.emu.requests)
        a.round()
        assert lease_calls(cluster, before) == {"patch": 1, "get": SHARDS, "update": SHARDS}
        assert a.led() == list(range(SHARDS))


def test_a_take_from_a_listed_lease_changed_since_loses_with_a_409() -> None:
    """``b`` lists the Lease while it is free (released by ``a``); ``a`` takes it back meanwhile;
    ``b``'s take from the listed object (its resourceVersion now old) is refused with a 409: ``b``
    does not lead, ``a`` does, and the Lease names ``a``."""
    cfg = fleet(1)
    lease = cfg.kubernetes.lease
    with emulated_cluster() as cluster:
        a = LeaderElector(cluster.api(user_agent="autoscaler/a"), "x", NS, "a", lease)
        b = LeaderElector(cluster.api(user_agent="autoscaler/b"), "x", NS, "b", lease)
        assert a.try_acquire_or_renew() and a.release()
        api = client.CoordinationV1Api(cluster.api(user_agent="kubectl"))
        (listed,) = [x for x in api.list_namespaced_lease(NS).items if x.metadata.name == "x"]
        assert not listed.spec.holder_identity  # free when listed
        assert a.try_acquire_or_renew()
        before = copy.copy(cluster.emu.requests)
        assert not b.try_acquire_or_renew(lease=listed)
        assert lease_calls(cluster, before) == {"update": 1}  # the write refused; no read
        assert not b.leads() and a.leads()
        assert api.read_namespaced_lease("x", NS).spec.holder_identity == "a"
