"""Holt-Winters exponential smoothing: additive damped trend, optional additive season.

Fitted with ``statsmodels.tsa.holtwinters.ExponentialSmoothing``; online updates then run the same
recursions (FPP3 section 8.3, statsmodels' parameterisation) in numpy, O(1) per step, so a tick
costs microseconds instead of a refit:

    l_t = a (y_t - s_{t-m}) + (1 - a)(l_{t-1} + phi b_{t-1})
    b_t = b (l_t - l_{t-1}) + (1 - b) phi b_{t-1}
    s_t = g (y_t - l_{t-1} - phi b_{t-1}) + (1 - g) s_{t-m}
    yhat_{t+h} = l_t + (phi + ... + phi^h) b_t + s_{t+h-m(k+1)}

A missing step (NaN) is replaced by its one-step forecast, which advances the states without
correcting them.
"""

from __future__ import annotations

import warnings

import numpy as np
from statsmodels.tools.sm_exceptions import ConvergenceWarning
from statsmodels.tsa.holtwinters import ExponentialSmoothing

from models.forecast.base import PointForecaster, as_series, interpolate_gaps


class HoltWinters(PointForecaster):
    """Additive damped-trend Holt-Winters, seasonal when ``period`` is set.

    Args:
        period: season length in steps (>= 2), or None for no season (Holt's damped trend).

    With a season the initial states use statsmodels' heuristic initialisation (decomposition
    of the first two seasons), so only the four smoothing parameters are optimised; estimating
    one initial state per season step (144 for a day of 10-minute windows) would dominate the fit.

    Raises:
        ValueError: ``period`` < 2; ``fit`` on fewer than two seasons (seasonal) or 10 steps.
    """

    name = "holt_winters"

    def __init__(self, period: int | None = None) -> None:
        if period is not None and period < 2:
            raise ValueError(f"period must be >= 2 steps or None, got {period}")
        self.period = period
        self._alpha = self._beta = self._gamma = 0.0
        self._phi = 1.0
        self._level = self._trend = 0.0
        self._season = np.zeros(0)

    def fit(self, y: np.ndarray) -> None:
        y = interpolate_gaps(as_series(y))
        m = self.period
        need = 2 * m if m else 10
        if len(y) < need:
            raise ValueError(f"Holt-Winters needs {need} steps of history, got {len(y)}")
        model = ExponentialSmoothing(
            y,
            trend="add",
            damped_trend=True,
            seasonal="add" if m else None,
            seasonal_periods=m,
            initialization_method="heuristic" if m else "estimated",
        )
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)
            res = model.fit()
        p = res.params
        self._alpha = float(p["smoothing_level"])
        self._beta = float(p["smoothing_trend"])
        self._phi = float(p["damping_trend"])
        self._gamma = float(p["smoothing_seasonal"]) if m else 0.0
        self._level = float(res.level[-1])
        self._trend = float(res.trend[-1])
        # season[-m:] holds s_{t-m+1} .. s_t, the components the next m forecasts use
        self._season = np.asarray(res.season[-m:], dtype=np.float64).copy() if m else np.zeros(0)

    def update(self, y: float) -> None:
        if not np.isfinite(y):
            y = float(self.predict(1)[0])
        damped = self._phi * self._trend
        s_old = self._season[0] if self.period else 0.0
        level = self._alpha * (y - s_old) + (1 - self._alpha) * (self._level + damped)
        self._trend = self._beta * (level - self._level) + (1 - self._beta) * damped
        if self.period:
            s_new = self._gamma * (y - self._level - damped) + (1 - self._gamma) * s_old
            self._season = np.append(self._season[1:], s_new)
        self._level = level

    def predict(self, horizon: int) -> np.ndarray:
        steps = np.arange(1, horizon + 1)
        damp_sum = np.cumsum(self._phi**steps)
        out = self._level + damp_sum * self._trend
        if self.period:
            out = out + self._season[(steps - 1) % self.period]
        return out
