"""Load-forecasting models: seasonality recovery, missing steps, and the online Holt-Winters recursion."""

from __future__ import annotations

import numpy as np
import pytest
from statsmodels.tsa.holtwinters import ExponentialSmoothing

from models.forecast.arima import AutoArima, choose_d
from models.forecast.auto import AutoForecaster
from models.forecast.base import as_series, interpolate_gaps
from models.forecast.baselines import LastValue, SeasonalNaive
from models.forecast.ets import HoltWinters
from models.forecast.llt import LocalLinearTrend

PERIOD = 24
AMPLITUDE = 20.0


def seasonal_series(n: int, noise: float = 1.0, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """(noisy series, its noise-free seasonal mean) for steps 0..n+PERIOD-1; the first n are observed."""
    t = np.arange(n + PERIOD)
    clean = 100 + AMPLITUDE * np.sin(2 * np.pi * t / PERIOD)
    return clean[:n] + np.random.default_rng(seed).normal(0, noise, n), clean[n:]


@pytest.mark.parametrize("model", [HoltWinters(PERIOD), AutoArima(PERIOD), SeasonalNaive(PERIOD)], ids=str)
def test_seasonal_models_recover_a_known_period(model: HoltWinters | AutoArima | SeasonalNaive) -> None:
    y, truth = seasonal_series(6 * PERIOD)
    model.fit(y)
    err = np.abs(model.predict(PERIOD) - truth).mean()
    # a forecast blind to the season (flat at the last value) is off by ~2 * 20 / pi = 12.7 on
    # average over a period; recovering the season leaves the noise (sd 1)
    assert np.abs(y[-1] - truth).mean() > 10
    assert err < 0.15 * AMPLITUDE


def test_auto_forecaster_picks_up_the_season() -> None:
    y, truth = seasonal_series(6 * PERIOD, seed=1)
    auto = AutoForecaster(period=PERIOD, max_horizon=PERIOD, origins=24)
    auto.fit(y)
    f = auto.forecast(PERIOD)
    assert f is not None
    assert f.model not in ("last_value", "local_linear_trend")
    assert np.abs(f.mean - truth).mean() < 0.15 * AMPLITUDE


def test_holt_winters_online_update_reproduces_statsmodels() -> None:
    y, _ = seasonal_series(12 * PERIOD, seed=2)
    hw = HoltWinters(PERIOD)
    hw.fit(y[: 10 * PERIOD])
    for v in y[10 * PERIOD :]:
        hw.update(v)
    # statsmodels' own recursion over the whole series with the parameters fitted on the first part
    ref = ExponentialSmoothing(
        y[: 10 * PERIOD],
        trend="add",
        damped_trend=True,
        seasonal="add",
        seasonal_periods=PERIOD,
        initialization_method="heuristic",
    ).fit()
    p = ref.params
    full = ExponentialSmoothing(
        y,
        trend="add",
        damped_trend=True,
        seasonal="add",
        seasonal_periods=PERIOD,
        initialization_method="known",
        initial_level=p["initial_level"],
        initial_trend=p["initial_trend"],
        initial_seasonal=p["initial_seasons"],
    ).fit(
        smoothing_level=p["smoothing_level"],
        smoothing_trend=p["smoothing_trend"],
        smoothing_seasonal=p["smoothing_seasonal"],
        damping_trend=p["damping_trend"],
        optimized=False,
    )
    np.testing.assert_allclose(hw.predict(10), full.forecast(10), rtol=1e-9)


@pytest.mark.parametrize("factory", [LastValue, lambda: HoltWinters(None), lambda: AutoArima(None), LocalLinearTrend])
def test_a_missing_step_advances_the_forecast_without_correcting_it(factory: type) -> None:
    """With NaN the model predicts without correcting: the new path is the old one shifted by a step."""
    rng = np.random.default_rng(3)
    y = 50 + np.cumsum(rng.normal(0, 1, 200))
    y[[20, 21, 22, 90, 150]] = np.nan  # gaps in the fit history too
    model = factory()
    model.fit(y)
    before = model.predict(5)
    model.update(float("nan"))
    after = model.predict(4)
    assert np.all(np.isfinite(after))
    np.testing.assert_allclose(after, before[1:], rtol=1e-6, atol=1e-6)


def test_seasonal_naive_falls_back_to_last_value_for_a_missing_lag() -> None:
    y = np.tile(np.arange(1.0, 5.0), 3)  # 1 2 3 4 1 2 3 4 1 2 3 4, period 4
    y[-3] = np.nan  # the lag that step 2 of the next season would use
    sn = SeasonalNaive(4)
    sn.fit(y)
    np.testing.assert_array_equal(sn.predict(6), [1.0, 4.0, 3.0, 4.0, 1.0, 4.0])


def test_series_helpers_map_non_finite_values_and_fill_gaps() -> None:
    y = as_series([np.inf, 1.0, np.nan, 3.0, -np.inf])
    assert np.isnan(y[[0, 2, 4]]).all()
    np.testing.assert_array_equal(interpolate_gaps(y), [1.0, 1.0, 2.0, 3.0, 3.0])
    with pytest.raises(ValueError):
        interpolate_gaps(as_series([np.nan, np.nan]))


def test_kpss_differencing_order() -> None:
    rng = np.random.default_rng(4)
    noise = rng.normal(0, 1, 400)
    assert choose_d(noise) == 0  # white noise is level-stationary
    assert choose_d(np.cumsum(noise)) == 1  # a random walk needs one difference


def test_auto_forecaster_survives_a_long_outage() -> None:
    """Only the last 3 of 43 steps are known: no candidate can fit before the backtest; last value it is."""
    auto = AutoForecaster(max_horizon=3)
    auto.fit(np.concatenate([np.full(40, np.nan), [5.0, 6.0, 7.0]]))
    f = auto.forecast(2)
    assert f is not None and f.model == "last_value"
    np.testing.assert_array_equal(f.mean, [7.0, 7.0])
    auto.update(None)  # unknown again: still a forecast, never a crash
    assert auto.forecast(1) is not None
