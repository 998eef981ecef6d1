"""Shard assignment, the ``kubernetes.shards`` / ``service_shards`` keys, and the GPU-share arithmetic
of the sharded daemon (autoscaler.adapters.shards); the Leases themselves are exercised against the
emulated API server in tests/integration/kubernetes/test_shards.py."""

from __future__ import annotations

import copy
import itertools
import random
from typing import Any

import pytest
from support.fleets import FLEET_DOC

from autoscaler.adapters.shards import (
    fallback_split,
    hash_shard,
    largest_remainder,
    lease_name,
    next_shares,
    shard_services,
    target_split,
)
from autoscaler.config.loading import parse_config
from autoscaler.errors import ConfigError


def fleet(names: list[str], **kube: Any) -> Any:
    doc = copy.deepcopy(FLEET_DOC)
    svc = doc["services"][0]
    doc["services"] = [{**copy.deepcopy(svc), "name": n} for n in names]
    doc["kubernetes"] = kube
    doc.pop("simulator")  # its crashes name no service
    return parse_config(doc, "<test>")


def test_hash_shard_matches_sha256_by_hand() -> None:
    """Expected values from ``printf %s NAME | sha256sum``: the first 16 hex digits, modulo the shard
    count (mod 4 is the last of those digits mod 4: llm 487b91042c7cf27a -> 0xa = 10 -> 2; chat-7b
    7761a0b0feaa13a8 -> 8 -> 0; embed 8a1eed22144c3f04 -> 0; code-llama c3ab0f5f9fd20864 -> 0),
    so they do not depend on Python's hash seed."""
    assert [hash_shard(n, 4) for n in ("llm", "chat-7b", "embed", "code-llama")] == [2, 0, 0, 0]
    assert [hash_shard(n, 6) for n in ("llm", "chat-7b", "embed", "code-llama")] == [0, 2, 2, 2]
    assert hash_shard("llm", 1) == 0


def test_adding_a_service_moves_no_other() -> None:
    names = [f"svc-{i}" for i in range(40)]
    before = {s.name: i for i, svcs in enumerate(shard_services(fleet(names, shards=5))) for s in svcs}
    after = {s.name: i for i, svcs in enumerate(shard_services(fleet([*names, "new-one"], shards=5))) for s in svcs}
    assert {n: after[n] for n in names} == before
    assert len(set(before.values())) == 5  # 40 names reach every shard


def test_an_explicit_shard_overrides_the_hash() -> None:
    cfg = fleet(["llm", "chat-7b"], shards=4, service_shards={"llm": 3})
    assert [[s.name for s in svcs] for svcs in shard_services(cfg)] == [["chat-7b"], [], [], ["llm"]]


def test_one_shard_keeps_the_one_lease_name() -> None:
    assert lease_name("autoscaler-leader", 1, 0) == "autoscaler-leader"
    assert lease_name("autoscaler-leader", 3, 2) == "autoscaler-leader-shard-2"
    cfg = fleet(["llm"])
    assert cfg.kubernetes.shards == 1 and shard_services(cfg) == [cfg.services]


@pytest.mark.parametrize(("kube", "message"), [
    ({"shards": 2, "service_shards": {"llm": 2}}, "service_shards[llm]: shard 2 is not one of 0 to 1"),
    ({"shards": 2, "service_shards": {"nope": 0}}, "kubernetes.service_shards: unknown service 'nope'"),
    ({"shards": 0}, "kubernetes.shards: Input should be greater than or equal to 1"),
    ({"shards": 2, "lease": {"name": "x" * 250}}, "is not a valid Kubernetes object name"),
])
def test_bad_shard_settings_are_one_line_errors(kube: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError) as err:
        fleet(["llm"], **kube)
    assert message in str(err.value) and "\n" not in str(err.value)


def test_largest_remainder_by_hand() -> None:
    assert largest_remainder(10, [1, 1, 1]) == [4, 3, 3]  # 3.33 each: the first remainder wins the tie
    assert largest_remainder(7, [2, 0, 5]) == [2, 0, 5]
    assert largest_remainder(5, [0, 0]) == [3, 2]  # no weight: equal parts


def test_target_split_by_hand() -> None:
    # 16 GPUs; floors (held) 2, 2, 0; demand 10, 2, 4: 8 + 0 + 4 = 12 asked above the floors,
    # exactly the 16 - 4 left
    assert target_split(16, [10, 2, 4], [2, 2, 0]) == [10, 2, 4]
    # demand above what is left: 10 left split 8 : 4 -> 6.67, 3.33 -> 7, 3 (largest remainder)
    assert target_split(14, [10, 2, 4], [2, 2, 0]) == [9, 2, 3]
    # demand below the limit: the 6 left over go by demand 2 : 1 : 1 -> 3, 1.5, 1.5 -> 3, 2, 1
    assert target_split(14, [4, 2, 2], [0, 0, 0]) == [7, 4, 3]
    # floors above the limit (transient): cut in proportion to the floors
    assert target_split(6, [0, 0], [6, 3]) == [4, 2]


def test_next_shares_lowers_first_and_raises_from_what_is_free() -> None:
    # all 12 in use; shard 1 wants 4 more: first a generation that only lowers shard 0
    first = next_shares(12, [8, 4], [4, 8])
    assert first == [4, 4]
    assert next_shares(12, first, [4, 8]) == [4, 8]


def test_shares_never_exceed_the_limit_whichever_generation_each_shard_uses() -> None:
    """Brute force over random splits: with shares ``cur`` (summing to at most the limit) and any
    target, each shard planning with either ``cur`` or ``next`` stays within the limit."""
    rng = random.Random(0)
    for _ in range(2000):
        n, limit = rng.randint(1, 5), rng.randint(0, 40)
        cur = largest_remainder(rng.randint(0, limit), [rng.random() for _ in range(n)])
        floor = [rng.randint(0, 10) for _ in range(n)]
        target = target_split(limit, [rng.randint(0, 30) for _ in range(n)], floor)
        assert sum(target) == limit
        nxt = next_shares(limit, cur, target)
        for pick in itertools.product((0, 1), repeat=n):
            assert sum((cur, nxt)[p][i] for i, p in enumerate(pick)) <= limit


def test_fallback_split_is_the_minimum_and_an_equal_part() -> None:
    assert fallback_split(10, [2, 0, 0]) == [5, 3, 2]  # 8 left: 3, 3, 2
    assert sum(fallback_split(7, [1, 1, 1, 1])) == 7
