"""The NVIDIA Dynamo planner's load predictors, re-implemented as the anchors to beat.

Source: ``ai-dynamo/dynamo`` ``components/src/dynamo/planner/core/load/predictors.py`` and
``config/defaults.py`` (``docs/anchors.md#dynamo-load-predictors``). Shared input rule
(``BasePredictor.add_data_point``): a non-finite value (NaN, +-inf) counts as 0, and zeros before the
first non-zero value (the idle period after a deploy) are skipped, so they are not steps of the
model's series. Fewer than ``min_points`` = 5 accepted values: the forecast is the last value (0 when
there is none).

Dynamo predicts one interval ahead; the h-step forecasts below are the natural extension of each
model (constant: the same value; ARIMA: its h-step forecast; Kalman: level + h * trend).
Forecasts are clipped at 0, as Dynamo's are.
"""

from __future__ import annotations

import math

import numpy as np
from statsmodels.tsa.arima.model import ARIMAResults

from models.forecast.arima import ArimaSpec, stepwise_search
from models.forecast.base import PointForecaster

MIN_POINTS = 5  # Dynamo minimum_data_points (ARIMA) and kalman_min_points
KALMAN_Q_LEVEL = 1.0  # Dynamo defaults.py kalman_q_level
KALMAN_Q_TREND = 0.1  # Dynamo defaults.py kalman_q_trend
KALMAN_R = 10.0  # Dynamo defaults.py kalman_r
KALMAN_P0 = 1000.0  # filterpy P (identity) *= 1000 in KalmanPredictor.__init__


class DynamoPredictor(PointForecaster):
    """Dynamo's input rule and last-value fallback; subclasses add the model."""

    def __init__(self) -> None:
        self._reset()

    def _reset(self) -> None:
        """Forget everything (a fresh predictor)."""
        self.buffer: list[float] = []
        self._seen_nonzero = False

    def _accept(self, value: float) -> bool:
        """Apply the input rule; True when ``value`` became a new step of the buffer."""
        v = float(value) if math.isfinite(value) else 0.0
        if v == 0.0 and not self._seen_nonzero:
            return False
        self._seen_nonzero = self._seen_nonzero or v != 0.0
        self.buffer.append(v)
        return True

    def _last(self, horizon: int) -> np.ndarray:
        return np.full(horizon, self.buffer[-1] if self.buffer else 0.0)

    def fit(self, y: np.ndarray) -> None:
        """Warm start from ``y`` (Dynamo's ``--load-predictor-warmup-trace``): every value is fed in order."""
        self._reset()
        for v in np.asarray(y, dtype=np.float64):
            self.update(float(v))

    def update(self, y: float) -> None:
        self._accept(y)


class DynamoConstant(DynamoPredictor):
    """``ConstantPredictor``: the last accepted value (a missing step therefore predicts 0)."""

    name = "dynamo_constant"

    def predict(self, horizon: int) -> np.ndarray:
        return self._last(horizon)


class DynamoKalman(DynamoPredictor):
    """``KalmanPredictor``: filterpy 2-state local linear trend with Dynamo's fixed noise.

    x = [level, trend], F = [[1, 1], [0, 1]], H = [1, 0], Q = diag(q_level, q_trend) = diag(1, 0.1),
    R = 10, P0 = 1000 I; the first accepted value sets x = [z, 0] (P stays P0). Each later value runs
    predict then update, with filterpy's Joseph-form covariance update.
    """

    name = "dynamo_kalman"
    _F = np.array([[1.0, 1.0], [0.0, 1.0]])
    _H = np.array([1.0, 0.0])
    _Q = np.diag([KALMAN_Q_LEVEL, KALMAN_Q_TREND])

    def _reset(self) -> None:
        super()._reset()
        self.x = np.zeros(2)
        self.P = np.eye(2) * KALMAN_P0

    def update(self, y: float) -> None:
        if not self._accept(y):
            return
        z = self.buffer[-1]
        if len(self.buffer) == 1:
            self.x = np.array([z, 0.0])
            return
        f, h = self._F, self._H
        x = f @ self.x
        p = f @ self.P @ f.T + self._Q
        k = p @ h / (h @ p @ h + KALMAN_R)
        self.x = x + k * (z - h @ x)
        i_kh = np.eye(2) - np.outer(k, h)
        self.P = i_kh @ p @ i_kh.T + KALMAN_R * np.outer(k, k)

    def predict(self, horizon: int) -> np.ndarray:
        if len(self.buffer) < MIN_POINTS:
            return self._last(horizon)
        steps = np.arange(1, horizon + 1)
        return np.maximum(self.x[0] + steps * self.x[1], 0.0)


class DynamoArima(DynamoPredictor):
    """``ARIMAPredictor``: ``pmdarima.auto_arima`` fitted once, then updated with each new value.

    The order comes from ``stepwise_search`` (auto_arima's defaults, see ``models.forecast.arima``).
    If it collapses to (0, d, 0), the model is refitted on ``log1p(y)`` and forecasts are mapped
    back with ``expm1``. A buffer of one repeated value forecasts that value. The fit happens on the
    first ``predict`` with >= 5 values; a failure falls back to the last value, as Dynamo's does.

    Difference, stated: pmdarima's ``update`` also runs a few optimiser iterations on the whole
    history; here the parameters stay as first fitted and new values only run the Kalman filter
    (a full refit per step would cost seconds per tick on a 1,000-step history).
    """

    name = "dynamo_arima"

    def _reset(self) -> None:
        super()._reset()
        self._spec: ArimaSpec | None = None
        self._res: ARIMAResults | None = None
        self._log = False

    def update(self, y: float) -> None:
        if not self._accept(y) or self._res is None or self._spec is None:
            return
        z = math.log1p(max(self.buffer[-1], 0.0)) if self._log else self.buffer[-1]
        t = np.array([len(self.buffer) - 1])
        self._res = self._res.extend(np.array([z]), exog=self._spec.regressors(t))

    def _fit(self) -> tuple[ArimaSpec, ARIMAResults]:
        raw = np.maximum(np.array(self.buffer), 0.0)
        spec, res = stepwise_search(raw)
        self._log = False
        if spec.order[0] == 0 and spec.order[2] == 0:
            spec, res = stepwise_search(np.log1p(raw))
            self._log = True
        self._spec, self._res = spec, res
        return spec, res

    def predict(self, horizon: int) -> np.ndarray:
        if len(self.buffer) < MIN_POINTS:
            return self._last(horizon)
        if len(set(self.buffer)) == 1:
            return self._last(horizon)
        try:
            spec, res = (self._spec, self._res) if self._res is not None and self._spec else self._fit()
            t = np.arange(len(self.buffer), len(self.buffer) + horizon)
            out = np.asarray(res.forecast(horizon, exog=spec.regressors(t)), dtype=np.float64)
        except (np.linalg.LinAlgError, ValueError):
            return self._last(horizon)
        return np.maximum(np.expm1(out) if self._log else out, 0.0)
