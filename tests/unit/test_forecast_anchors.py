"""The Dynamo planner's predictors: input rule, Kalman constants, ARIMA behaviour
(``docs/anchors.md#dynamo-load-predictors``)."""

from __future__ import annotations

import numpy as np

from models.forecast.anchors import DynamoArima, DynamoConstant, DynamoKalman


def test_input_rule_maps_nan_to_zero_and_skips_leading_zeros() -> None:
    c = DynamoConstant()
    c.fit(np.array([0.0, 0.0, np.nan, 5.0, np.inf]))
    # NaN before the first non-zero is a leading zero (skipped); inf after it counts as 0
    assert c.buffer == [5.0, 0.0]
    np.testing.assert_array_equal(c.predict(3), [0.0, 0.0, 0.0])


def test_kalman_first_update_by_hand() -> None:
    k = DynamoKalman()
    k.fit(np.array([10.0, 12.0]))
    # x0 = [10, 0], P0 = 1000 I. Predict: P = F P F' + Q = [[2001, 1000], [1000, 1000.1]].
    # S = 2001 + 10 = 2011, K = [2001, 1000] / 2011, innovation 12 - 10 = 2.
    np.testing.assert_allclose(k.x, [10 + 2 * 2001 / 2011, 2 * 1000 / 2011], rtol=1e-12)
    # Joseph form: P = (I - K H) P (I - K H)' + K R K'; P[0, 0] = (1 - k0)^2 2001 + 10 k0^2 = 10 * 2001 / 2011
    np.testing.assert_allclose(k.P[0, 0], 10 * 2001 / 2011, rtol=1e-12)
    # fewer than 5 points: the last value
    np.testing.assert_array_equal(k.predict(2), [12.0, 12.0])


def test_kalman_extrapolates_level_plus_trend_after_five_points() -> None:
    k = DynamoKalman()
    k.fit(np.arange(1.0, 41.0))  # a perfect ramp: the filter converges to level 40, trend 1
    np.testing.assert_allclose(k.predict(3), [41.0, 42.0, 43.0], atol=0.05)


def test_arima_constant_series_and_minimum_points() -> None:
    a = DynamoArima()
    a.fit(np.array([3.0, 4.0, 5.0, 6.0]))
    np.testing.assert_array_equal(a.predict(2), [6.0, 6.0])  # 4 < 5 points: last value
    b = DynamoArima()
    b.fit(np.full(8, 3.0))
    np.testing.assert_array_equal(b.predict(2), [3.0, 3.0])  # a constant buffer returns the constant


def test_arima_recovers_an_ar1_forecast() -> None:
    rng = np.random.default_rng(5)
    y = np.empty(150)
    y[0] = 50.0
    for t in range(1, 150):
        y[t] = 50 + 0.8 * (y[t - 1] - 50) + rng.normal()
    a = DynamoArima()
    a.fit(y)
    # the optimal one-step forecast of an AR(1) with mean 50 and phi 0.8
    # estimation error: phi +- sqrt((1 - 0.64) / 150) = 0.05 times |y - 50| (a few units), plus the mean's
    assert abs(a.predict(1)[0] - (50 + 0.8 * (y[-1] - 50))) < 0.6
