"""Rows run side by side, each in a process of its own, so that one dying fails only its own row.

``compare`` and ``faults run`` simulate one row per controller (and scenario). In one shared
``ProcessPoolExecutor`` a worker killed from outside (``kill -9``, the kernel's out-of-memory killer)
breaks the whole pool: every row still running *or waiting* failed with ``BrokenProcessPool``. Here
each row gets a one-worker pool of its own, at most ``n`` at once, so a death is that row's error.

Processes are forked where the platform can (the rows' inputs reach them without pickling) with
SIGINT and SIGTERM blocked, and unblocked by ``initializer`` in the worker: the parent handles both
and, on an interrupt, terminates every worker it started and re-raises.
"""

from __future__ import annotations

import multiprocessing
import signal
from collections.abc import Callable, Generator, Hashable, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from typing import Any, TypeVar

J = TypeVar("J", bound=Hashable)
R = TypeVar("R")

STOP_SIGNALS = {signal.SIGINT, signal.SIGTERM}


def quiet_worker() -> None:
    """A worker's start: Ctrl-C reaches the whole process group, so the parent alone handles it (it
    terminates the workers with SIGTERM); both signals arrive blocked (the parent forks with them
    blocked), so the parent's handlers, inherited with the fork, never run here."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)


def run_each(jobs: Sequence[J], n: int, work: Callable[[J], R],
             initializer: Callable[..., None] = quiet_worker,
             initargs: tuple[Any, ...] = ()) -> Generator[tuple[J, R | Exception], None, None]:
    """Run ``work(job)`` for every job, each in its own worker process, at most ``n`` at once, and
    yield ``(job, result)`` as each ends, in the order they end; a job whose ``work`` raised, or whose
    worker died, yields ``(job, exception)`` and the others go on.

    Args:
        jobs: distinct, picklable, in the order they start.
        n: most processes at once (>= 1).
        work: a module-level function (it is pickled by name).
        initializer, initargs: run first in each worker; it must unblock SIGINT and SIGTERM (as
            ``quiet_worker`` does).

    Raises:
        ValueError: ``n`` below 1. An interrupt (or any BaseException in the parent) terminates every
        worker still running and propagates; so does closing the generator, which a caller that may
        stop early does with ``contextlib.closing`` (else only once the generator is collected).
    """
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    ctx = multiprocessing.get_context("fork") if "fork" in multiprocessing.get_all_start_methods() else None
    waiting = list(jobs)
    waiting.reverse()  # popped from the end: the first job starts first
    running: dict[Future[R], tuple[J, ProcessPoolExecutor]] = {}
    before = set(multiprocessing.active_children())
    try:
        while waiting or running:
            while waiting and len(running) < n:
                job = waiting.pop()
                pool = ProcessPoolExecutor(max_workers=1, mp_context=ctx, initializer=initializer,
                                           initargs=initargs)
                mask = signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)  # the worker forks at submit
                try:
                    running[pool.submit(work, job)] = (job, pool)
                finally:
                    signal.pthread_sigmask(signal.SIG_SETMASK, mask)  # a signal that came meanwhile is raised here
            ended, _ = wait(running, return_when=FIRST_COMPLETED)
            for fut in ended:
                job, pool = running.pop(fut)
                pool.shutdown(wait=True)
                try:
                    outcome: R | Exception = fut.result()
                except Exception as exc:  # the row's own error, or its worker died (BrokenProcessPool)
                    outcome = exc
                yield job, outcome
    except BaseException:
        started = set(multiprocessing.active_children()) - before
        for proc in started:
            proc.terminate()
        # each pool's own thread reaps its terminated worker; joining it then, not beside it, leaves no
        # moment at which a reaped worker still reads as alive
        for _, pool in running.values():
            pool.shutdown(wait=True, cancel_futures=True)
        for proc in started:
            proc.join()
        raise
