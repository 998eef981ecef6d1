"""What the tick keeps between services and ticks (issue 35) gives what computing afresh gives: a pod
name's RE2 escape (``promql.escape_re2``, kept), and BLAS single-threaded during a forecast with the
libraries found once (``autoscaler.loop.forecast.blas``)."""

from __future__ import annotations

import re

from threadpoolctl import threadpool_info, threadpool_limits

from autoscaler.config import ForecastConfig
from autoscaler.loop.forecast import ForecastStage
from autoscaler.promql import escape_re2, exact_alternation
from autoscaler.state import ServiceEstimate, Signals


def blas_threads() -> set[int]:
    """The thread counts of every BLAS library loaded, found afresh (``threadpool_info``)."""
    return {lib["num_threads"] for lib in threadpool_info() if lib["user_api"] == "blas"}


def test_escapes_kept_are_the_escapes_computed_afresh() -> None:
    """Each RE2 special character backslashed (written out by hand), the same on a second call (kept),
    and the alternation of names with specials matches exactly those names (Python's ``re`` reads
    these escapes as RE2 does): not a name with one character changed, nor two names run together."""
    assert escape_re2("s0-h100-0") == "s0-h100-0"
    assert escape_re2("a.b+c*d?e(f)g|h[i]j{k}l^m$n\\o") == r"a\.b\+c\*d\?e\(f\)g\|h\[i\]j\{k\}l\^m\$n\\o"
    assert escape_re2("a.b+c*d?e(f)g|h[i]j{k}l^m$n\\o") == r"a\.b\+c\*d\?e\(f\)g\|h\[i\]j\{k\}l\^m\$n\\o"
    names = ["pod.1", "pod+2", "p(3)", "x|y", "s0-h100-0"]
    for _ in range(2):  # the second time from what was kept
        pattern = re.compile(exact_alternation(names))
        assert all(pattern.fullmatch(n) for n in names)
        assert not any(pattern.fullmatch(n) for n in ["podx1", "pod22", "p3", "x", "y", "pod.1pod+2", "s0-h100-"])
    assert exact_alternation(names) == r"p\(3\)|pod\+2|pod\.1|s0-h100-0|x\|y"  # sorted, '|'-joined


def test_a_forecast_runs_blas_on_one_thread_and_gives_the_others_back() -> None:
    """With BLAS at 2 threads, ``ForecastStage.apply`` runs the forecaster's update at 1 thread (the
    libraries found once, ``blas``), each time, and leaves them at 2 after."""
    stage = ForecastStage(ForecastConfig())
    seen: list[set[int]] = []
    update = stage.forecaster.update

    def spy(*args: object) -> None:
        seen.append(blas_threads())
        update(*args)  # type: ignore[arg-type]

    stage.forecaster.update = spy  # type: ignore[method-assign,assignment]
    with threadpool_limits(limits=2, user_api="blas"):
        for k in range(3):
            est = ServiceEstimate("svc", 15.0 * k, Signals.of({"request_rate_rps": 5.0 + k}), {}, {}, False,
                                  0.0, 0.0, 0)
            stage.apply(est)
            assert blas_threads() == {2}
    assert seen == [{1}, {1}, {1}]


class Node:
    """An object that can sit in a reference cycle (and be weakly referenced)."""

    def __init__(self) -> None:
        self.other: Node | None = None


def tracked(obj: object) -> bool:
    """Whether ``obj`` is in one of the collector's generations (not frozen), by identity."""
    import gc

    return any(o is obj for o in gc.get_objects())


def test_freezing_the_heap_leaves_later_garbage_collectable() -> None:
    """``daemon.freeze_heap`` freezes what is alive (the start-up objects, here a cycle made before
    it): the full collections no longer see them; a cycle made after it and dropped is still
    collected, and one dropped before it was collected by it, not frozen."""
    import gc
    import weakref

    from autoscaler.daemon import freeze_heap

    kept, dropped = Node(), Node()
    kept.other, dropped.other = Node(), Node()
    kept.other.other, dropped.other.other = kept, dropped  # two cycles
    gone_before = weakref.ref(dropped)
    del dropped
    try:
        freeze_heap()
        assert gone_before() is None  # collected, not frozen
        assert gc.get_freeze_count() > 0
        assert not tracked(kept)  # out of every generation
        later = Node()
        later.other = Node()
        later.other.other = later
        gone_after = weakref.ref(later)
        del later
        gc.collect()
        assert gone_after() is None
    finally:
        gc.unfreeze()  # the rest of the test session as it was
    assert tracked(kept)
