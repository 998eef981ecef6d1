"""Dynamo planner's load predictors: constant (last value) and Kalman local linear trend.

Source (``docs/anchors.md#dynamo-load-predictors``): ai-dynamo/dynamo
``components/src/dynamo/planner/core/load/predictors.py``
and ``components/src/dynamo/planner/config/defaults.py``. Shared rules: NaN/inf observations become
0, and leading zeros (the idle time after a deploy) are skipped; with no data the prediction is None.

The Kalman predictor is the 2-state local-linear-trend filter (filterpy in Dynamo, a few lines of
numpy here): state ``x = [level, trend]``, ``F = [[1, 1], [0, 1]]``, ``H = [1, 0]``,
``Q = diag(q_level, q_trend)`` with ``q_level = 1.0``, ``q_trend = 0.1``, ``R = r = 10.0``,
``P0 = 1000 I``. The first observation initialises ``x = [y, 0]``; each later one is a predict
(``x = F x``, ``P = F P F' + Q``) and update (``K = P H' / (H P H' + R)``, ``x += K (y - H x)``,
``P = (I - K H) P``). The forecast is ``level + trend``, or the last value until
``min_points = 5`` observations have been seen (``kalman_min_points``).
"""

from __future__ import annotations

import math

import numpy as np

KALMAN_Q_LEVEL = 1.0
KALMAN_Q_TREND = 0.1
KALMAN_R = 10.0
KALMAN_P0 = 1000.0
KALMAN_MIN_POINTS = 5


class ConstantPredictor:
    """Predicts the last observed value."""

    def __init__(self) -> None:
        self.values: list[float] = []

    def add(self, value: float) -> None:
        """Observe one interval's value (NaN/inf read as 0; leading zeros skipped)."""
        v = value if math.isfinite(value) else 0.0
        if v == 0.0 and not self.values:
            return
        self.values.append(v)

    def predict(self) -> float | None:
        """Forecast of the next interval's value; None before the first non-zero observation."""
        return self.values[-1] if self.values else None


class KalmanPredictor(ConstantPredictor):
    """Local-linear-trend Kalman filter (module docstring)."""

    F = np.array([[1.0, 1.0], [0.0, 1.0]])
    H = np.array([1.0, 0.0])

    def __init__(self, q_level: float = KALMAN_Q_LEVEL, q_trend: float = KALMAN_Q_TREND, r: float = KALMAN_R,
                 min_points: int = KALMAN_MIN_POINTS) -> None:
        super().__init__()
        self.q = np.diag([q_level, q_trend])
        self.r = r
        self.min_points = min_points
        self.x = np.zeros(2)
        self.p = KALMAN_P0 * np.eye(2)

    def add(self, value: float) -> None:
        """Observe one interval's value and update the filter."""
        n = len(self.values)
        super().add(value)
        if len(self.values) == n:
            return
        y = self.values[-1]
        if n == 0:
            self.x = np.array([y, 0.0])
            return
        x = self.F @ self.x
        p = self.F @ self.p @ self.F.T + self.q
        s = self.H @ p @ self.H + self.r
        k = p @ self.H / s
        self.x = x + k * (y - self.H @ x)
        self.p = (np.eye(2) - np.outer(k, self.H)) @ p

    def predict(self) -> float | None:
        """``level + trend`` once ``min_points`` values were seen, else the last value."""
        if len(self.values) < self.min_points:
            return super().predict()
        return float(self.x[0] + self.x[1])


PREDICTORS = {"constant": ConstantPredictor, "kalman": KalmanPredictor}
