"""The live layer's harm rules on hand-made records (autoscaler.faults.live): no harness, the counts
by hand."""

from __future__ import annotations

from autoscaler.faults.live import SECOND, LiveRecord


def test_a_stale_holder_counts_from_the_start_and_a_killed_one_from_its_death() -> None:
    rec = LiveRecord(holders=[(0.0, "gone"), (70.0, "a")], gone={"gone": 0.0}, end_s=350.0)
    assert rec.leaderless(90.0) == 0  # 70 s without a leader: within the limit
    rec = LiveRecord(holders=[(0.0, "gone"), (100.0, "a")], gone={"gone": 0.0}, end_s=350.0)
    assert rec.leaderless(90.0) == 1  # 100 s
    rec = LiveRecord(holders=[(0.0, "gone")], gone={"gone": 0.0}, end_s=350.0)
    assert rec.leaderless(90.0) == 1  # never taken over: the whole run
    # a leads from 0, is killed at 250 and b takes over at 320 (70 s), then at 400 the Lease is
    # released and nobody takes it until the end at 500 (100 s): one stretch past 90 s
    rec = LiveRecord(holders=[(0.0, "a"), (320.0, "b"), (400.0, None)], gone={"a": 250.0}, end_s=500.0)
    assert rec.leaderless(90.0) == 1
    # a live holder, however long, is a leader
    assert LiveRecord(holders=[(0.0, "a")], end_s=1000.0).leaderless(90.0) == 0


def test_a_second_process_with_the_leaders_identity_is_another_writer() -> None:
    rec = LiveRecord(holders=[(0.0, "a")])
    assert not rec.held_by_other("a", 100.0)  # the leader's own write
    assert rec.held_by_other(SECOND, 100.0)  # the same name in the Lease, another process
