"""One series, forecast online: the backtest-selected model plus empirical 90% intervals."""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass

import numpy as np

from models.forecast.base import PointForecaster, as_series
from models.forecast.baselines import LastValue
from models.forecast.intervals import ResidualIntervals
from models.forecast.selection import candidates, select

MIN_SELECT_STEPS = 13  # 10 fit steps (the smallest model history) + 3 backtest origins


def _change_sd(y: np.ndarray) -> float:
    """Standard deviation of the finite one-step changes of ``y``; NaN with fewer than two."""
    d = np.diff(y)
    d = d[np.isfinite(d)]
    return float(d.std()) if len(d) > 1 else math.nan


@dataclass(frozen=True)
class Forecast:
    """Forecast path for steps 1..h after the newest observation, in the series' units.

    Attributes:
        mean: point forecasts, shape (h,).
        lower: 5th percentile (lower end of the central 90% interval), shape (h,); NaN while unknown
            (the series has fewer than two consecutive finite values to measure its changes by).
        upper: 95th percentile, shape (h,); NaN while unknown, as ``lower``.
        model: name of the model that made it.
    """

    mean: np.ndarray
    lower: np.ndarray
    upper: np.ndarray
    model: str


class AutoForecaster:
    """Online forecaster for one equally spaced series (NaN = missing step, zero = a value).

    Call pattern: optionally ``fit(history)``; then once per step ``update(value)``; ``forecast(h)``
    whenever needed. Every ``reselect_every`` steps the candidates (``selection.candidates``) are
    backtested again on the newest ``max_history`` steps and the best one takes over, with its
    backtest errors seeding the interval. Until ``MIN_SELECT_STEPS`` steps exist (or while the
    history before the backtest holds no finite value) the model is the last value.

    Cost: a step is one model update plus one ``max_horizon`` forecast (microseconds for the
    baselines and Holt-Winters, 2-6 ms for the state-space models); a re-selection costs one fit per
    candidate plus ``origins`` steps each (seconds for ~1,000 steps of history, dominated by the
    ARIMA order search).

    Args:
        period: season length in steps (e.g. 144 for a day of 10-minute windows), or None.
        max_horizon: steps scored by the backtest and tracked by the interval (>= 1).
        origins: backtest origins per selection (>= 3; fewer when the history is short).
        reselect_every: steps between selections (>= 1).
        max_history: steps of history kept for refits (>= MIN_SELECT_STEPS).
        nonnegative: clip forecasts and bounds at 0 (rates and token counts).

    Raises:
        ValueError: an argument out of range.
    """

    def __init__(
        self,
        period: int | None = None,
        max_horizon: int = 6,
        origins: int = 48,
        reselect_every: int = 144,
        max_history: int = 2016,
        nonnegative: bool = True,
    ) -> None:
        if max_horizon < 1 or origins < 3 or reselect_every < 1 or max_history < MIN_SELECT_STEPS:
            raise ValueError(f"bad settings: {max_horizon=}, {origins=}, {reselect_every=}, {max_history=}")
        self.period = period
        self.max_horizon = max_horizon
        self.origins = origins
        self.reselect_every = reselect_every
        self.nonnegative = nonnegative
        self.history: deque[float] = deque(maxlen=max_history)
        self.model: PointForecaster | None = None
        self.intervals = ResidualIntervals(max_horizon)
        self._since_select = 0
        self._provisional = True  # the model is a stand-in until MIN_SELECT_STEPS steps exist
        self._sd1 = math.nan  # sd of one-step changes, the interval before errors exist; NaN: unknown
        self._path = np.zeros(0)

    def fit(self, y: np.ndarray) -> None:
        """Replace the history with ``y`` (shape (n,), NaN = missing) and select a model."""
        self.history.clear()
        self.history.extend(as_series(y))
        self._select()

    def update(self, y: float | None) -> None:
        """Append one step (None or NaN = missing); re-select when due, or once enough history exists."""
        v = float("nan") if y is None or not np.isfinite(y) else float(y)
        self.intervals.observe(v)
        self.history.append(v)
        self._since_select += 1
        due = self._since_select >= self.reselect_every
        if self.model is None or due or (self._provisional and len(self.history) >= MIN_SELECT_STEPS):
            self._select()
        else:
            if self._provisional:  # a stand-in: its fallback interval follows the short history
                self._sd1 = _change_sd(np.array(self.history))
            self.model.update(v)
            self._record(self.model)

    def forecast(self, horizon: int) -> Forecast | None:
        """Path for the next ``horizon`` steps (>= 1), or None while no finite value has been seen."""
        if self.model is None:
            return None
        path = self._path[:horizon] if horizon <= self.max_horizon else self.model.predict(horizon)
        lower, upper = self.intervals.bounds(path, self._sd1)
        if self.nonnegative:
            path, lower, upper = (np.maximum(a, 0.0) for a in (path, lower, upper))
        return Forecast(path, lower, upper, self.model.name)

    def _record(self, model: PointForecaster) -> None:
        self._path = model.predict(self.max_horizon)
        self.intervals.record(self._path)

    def _select(self) -> None:
        y = np.array(self.history)
        self._since_select = 0
        if not np.isfinite(y).any():
            self.model = None
            return
        self._sd1 = _change_sd(y)
        self.intervals = ResidualIntervals(self.max_horizon)
        model: PointForecaster | None = None
        if len(y) >= MIN_SELECT_STEPS:
            origins = min(self.origins, len(y) - 10)
            try:
                best = select(candidates(len(y) - origins, self.period), y, origins, self.max_horizon)
            except ValueError:  # every finite value is in the backtest part (e.g. after a long outage)
                pass
            else:
                model = best.model
                self.intervals.seed(best.errors)
        self._provisional = model is None
        if model is None:
            model = LastValue()
            model.fit(y)
        self.model = model
        self._record(model)
