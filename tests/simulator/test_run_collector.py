"""``heap_frozen`` (the collector's settings for a run, issue 33): the youngest generation's threshold
is raised to ``RUN_GC_THRESHOLD0`` inside the block, never lowered, left at 0 (automatic collection off)
when it was, and every threshold is back as it was after the block, an exception included."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from autoscaler.simulator.fleet import RUN_GC_THRESHOLD0, heap_frozen


@pytest.fixture
def thresholds() -> Iterator[None]:
    saved = gc.get_threshold()
    yield
    gc.set_threshold(*saved)


@pytest.mark.parametrize(("before", "inside"), [
    ((700, 10, 10), (RUN_GC_THRESHOLD0, 10, 10)),  # CPython's default: raised
    ((50_000, 5, 7), (50_000, 5, 7)),  # already higher: kept
    ((0, 10, 10), (0, 10, 10)),  # automatic collection off: kept off
])
def test_threshold_inside_and_restored(thresholds: None, before: tuple[int, int, int],
                                       inside: tuple[int, int, int]) -> None:
    gc.set_threshold(*before)
    with heap_frozen():
        assert gc.get_threshold() == inside
    assert gc.get_threshold() == before


def test_restored_after_an_error(thresholds: None) -> None:
    gc.set_threshold(700, 10, 10)
    with pytest.raises(RuntimeError), heap_frozen():
        raise RuntimeError("boom")
    assert gc.get_threshold() == (700, 10, 10)
    assert gc.get_freeze_count() == 0
