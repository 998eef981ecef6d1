"""Local-linear-trend state-space model with fitted noise variances (statsmodels UnobservedComponents).

The same model as the Dynamo planner's Kalman predictor (level + trend, F = [[1, 1], [0, 1]]), but
the level, trend and observation variances are estimated by maximum likelihood instead of fixed at
q_level = 1, q_trend = 0.1, r = 10 (``docs/anchors.md#dynamo-load-predictors``), which only suit one scale of series.
"""

from __future__ import annotations

import warnings

import numpy as np
from statsmodels.tsa.statespace.structural import UnobservedComponents, UnobservedComponentsResults

from models.forecast.base import PointForecaster, as_series, require_finite


class LocalLinearTrend(PointForecaster):
    """Local linear trend, fitted by MLE, then filtered forward one step per ``update`` (~2 ms).

    Missing steps (NaN) are skipped by the Kalman filter (prediction without correction).

    Raises:
        ValueError: ``fit`` on fewer than 10 steps or no finite value.
        RuntimeError: ``update`` or ``predict`` before ``fit``.
    """

    name = "local_linear_trend"

    def __init__(self) -> None:
        self._res: UnobservedComponentsResults | None = None

    def fit(self, y: np.ndarray) -> None:
        y = as_series(y)
        require_finite(y)
        if len(y) < 10:
            raise ValueError(f"the local linear trend needs 10 steps of history, got {len(y)}")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # optimiser convergence chatter on flat or short series
            self._res = UnobservedComponents(y, level="local linear trend").fit(disp=False)

    def update(self, y: float) -> None:
        if self._res is None:
            raise RuntimeError("LocalLinearTrend.update before fit")
        self._res = self._res.extend(np.array([y if np.isfinite(y) else np.nan]))

    def predict(self, horizon: int) -> np.ndarray:
        if self._res is None:
            raise RuntimeError("LocalLinearTrend.predict before fit")
        return np.asarray(self._res.forecast(horizon), dtype=np.float64)
