"""``benchmarks/fleet_scale.py``'s own functions at a tiny size: 3 and 4 services of 3 variants x 2 pods
in the emulated API server and a real Prometheus, one daemon and then two (two shards), each in its
own process, 2 counted rounds. Asserted: values known apart from the benchmark (docs/prometheus.md's
count of batched queries, the watch cache's contract of no reads in a tick, the shard rule by hand,
the Lease rule's earliest takeover), never a timing. The audit of the write log is checked on
hand-made logs, one with each kind of write it must catch."""

from __future__ import annotations

import hashlib
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from support.paths import ROOT

sys.path.insert(0, str(ROOT / "benchmarks"))  # by name: the benchmark's spawned children import it so
import fleet_scale as fs

LEASE = (3.0, 2.0, 0.5)  # duration_s, renew_s, retry_s: a short failover
WINDOW_S = 10.0  # the controller's window: one tick, so that the PID decides from the first counted round
# a tick's queries: 10 inventory unions, vLLM 0.11's pod-scoped signals as the per-pod aggregation's 21
# distinct terms (counted in tests/integration/prometheus/test_batched_queries.py), 9 service-wide
BATCHED_QUERIES = 10 + 21 + 9
"""docs/prometheus.md "Batched queries": a batched tick sends each key once, 10 per-pod inventory
queries, 19 pod-scoped signals (21 distinct terms aggregated) and 9 service-wide queries, whatever the
number of services."""


@dataclass
class Runs:
    small: fs.Run
    large: fs.Run
    two: fs.Run


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Runs]:
    bench = fs.Bench(4, 2, "1s", tmp_path_factory.mktemp("fleet-scale"))  # pod 1 of each variant has a request waiting
    try:
        kw: dict[str, Any] = {"ticks": 2, "watch": True, "controller": "pid", "lease": LEASE, "history_s": 0.0,
                              "window_s": WINDOW_S, "even": False}  # shards by the hash of the names
        small = bench.run(3, 1, **kw)
        large = bench.run(4, 1, **kw)
        two = bench.run(4, 2, **kw)
    finally:
        bench.stop()
    yield Runs(small, large, two)


def shard_by_hand(name: str, shards: int) -> int:
    """docs/configuration.md ``kubernetes.shards``: SHA-256 of the name, first 8 bytes big-endian, mod shards."""
    return int.from_bytes(hashlib.sha256(name.encode()).digest()[:8], "big") % shards


@pytest.mark.slow
def test_prometheus_queries_per_tick_are_the_batched_keys_whatever_the_services(runs: Runs) -> None:
    # every counted tick of 3 services, of 4, and of each of two daemons leading 2 services each
    assert len(runs.small.queries) == 2 and len(runs.large.queries) == 2 and len(runs.two.queries) == 4
    assert set(runs.small.queries) == set(runs.large.queries) == set(runs.two.queries) == {BATCHED_QUERIES}


@pytest.mark.slow
def test_a_tick_reads_nothing_from_the_api_server_with_the_watch_cache(runs: Runs) -> None:
    # adapters/kubernetes.py: with kubernetes.watch a tick sends the API server its writes alone
    for r in (runs.small, runs.large, runs.two):
        assert r.reads == [0] * len(r.walls), (r.services, r.daemons, r.reads)


@pytest.mark.slow
def test_every_service_has_exactly_one_leader(runs: Runs) -> None:
    names = [f"s{i}" for i in range(4)]
    assert [shard_by_hand(n, 2) for n in names] == [1, 1, 0, 0]
    two = runs.two
    assert sorted(i for s in two.led.values() for i in s) == [0, 1]  # each shard led once
    assert sorted(two.led_services.values()) == [2, 2]
    assert runs.small.led == {"d0": [0]} and runs.small.led_services == {"d0": 3}
    assert not (runs.small.failed or runs.large.failed or two.failed)  # every counted tick returned


