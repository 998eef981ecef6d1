"""The control loop's load forecaster: request rate and token mix, fed every tick, forecast ahead.

Ticks (every 15 s in the example fleet) are averaged into steps of ``step_s`` seconds; each closed
step feeds one ``AutoForecaster`` per quantity. A step with no known value is NaN for that quantity
(a scrape failure is unknown load, never zero load), and steps skipped by a gap between ticks are NaN.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from models.forecast.auto import AutoForecaster, Forecast

QUANTITIES = ("rate_rps", "mean_input_tokens", "mean_output_tokens")


@dataclass(frozen=True)
class QuantityForecast:
    """One quantity's forecast.

    Attributes:
        point: forecast at ``now + horizon_s``, in the quantity's units (requests/s or tokens).
        lower: 5th percentile there (lower end of the central 90% interval); NaN while unknown.
        upper: 95th percentile there; the value an MPC plans capacity on; NaN while unknown.
        model: name of the model in use.
        times_s: end time of every step up to the horizon, seconds, shape (k,).
        path: the per-step forecast (mean, lower, upper), each of shape (k,).
    """

    point: float
    lower: float
    upper: float
    model: str
    times_s: np.ndarray
    path: Forecast


@dataclass(frozen=True)
class LoadForecast:
    """Forecasts of the three load quantities at ``time_s + horizon_s``; None while one is unknown."""

    time_s: float
    horizon_s: float
    rate_rps: QuantityForecast | None
    mean_input_tokens: QuantityForecast | None
    mean_output_tokens: QuantityForecast | None


class LoadForecaster:
    """Online forecaster of request rate (requests/s) and mean input/output tokens per request.

    Call pattern, from the loop's estimate stage::

        lf = LoadForecaster(step_s=60, season_s=86400)
        every tick: lf.update(t_s, rate_rps, mean_input_tokens, mean_output_tokens)  # None = unknown
        f = lf.forecast(horizon_s=300)
        f.rate_rps.point, f.rate_rps.upper, f.rate_rps.model   # f.rate_rps is None before any data

    Each closed step costs one model update and forecast per quantity: microseconds for the
    baselines and Holt-Winters, ~2-6 ms for a state-space model, up to ~10 ms for the median
    ensemble, so well under 30 ms per step for the three quantities. Every ``reselect_s`` seconds
    the models are re-selected by rolling-origin backtest: under 0.5 s on an hour of 60-s steps,
    seconds once days of history are kept (the ARIMA order search dominates).

    Args:
        step_s: forecast step, seconds (> 0); ticks within a step are averaged.
        season_s: seasonal period, seconds (e.g. 86400 for daily), or None; seasonal models join
            once two seasons of history exist.
        max_horizon_s: longest horizon the intervals are calibrated for, seconds (> 0).
        reselect_s: seconds between model selections (>= step_s).
        history_steps: steps of history kept for refits (default: two seasons and a backtest, or
            1,440 steps without a season).
        detect_shifts: the level-shift rule of ``AutoForecaster`` (off unless asked for; the loop asks
            by its fleet-file key ``controller.forecast.detect_shifts``, on by default:
            docs/forecasting.md gives its measurements).
        rate_model: the request rate's model, ``AutoForecaster``'s ``model``: ``auto`` (the backtest
            selection, as the token means always are) or ``arima`` (refitted every step, opt-in:
            docs/forecasting.md, "A model that follows a swing").

    Raises:
        ValueError: an argument out of range.
    """

    def __init__(
        self,
        step_s: float = 60.0,
        season_s: float | None = 86400.0,
        max_horizon_s: float = 600.0,
        reselect_s: float = 3600.0,
        history_steps: int | None = None,
        detect_shifts: bool = False,
        rate_model: str = "auto",
    ) -> None:
        if step_s <= 0 or max_horizon_s <= 0 or reselect_s < step_s or (season_s is not None and season_s < 2 * step_s):
            raise ValueError(f"bad settings: {step_s=}, {season_s=}, {max_horizon_s=}, {reselect_s=}")
        self.step_s = step_s
        period = round(season_s / step_s) if season_s else None
        max_h = math.ceil(max_horizon_s / step_s)
        origins = 48
        history = history_steps or (2 * period + origins if period else 1440)
        self.models = {
            q: AutoForecaster(period, max_h, origins, max(1, round(reselect_s / step_s)), history,
                              detect_shifts=detect_shifts, model=rate_model if q == "rate_rps" else "auto")
            for q in QUANTITIES
        }
        self._step: int | None = None  # index of the step being accumulated
        self._sums = dict.fromkeys(QUANTITIES, 0.0)
        self._counts = dict.fromkeys(QUANTITIES, 0)
        self._t_last: float | None = None

    def update(
        self,
        t_s: float,
        rate_rps: float | None,
        mean_input_tokens: float | None,
        mean_output_tokens: float | None,
    ) -> None:
        """Record one tick at ``t_s`` seconds; None (or NaN) means unknown for that quantity.

        Raises:
            ValueError: ``t_s`` earlier than the previous tick.
        """
        if self._t_last is not None and t_s < self._t_last:
            raise ValueError(f"ticks must not go back in time: {t_s} after {self._t_last}")
        self._t_last = t_s
        step = math.floor(t_s / self.step_s)
        if self._step is None:
            self._step = step
        while self._step < step:  # close the open step, then any steps the gap skipped
            self._close()
            self._step += 1
        for q, v in zip(QUANTITIES, (rate_rps, mean_input_tokens, mean_output_tokens), strict=True):
            if v is not None and math.isfinite(v):
                self._sums[q] += v
                self._counts[q] += 1

    def _close(self) -> None:
        for q, model in self.models.items():
            model.update(self._sums[q] / self._counts[q] if self._counts[q] else None)
            self._sums[q], self._counts[q] = 0.0, 0

    def _steps(self, horizon_s: float) -> tuple[float, float, int]:
        """(newest tick time, end of the open step, steps reaching ``horizon_s`` after the newest tick)."""
        now = self._t_last if self._t_last is not None else 0.0
        first_end = (self._step + 1) * self.step_s if self._step is not None else self.step_s
        return now, first_end, max(1, math.ceil((now + horizon_s - first_end) / self.step_s) + 1)

    def forecast(self, horizon_s: float) -> LoadForecast:
        """Forecast each quantity ``horizon_s`` seconds (> 0) after the newest tick.

        The step containing the newest tick is still open, so step 1 of a path ends where it ends.

        Raises:
            ValueError: ``horizon_s`` <= 0.
        """
        if horizon_s <= 0:
            raise ValueError(f"horizon_s must be > 0, got {horizon_s}")
        now, first_end, k = self._steps(horizon_s)
        times = first_end + self.step_s * np.arange(k)
        out: dict[str, QuantityForecast | None] = {}
        for q, model in self.models.items():
            f = model.forecast(k)
            out[q] = (
                None
                if f is None
                else QuantityForecast(float(f.mean[-1]), float(f.lower[-1]), float(f.upper[-1]), f.model, times, f)
            )
        return LoadForecast(now, horizon_s, out["rate_rps"], out["mean_input_tokens"], out["mean_output_tokens"])

    def forecast_pair(self, horizon_s: float, path_horizon_s: float) -> tuple[LoadForecast, LoadForecast]:
        """``forecast(horizon_s)`` and ``forecast(path_horizon_s)`` (>= ``horizon_s``) from one forecast:
        the shorter is the longer's first steps (every model's path and interval at a step do not
        depend on how far past it the path reaches).

        Raises:
            ValueError: ``horizon_s`` <= 0 or ``path_horizon_s`` < ``horizon_s``.
        """
        if path_horizon_s < horizon_s:
            raise ValueError(f"path_horizon_s must be >= horizon_s, got {path_horizon_s} < {horizon_s}")
        long = self.forecast(path_horizon_s)
        k = self._steps(horizon_s)[2]

        def cut(q: QuantityForecast | None) -> QuantityForecast | None:
            if q is None:
                return None
            p = Forecast(q.path.mean[:k], q.path.lower[:k], q.path.upper[:k], q.path.model)
            return QuantityForecast(float(p.mean[-1]), float(p.lower[-1]), float(p.upper[-1]), q.model,
                                    q.times_s[:k], p)

        short = LoadForecast(long.time_s, horizon_s, cut(long.rate_rps), cut(long.mean_input_tokens),
                             cut(long.mean_output_tokens))
        return short, long
