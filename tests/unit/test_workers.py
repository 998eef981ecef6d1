"""``autoscaler.workers.run_each``: each job in a process of its own, so one dying fails only itself."""

from __future__ import annotations

import os
import signal
from concurrent.futures.process import BrokenProcessPool

import pytest

from autoscaler.workers import run_each


def _job(x: int) -> int:
    if x == 3:
        os.kill(os.getpid(), signal.SIGKILL)  # as ``kill -9`` or the out-of-memory killer would
    if x == 5:
        raise ValueError("five")
    return x * x


@pytest.mark.parametrize("n", [1, 2, 3])
def test_a_killed_worker_fails_its_own_job_and_the_others_finish(n: int) -> None:
    out = dict(run_each([1, 2, 3, 4, 5, 6], n, _job))
    assert {k: v for k, v in out.items() if k not in (3, 5)} == {1: 1, 2: 4, 4: 16, 6: 36}
    assert isinstance(out[3], BrokenProcessPool)
    assert isinstance(out[5], ValueError) and str(out[5]) == "five"


def test_no_worker_outlives_the_run() -> None:
    import multiprocessing

    before = set(multiprocessing.active_children())
    assert sorted(k for k, _ in run_each([1, 2, 4], 2, _job)) == [1, 2, 4]
    assert set(multiprocessing.active_children()) - before == set()


def test_an_error_in_the_consumer_stops_every_worker() -> None:
    import multiprocessing

    before = set(multiprocessing.active_children())
    from contextlib import closing

    with pytest.raises(KeyError), closing(run_each([1, 2, 4, 6], 2, _job)) as each:
        for _ in each:
            raise KeyError("stop")
    assert all(not p.is_alive() for p in set(multiprocessing.active_children()) - before)


def test_at_least_one_worker() -> None:
    with pytest.raises(ValueError, match="n must be >= 1, got 0"):
        list(run_each([1], 0, _job))
