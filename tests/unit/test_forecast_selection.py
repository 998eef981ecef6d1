"""Metrics, empirical intervals and rolling-origin selection, checked by hand."""

from __future__ import annotations

import numpy as np

from models.forecast.auto import AutoForecaster
from models.forecast.baselines import LastValue
from models.forecast.intervals import Z90, ResidualIntervals
from models.forecast.metrics import coverage, mape, mase, naive_scale
from models.forecast.selection import backtest, candidates, select


def test_metrics_by_hand() -> None:
    scale = naive_scale(np.array([1.0, 2.0, np.nan, 4.0, 7.0]))  # changes 1 and 3 (pairs with NaN skipped)
    assert scale == 2.0
    actual, pred = np.array([10.0, 12.0, np.nan]), np.array([11.0, 9.0, 5.0])
    assert mase(actual, pred, scale) == 1.0  # (1 + 3) / 2 / 2
    assert mape(actual, pred) == 100 * (1 / 10 + 3 / 12) / 2
    assert mape(np.array([0.0, 4.0]), np.array([1.0, 5.0])) == 25.0  # zero actuals are skipped
    assert coverage(actual, np.array([9.0, 13.0, 0.0]), np.array([11.0, 14.0, 9.0])) == 0.5


def test_interval_quantiles_by_hand() -> None:
    iv = ResidualIntervals(max_horizon=1, window=200, min_errors=20)
    for e in range(1, 101):  # forecasts of 0 followed by outcomes 1..100: errors 1..100
        iv.record(np.array([0.0]))
        iv.observe(float(e))
    lo, hi = iv.bounds(np.array([0.0]), sd1=0.0)
    # conformal level (1 - 0.05)(1 + 1/100) = 0.9595; linear quantile of 1..100 at q is 1 + 99 q
    np.testing.assert_allclose([lo[0], hi[0]], [1 + 99 * (1 - 0.9595), 1 + 99 * 0.9595])


def test_interval_falls_back_to_the_random_walk_width() -> None:
    lo, hi = ResidualIntervals(max_horizon=3).bounds(np.array([10.0, 10.0, 10.0]), sd1=2.0)
    np.testing.assert_allclose(hi - 10, Z90 * 2.0 * np.sqrt([1, 2, 3]))
    np.testing.assert_allclose(10 - lo, Z90 * 2.0 * np.sqrt([1, 2, 3]))


def test_the_early_interval_is_unknown_then_follows_the_short_history() -> None:
    # One value: no change measured yet, so no interval (not a zero-width one).
    f = AutoForecaster(max_horizon=2)
    f.fit(np.array([10.0]))
    first = f.forecast(2)
    assert first is not None and first.mean[0] == 10.0 and np.isnan(first.lower).all() and np.isnan(first.upper).all()
    # Values 10, 12, 11: one-step changes +2, -1, sd 1.5; still the last-value stand-in (< 13 steps),
    # so the interval is the random-walk one, +-1.645 * 1.5 * sqrt(h) around 11.
    f.update(12.0)
    f.update(11.0)
    g = f.forecast(2)
    assert g is not None
    np.testing.assert_allclose(g.upper - 11.0, Z90 * 1.5 * np.sqrt([1, 2]))
    np.testing.assert_allclose(11.0 - g.lower, Z90 * 1.5 * np.sqrt([1, 2]))


def test_backtest_errors_by_hand() -> None:
    r = backtest(LastValue, np.array([1.0, 2.0, 3.0, 4.0, 5.0, 6.0]), origins=2, horizon=2)
    # fit on 1..4: forecasts [4, 4] for targets [5, 6]; after 5: [5, 5] for [6, beyond the series]
    np.testing.assert_array_equal(r.errors, [[1.0, 2.0], [1.0, np.nan]])
    assert r.score == (1.0 + 2.0) / 2
    assert r.model.predict(1)[0] == 6.0  # walked to the newest value


def test_selection_prefers_a_seasonal_model_on_a_seasonal_series() -> None:
    t = np.arange(144)
    y = 100 + 20 * np.sin(2 * np.pi * t / 24) + np.random.default_rng(6).normal(0, 1, 144)
    best = select(candidates(144 - 24, 24), y, origins=24, horizon=6)
    assert best.model.name not in ("last_value", "local_linear_trend")
    lv = backtest(LastValue, y, origins=24, horizon=6)
    assert best.score < lv.score / 3


def test_empirical_intervals_cover_about_90_percent() -> None:
    """Last value on iid N(0, 1) noise: its one-step errors are N(0, 2); the interval must cover ~90%."""
    rng = np.random.default_rng(7)
    y = 20 + rng.normal(0, 1, 1100)
    model, iv = LastValue(), ResidualIntervals(max_horizon=1)
    model.fit(y[:100])
    iv.record(model.predict(1))
    hits = []
    for v in y[100:]:
        path = model.predict(1)
        lo, hi = iv.bounds(path, sd1=0.0)
        if len(iv.errors[0]) >= iv.min_errors:
            hits.append(lo[0] <= v <= hi[0])
        iv.observe(float(v))
        model.update(float(v))
        iv.record(model.predict(1))
    # ~980 Bernoulli(0.9) outcomes have sd 1.0 %; allow 4 sd
    assert 0.86 <= np.mean(hits) <= 0.94