@pytest.mark.slow
def test_a_killed_daemons_shard_is_led_again_no_earlier_than_the_lease_duration(runs: Runs) -> None:
    fo = runs.two.failover
    assert len(fo) == 1, fo  # two daemons of two shards: the victim led one
    (f,) = fo.values()
    assert f["led_s"] is not None and f["ticks_s"] is not None and f["writes_s"] is not None, fo
    # a survivor times the Lease from when it saw the last renewal, which is after the server wrote it
    assert f["led_s"] >= LEASE[0], fo
    assert f["writes_s"] >= f["led_s"], fo  # its loop writes only once it leads


@pytest.mark.slow
def test_no_workload_was_written_by_a_daemon_not_holding_its_shard(runs: Runs) -> None:
    two = runs.two
    # the first counted round scales every service from zero (requests waiting, no replica: at least
    # one write each), and the survivor scales the victim's zeroed workloads again: some workload
    # had two writers, so a write at overlapping leaderships had a place to show
    assert two.scale_writes >= 4 and two.handed >= 1, (two.scale_writes, two.handed)
    assert two.overlaps == 0


def test_the_audit_flags_a_write_by_a_daemon_not_holding_the_shard() -> None:
    """A hand-made log (server order): a takes shard 0's Lease and writes w0; b writes w0 while a holds
    it (flagged); a releases it; a writes w0 (flagged: nobody holds it); b takes it and writes w0;
    a write by someone not a daemon (a person) is not the audit's."""
    log = fs.TimedWrites()

    def lease(agent: str, holder: str) -> None:
        log.append(("PUT", "leases", "default", "L-shard-0", {"spec": {"holderIdentity": holder}}, agent))

    def scale(agent: str) -> None:
        log.append(("PATCH", "deployments/scale", "default", "w0", 2, agent))

    log.append(("PUT", "leases", "default", "unrelated", {"spec": {"holderIdentity": "b"}}, "b"))
    lease("a", "a")
    scale("a")
    scale("b")
    lease("a", "")
    scale("a")
    lease("b", "b")
    scale("b")
    scale("kubectl")
    out = fs.audit(log, 0, {"L-shard-0": 0}, {"w0": 0}, {"a", "b"})
    assert [(name, agent, holder) for _, name, agent, holder in out["overlaps"]] == [("w0", "b", "a"),
                                                                                    ("w0", "a", None)]
    assert out["scales"] == 4 and out["handed"] == 1
    assert [(agent, holder) for _, agent, holder in out["lease"][0]] == [("a", "a"), ("a", None), ("b", "b")]
    assert fs.audit(log, 5, {"L-shard-0": 0}, {"w0": 0}, {"a", "b"})["overlaps"] == [(log.at[5], "w0", "a", None)]


def test_the_audit_skips_a_lease_create_that_lost_the_race() -> None:
    """The emulator logs a create before it answers 409 (the Lease exists): of two daemons creating a
    free Lease at once, a's create wins, b's is logged after it and refused; b's write is off-Lease."""
    log = fs.TimedWrites()
    for agent in ("a", "b"):
        log.append(("POST", "leases", "default", None, {"metadata": {"name": "L-shard-0"},
                                                         "spec": {"holderIdentity": agent}}, agent))
    log.append(("PATCH", "deployments/scale", "default", "w0", 2, "a"))
    log.append(("PATCH", "deployments/scale", "default", "w0", 2, "b"))
    out = fs.audit(log, 0, {"L-shard-0": 0}, {"w0": 0}, {"a", "b"})
    assert [(agent, holder) for _, agent, holder in out["lease"][0]] == [("a", "a")]
    assert [(name, agent, holder) for _, name, agent, holder in out["overlaps"]] == [("w0", "b", "a")]


def test_renewal_gaps_split_by_the_holders_ticks() -> None:
    """Hand-made Lease writes (t, writer, holder) of two shards and a's ticks [10, 12] and [20, 22]
    (the counted rounds: 10 to 22). Shard 0: a renews at 9, 11, 13.5 (a tick at 11: in, 2 s; 13.5 out,
    2.5 s), b takes it at 15 (not a's renewal; b's next at 16 is out, 1 s), a released nothing. Shard
    1: a at 19, 21.5 (in, 2.5 s), 23 (after the rounds: left out)."""
    lease = {0: [(9.0, "a", "a"), (11.0, "a", "a"), (13.5, "a", "a"), (15.0, "b", "b"), (16.0, "b", "b")],
             1: [(19.0, "a", "a"), (21.5, "a", "a"), (23.0, "a", "a")]}
    out = fs.renewal_gaps(lease, {"a": [(10.0, 12.0), (20.0, 22.0)]})
    assert sorted(out["in"]) == [2.0, 2.5] and sorted(out["out"]) == [1.0, 2.5]


