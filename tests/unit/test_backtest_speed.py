"""``autoscaler backtest --speed N``: a range recorded from a simulator served at N x real time is read
in the source's seconds (windows N times shorter, rates divided by N), as dry-run reads it live."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import pytest

from autoscaler.backtest import run_backtest
from autoscaler.config.loading import default_config


class StubPrometheus:
    """Answers every range query with no series; records each query and its grid."""

    def __init__(self) -> None:
        self.queries: list[tuple[str, float, float, str]] = []

    def custom_query_range(self, query: str, start_time: datetime, end_time: datetime, step: str) -> list[Any]:
        self.queries.append((query, start_time.timestamp(), end_time.timestamp(), step))
        return []


@pytest.mark.parametrize("speed", [1.0, 10.0])
def test_backtest_reads_the_source_at_its_speed(speed: float) -> None:
    cfg = default_config()
    stub = StubPrometheus()
    run = run_backtest(cfg, stub, 1_000, 1_060, 5, "pid", speed=speed)  # type: ignore[arg-type]
    # the loop's time is the source's: 5 wall s per tick are 5 * speed simulated s
    assert [r.time_s for r in run.ticks] == pytest.approx([k * 5 * speed for k in range(13)])
    # every query is evaluated on the wall-clock grid, from the range's start to its end
    assert {(t0, t1, step) for _, t0, t1, step in stub.queries} <= {(1_000 + 5 * k, 1_060, "5") for k in range(13)}
    # windows: the controller's 300 s of the source are 300 / speed wall seconds
    window = f"[{round(cfg.controller.window_s / speed * 1000)}ms]"
    assert any(window in q for q, *_ in stub.queries)
    assert not any(f"[{round(cfg.controller.window_s * 1000)}ms]" in q for q, *_ in stub.queries) or speed == 1


def test_a_replayed_source_divides_rates_by_the_speed() -> None:
    # The source a backtest builds reads as dry-run's does at that speed (adapters.prometheus divides rates
    # by ``speed``); its clock maps the loop's (source) seconds back to the wall-clock grid.
    from autoscaler.wiring import Replay, build_source

    cfg = default_config()
    source = build_source(cfg, StubPrometheus(), speed=10, replay=Replay(1_000, 1_060, 5))  # type: ignore[arg-type]
    assert source.speed == 10 and source.window_s == pytest.approx(cfg.controller.window_s / 10)
    assert source.clock is not None and source.clock(50.0) == pytest.approx(1_005.0)


def test_backtest_speed_must_be_positive() -> None:
    with pytest.raises(ValueError, match="--speed must be a finite number > 0, got 0"):
        run_backtest(default_config(), StubPrometheus(), 0, 60, 5, speed=0)  # type: ignore[arg-type]
