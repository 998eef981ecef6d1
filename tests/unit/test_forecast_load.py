"""LoadForecaster: ticks into steps, unknown values and gaps, forecast timing."""

from __future__ import annotations

import numpy as np
import pytest

from models.forecast.load import LoadForecaster


def history(lf: LoadForecaster, quantity: str) -> np.ndarray:
    return np.array(lf.models[quantity].history)


def test_ticks_are_averaged_into_steps_and_unknown_is_never_zero() -> None:
    lf = LoadForecaster(step_s=60, season_s=None)
    for t, rate, tokens in [(0, 1.0, None), (15, 2.0, None), (30, 3.0, 100.0), (45, None, 300.0)]:
        lf.update(t, rate, tokens, None)
    assert len(history(lf, "rate_rps")) == 0  # the first step is still open
    lf.update(60, 4.0, 50.0, None)
    np.testing.assert_array_equal(history(lf, "rate_rps"), [2.0])  # (1 + 2 + 3) / 3
    np.testing.assert_array_equal(history(lf, "mean_input_tokens"), [200.0])  # (100 + 300) / 2
    assert np.isnan(history(lf, "mean_output_tokens")).all()  # all None: unknown, not 0


def test_a_gap_between_ticks_becomes_missing_steps() -> None:
    lf = LoadForecaster(step_s=60, season_s=None)
    lf.update(0, 5.0, 10.0, 1.0)
    lf.update(200, 7.0, 10.0, 1.0)  # steps [60, 120) and [120, 180) saw no tick
    h = history(lf, "rate_rps")
    assert h[0] == 5.0
    assert np.isnan(h[1:]).all() and len(h) == 3


def test_forecast_before_data_and_its_step_times() -> None:
    lf = LoadForecaster(step_s=60, season_s=None)
    assert lf.forecast(300).rate_rps is None
    for t in range(0, 90, 15):
        lf.update(t, 10.0, 1000.0, 200.0)
    f = lf.forecast(300)
    assert f.rate_rps is not None
    # newest tick at 75 s, open step [60, 120): steps end at 120, 180, ..., 420, the last one holding 375 s
    np.testing.assert_array_equal(f.rate_rps.times_s, [120, 180, 240, 300, 360, 420])
    assert f.rate_rps.point == 10.0 and f.rate_rps.model == "last_value"  # one closed step so far


def test_intervals_bracket_the_point_and_ticks_cannot_go_back() -> None:
    lf = LoadForecaster(step_s=60, season_s=None)
    rng = np.random.default_rng(8)
    for k in range(40 * 4):
        lf.update(15.0 * k, float(10 + rng.normal()), 1000.0, 200.0)
    q = lf.forecast(120).rate_rps
    assert q is not None
    assert 0 <= q.lower <= q.point <= q.upper
    with pytest.raises(ValueError):
        lf.update(0.0, 1.0, 1.0, 1.0)


def test_forecast_pair_equals_two_forecasts() -> None:
    # a trending, noisy series long enough for a selected model and measured intervals: the short
    # forecast cut from the long one is the one forecast(300) makes on its own, and the long is intact
    lf = LoadForecaster(step_s=60, season_s=None, max_horizon_s=600)
    rng = np.random.default_rng(3)
    for k in range(60 * 4):
        lf.update(15.0 * k, float(10 + 0.05 * k + rng.normal()), float(1000 + rng.normal(0, 50)), 200.0)
    short, long = lf.forecast_pair(300, 600)
    for q in ("rate_rps", "mean_input_tokens", "mean_output_tokens"):
        a, b, c = getattr(short, q), getattr(lf.forecast(300), q), getattr(long, q)
        assert a is not None and b is not None and c is not None
        assert (a.point, a.lower, a.upper, a.model) == (b.point, b.lower, b.upper, b.model)
        np.testing.assert_array_equal(a.times_s, b.times_s)
        np.testing.assert_array_equal(a.path.upper, b.path.upper)
        np.testing.assert_array_equal(c.path.mean, getattr(lf.forecast(600), q).path.mean)
    assert len(long.rate_rps.times_s) > len(short.rate_rps.times_s)  # type: ignore[union-attr]
    with pytest.raises(ValueError, match="path_horizon_s"):
        lf.forecast_pair(300, 200)
