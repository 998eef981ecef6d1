"""Jobs run side by side in threads, at most ``workers`` at once, each job's own steps in order.

A daemon's tick writes to many workloads (a scale write per variant that changes, an Event per write):
one after another, each a round trip to the API server, a tick scaling 100 services spent seconds
waiting on them (issue 35). Each job is one workload's (or one service's) writes, run in its order;
different jobs overlap. Used by the loop's scale writes (``ControlLoop``, ``writers``) and the daemon's
Events (``autoscaler.daemon.write_events``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from typing import TypeVar

R = TypeVar("R")


def run_jobs(jobs: Sequence[Callable[[], R]], workers: int, name: str = "writes") -> list[R]:
    """Each of ``jobs`` called, at most ``workers`` at once (threads named ``name``), their results in
    ``jobs``' order once all are done; with one job or ``workers`` <= 1, one after another in this thread.

    Raises:
        whatever a job raised (the first in ``jobs``' order), once every job has ended.
    """
    if len(jobs) <= 1 or workers <= 1:
        return [job() for job in jobs]
    with ThreadPoolExecutor(max_workers=min(workers, len(jobs)), thread_name_prefix=name) as pool:
        futures = [pool.submit(job) for job in jobs]
    return [f.result() for f in futures]


def _caught(job: Callable[[], R]) -> tuple[R | None, Exception | None]:
    try:
        return job(), None
    except Exception as exc:  # the caller decides: one job's failure must not cost the others their results
        return None, exc


def run_all(jobs: Sequence[Callable[[], R]], workers: int,
            name: str = "writes") -> list[tuple[R | None, Exception | None]]:
    """As ``run_jobs``, every job run whatever another raised (one after another too): each job's
    (result, None), or (None, the Exception it raised), in ``jobs``' order."""
    return run_jobs([partial(_caught, job) for job in jobs], workers, name)
