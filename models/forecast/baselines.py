"""Baselines: last value and seasonal naive (Hyndman & Athanasopoulos, FPP3 section 5.2)."""

from __future__ import annotations

from collections import deque

import numpy as np

from models.forecast.base import PointForecaster, as_series, last_finite


class LastValue(PointForecaster):
    """Every future step equals the newest finite observation (missing steps are skipped)."""

    name = "last_value"

    def __init__(self) -> None:
        self._last = float("nan")

    def fit(self, y: np.ndarray) -> None:
        self._last = last_finite(as_series(y))

    def update(self, y: float) -> None:
        if np.isfinite(y):
            self._last = float(y)

    def predict(self, horizon: int) -> np.ndarray:
        return np.full(horizon, self._last)


class SeasonalNaive(PointForecaster):
    """Step ``t + h`` equals the observation one season earlier, ``y[t + h - k*period]``.

    ``k`` is the smallest whole number of seasons that reaches back into the history. A missing
    value at that lag falls back to the newest finite observation.

    Args:
        period: season length in steps (e.g. 144 ten-minute windows per day), >= 1.

    Raises:
        ValueError: ``period`` < 1; ``fit`` on fewer than ``period`` steps.
    """

    name = "seasonal_naive"

    def __init__(self, period: int) -> None:
        if period < 1:
            raise ValueError(f"period must be >= 1 step, got {period}")
        self.period = period
        self._season: deque[float] = deque(maxlen=period)
        self._last = float("nan")

    def fit(self, y: np.ndarray) -> None:
        y = as_series(y)
        if len(y) < self.period:
            raise ValueError(f"seasonal naive needs one season ({self.period} steps) of history, got {len(y)}")
        self._last = last_finite(y)
        self._season.clear()
        self._season.extend(y[-self.period :])

    def update(self, y: float) -> None:
        self._season.append(float(y))
        if np.isfinite(y):
            self._last = float(y)

    def predict(self, horizon: int) -> np.ndarray:
        # the buffer holds y[t-period+1 .. t], so step h (1-based) is buffer[(h - 1) % period]
        out = np.array(self._season)[np.arange(horizon) % self.period]
        return np.where(np.isfinite(out), out, self._last)