def test_election_figures_split_rounds_by_the_ticks() -> None:
    """Rounds (start, end) with a retry of 1 s and one tick [5, 8]: round 2 (4.5-5.5) and round 3
    (6.6-7.0) overlap it; their lateness is 4.5 - 3.0 - 1 = 0.5 and 6.6 - 5.5 - 1 = 0.1; round 4
    (8.1-8.3) is out, 8.1 - 7.0 - 1 = 0.1; round 1 (2.0-3.0) has no predecessor."""
    out = fs.election_figures([(2.0, 3.0), (4.5, 5.5), (6.6, 7.0), (8.1, 8.3)], [(5.0, 8.0)], 1.0)
    assert out["call_in"] == pytest.approx([1.0, 0.4]) and out["call_out"] == pytest.approx([1.0, 0.2])
    assert out["late_in"] == pytest.approx([0.5, 0.1]) and out["late_out"] == pytest.approx([0.1])


def test_the_wall_waiting_on_prometheus_is_the_union_of_the_queries_in_flight() -> None:
    import fleet_exposition as fe  # on the path with fleet_scale

    counting = fe.Counting(None)  # type: ignore[arg-type]  # only the spans are read
    counting.spans = [(5.0, 6.0), (0.0, 2.0), (1.0, 3.0), (5.5, 5.8)]
    assert counting.in_flight_s() == pytest.approx(3.0 + 1.0)  # [0, 3] and [5, 6] by hand
    counting.reset()
    assert counting.in_flight_s() == 0.0 and counting.sent == 0


def test_pin_binds_every_thread_of_a_process_and_the_threads_it_starts_later() -> None:
    """``--pin``: a child with a thread already running is bound to one CPU of this process's set; the
    thread it starts afterwards inherits it (read back from ``/proc/<pid>/task/<tid>``). Each step is
    signalled over the child's pipes, so nothing waits on a clock."""
    import os
    import subprocess
    from pathlib import Path

    code = ("import threading, sys\n"
            "stop = threading.Event()\n"
            "threading.Thread(target=stop.wait, daemon=True).start()\n"
            "print('one', flush=True); sys.stdin.readline()\n"  # pinned by now: a second thread
            "threading.Thread(target=stop.wait, daemon=True).start()\n"
            "print('two', flush=True); sys.stdin.readline()\n")
    child = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert child.stdin is not None and child.stdout is not None
    try:
        target = {max(os.sched_getaffinity(0))}
        assert child.stdout.readline().strip() == "one"
        fs.pin(child.pid, target)
        child.stdin.write("go\n")
        child.stdin.flush()
        assert child.stdout.readline().strip() == "two"
        tasks = [int(t.name) for t in Path(f"/proc/{child.pid}/task").iterdir()]
        assert len(tasks) >= 3 and all(os.sched_getaffinity(t) == target for t in tasks)
    finally:
        child.kill()
        child.wait()


def test_pin_sets_split_this_processs_cpus_daemons_first() -> None:
    """``--pin N``: the first N CPUs of this process's set for the daemons, the rest for the others;
    N < 1 or fewer than N + 1 CPUs is refused; without ``--pin`` nothing."""
    import os

    cpus = sorted(os.sched_getaffinity(0))
    assert fs.pin_sets(None) is None
    with pytest.raises(SystemExit, match="--pin 0"):
        fs.pin_sets(0)
    with pytest.raises(SystemExit, match=f"this process has {len(cpus)}"):
        fs.pin_sets(len(cpus))
    if len(cpus) >= 2:
        assert fs.pin_sets(1) == ({cpus[0]}, set(cpus[1:]))
