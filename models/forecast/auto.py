"""One series, forecast online: the backtest-selected model plus empirical 90% intervals.

Level shifts (opt-in: ``AutoForecaster(detect_shifts=True)``; off, the forecaster is the last value
until its first selection at ``MIN_SELECT_STEPS`` steps, whose short backtest the last value wins,
and then selects every ``reselect_every`` steps; why it is off: docs/forecasting.md). An
observation beyond its one-step 90% interval by more than half the interval's width
(``SHIFT_MARGIN``) is read as a level shift: the series has left the regime its model and its
errors describe. The forecaster then starts a new segment: the interval's errors (which would take
the shift's own errors in at every horizon) are dropped, the model is the last value (after a break
there is no evidence about the new regime's dynamics), and the selection restarts on backtest origins
after the shift only, so a trend model fitted across the shift does not carry it on as a slope. The
threshold is two half-widths from the point forecast: with normal errors the 90% half-width is
1.645 sd, so the rule fires at 3.29 sd, a two-sided false-alarm rate of 0.1 % per step (one a
thousand steps, 17 hours of 60-s steps), while a shift of more than 3.29 sd is caught at its first
step. A false alarm costs a reselection and the interval's memory, not the forecast.

While a segment (the series' start, or the steps since a shift) is too short for a backtest that
scores every horizon, the forecaster selects again every step, among the last value and Holt's damped
trend only (``selection.early_candidates``), scoring the horizons that have a target, keeps the last
value unless the trend beats it by more than the backtest's noise (``selection.select_early``), and
keeps the interval's online errors across those selections rather than reseeding it from each one's short
backtest. The random-walk fallback interval measures the spread of one-step changes without those
more than ``OUTLIER_SD`` robust standard deviations from their median (a level shift is one such
change, and would otherwise widen the interval for as long as it is in the history).
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass

import numpy as np

from models.forecast.arima import AutoArima
from models.forecast.base import PointForecaster, as_series
from models.forecast.baselines import LastValue
from models.forecast.intervals import ResidualIntervals
from models.forecast.selection import candidates, select, select_early

MIN_FIT_STEPS = 10  # the smallest model history (Holt-Winters without a season, ets.py)
MIN_ORIGINS = 3  # backtest origins for the first selection of a segment
MIN_SELECT_STEPS = MIN_FIT_STEPS + MIN_ORIGINS
SHIFT_MARGIN = 0.5
"""A level shift: an observation beyond its one-step interval by more than this fraction of the
interval's width (two half-widths from the point: 3.29 sd for normal errors, p = 0.001 two-sided).
The rule waits for ``MIN_SELECT_STEPS`` steps: with the spread measured on 12 changes, a Student t's
tail beyond 3.29 sd is 0.7 %, on 5 changes 3 %."""
MAD_TO_SD = 1.4826  # sd / MAD for normal data (1 / the standard normal's 75th percentile)
OUTLIER_SD = 5.0  # one-step changes this many robust sd from their median are shifts, not noise
MODELS = ("auto", "arima")
"""``AutoForecaster(model=...)``: ``auto`` the backtest selection (module docstring); ``arima`` an
``AutoArima`` (no season) refitted on the newest ``ARIMA_FIT_STEPS`` steps after every step."""
ARIMA_FIT_STEPS = 120
"""Steps an ``arima`` refit reads: two hours of the loop's 60-s steps. It bounds the length each fit of
the stepwise search reads (not tuned: the one-hour scenarios never reach it), not a refit's time: a refit
is about 0.2-0.4 s CPU with one BLAS thread, and each step a tick closes refits, so a tick that closes
several steps at once (a gap) pays one refit each (docs/forecasting.md)."""


def _change_sd(y: np.ndarray, robust: bool = True) -> float:
    """Standard deviation of the finite one-step changes of ``y``; NaN with fewer than two changes.

    ``robust``: without the changes more than ``OUTLIER_SD`` robust sd (MAD_TO_SD * MAD) from their
    median, once ``MIN_FIT_STEPS`` changes exist (on fewer the MAD is no measure: on the Azure conv
    trace's first three changes it dropped the largest and narrowed the interval 5x) and while the
    MAD is not 0.
    """
    d = np.diff(y)
    d = d[np.isfinite(d)]
    if len(d) < 2:
        return math.nan
    med = float(np.median(d))
    mad = float(np.median(np.abs(d - med)))
    if robust and len(d) >= MIN_FIT_STEPS and mad > 0:
        d = d[np.abs(d - med) <= OUTLIER_SD * MAD_TO_SD * mad]
    return float(d.std())


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
    backtest errors seeding the interval. With ``detect_shifts``, a level shift (module docstring) starts a new segment;
    while a segment has fewer than ``min(origins, max_horizon + 2)`` backtest origins (every horizon
    scored on at least three), the selection runs every step among ``selection.early_candidates``,
    and with fewer than ``MIN_ORIGINS`` (or while the history before the backtest holds no finite
    value) the model is the last value.

    Cost: a step is one model update plus one ``max_horizon`` forecast (microseconds for the
    baselines and Holt-Winters, 2-6 ms for the state-space models); an early selection one Holt
    fit (tens of ms); a full selection costs one fit per candidate plus ``origins`` steps each
    (seconds for ~1,000 steps of history, dominated by the ARIMA order search).

    Args:
        period: season length in steps (e.g. 144 for a day of 10-minute windows), or None.
        max_horizon: steps scored by the backtest and tracked by the interval (>= 1).
        origins: backtest origins per selection (>= 3; fewer when the history is short).
        reselect_every: steps between selections (>= 1).
        max_history: steps of history kept for refits (>= MIN_SELECT_STEPS).
        nonnegative: clip forecasts and bounds at 0 (rates and token counts).
        detect_shifts: apply the level-shift rule and the young-segment selection (module
            docstring); off by default: on the MPC's one-hour scenarios it cost attainment on Azure conv
            (docs/forecasting.md). Off: a shift is one more observation. Not read with ``model=arima``.
        model: ``auto`` (the backtest selection) or ``arima`` (``MODELS``): the ARIMA's order and
            parameters estimated again on the newest ``ARIMA_FIT_STEPS`` steps after every step, once
            ``MIN_SELECT_STEPS`` finite steps exist (the last value before, and wherever the fit fails),
            its interval from its own online errors, never reseeded (docs/forecasting.md, "A model that
            follows a swing"). A step's refit costs about 0.2-0.4 s CPU with one BLAS thread, more with
            contending threads; nothing bounds it (docs/forecasting.md).

    Attributes:
        shifts: level shifts detected so far.

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
        detect_shifts: bool = False,
        model: str = "auto",
    ) -> None:
        if max_horizon < 1 or origins < MIN_ORIGINS or reselect_every < 1 or max_history < MIN_SELECT_STEPS:
            raise ValueError(f"bad settings: {max_horizon=}, {origins=}, {reselect_every=}, {max_history=}")
        if model not in MODELS:
            raise ValueError(f"model must be one of {', '.join(MODELS)}, got '{model}'")
        self.refit_arima = model == "arima"
        self.period = period
        self.max_horizon = max_horizon
        self.origins = origins
        self.reselect_every = reselect_every
        self.nonnegative = nonnegative
        self.detect_shifts = detect_shifts
        self.shifts = 0
        self.history: deque[float] = deque(maxlen=max_history)
        self.model: PointForecaster | None = None
        self.intervals = ResidualIntervals(max_horizon)
        self._since_select = 0
        self._since_shift: int | None = None  # steps since the newest shift, counting it; None: none kept
        self._early = True  # the segment's backtest is still short: select every step, keep the interval
        self._sd1 = math.nan  # sd of one-step changes, the interval before errors exist; NaN: unknown
        self._path = np.zeros(0)

    def fit(self, y: np.ndarray) -> None:
        """Replace the history with ``y`` (shape (n,), NaN = missing) and select a model."""
        self.history.clear()
        self.history.extend(as_series(y))
        self.intervals = ResidualIntervals(self.max_horizon)
        self._since_shift = None
        self._early = False
        self._select()

    def update(self, y: float | None) -> None:
        """Append one step (None or NaN = missing); start a segment at a level shift, re-select when due
        or while the segment is young."""
        v = float("nan") if y is None or not np.isfinite(y) else float(y)
        if self.refit_arima:
            self.intervals.observe(v)
            self.history.append(v)
            self._refit()
            return
        if not self.detect_shifts:
            self._update_shipped(v)
            return
        shift = self.is_shift(v)
        if shift:
            self.shifts += 1
            self.intervals = ResidualIntervals(self.max_horizon)  # drops the pending forecasts too
            self._since_shift = 0
        else:
            self.intervals.observe(v)
        self.history.append(v)
        self._since_select += 1
        if self._since_shift is not None:
            self._since_shift += 1
            if self._since_shift > len(self.history):  # the shift has left the kept history
                self._since_shift = None
        if self.model is None or shift or self._early or self._since_select >= self.reselect_every:
            if shift:
                self._early = True
            self._select()
        else:
            self.model.update(v)
            self._record(self.model)

    def _update_shipped(self, v: float) -> None:
        """The rule without level shifts: the last value until ``MIN_SELECT_STEPS`` steps exist, a full
        selection then (the horizons without a backtest target score infinite, so the last value wins
        while the history is short) and every ``reselect_every`` steps."""
        self.intervals.observe(v)
        self.history.append(v)
        self._since_select += 1
        due = self._since_select >= self.reselect_every
        if self.model is None or due or (self._early and len(self.history) >= MIN_SELECT_STEPS):
            self._select()
        else:
            if self._early:  # a stand-in: its fallback interval follows the short history
                self._sd1 = _change_sd(np.array(self.history), robust=False)
            self.model.update(v)
            self._record(self.model)

    def is_shift(self, y: float) -> bool:
        """Whether ``y``, the next observation, is a level shift: beyond the one-step 90% interval of the
        forecast made one step ago by more than ``SHIFT_MARGIN`` of its width (False while the interval
        is unknown, and for a missing ``y``)."""
        if not math.isfinite(y) or self.model is None or len(self._path) == 0 or len(self.history) < MIN_SELECT_STEPS:
            return False
        lo, hi = self.intervals.bounds(self._path[:1], self._sd1)
        width = float(hi[0] - lo[0])
        if not math.isfinite(width):
            return False
        return y > hi[0] + SHIFT_MARGIN * width or y < lo[0] - SHIFT_MARGIN * width

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

    def _origins(self, n: int) -> int:
        """Backtest origins a selection on ``n`` steps may use: after the newest shift (whose value the
        fit must hold), after ``MIN_FIT_STEPS`` of fit history, at most ``origins``."""
        cap = min(self.origins, n - MIN_FIT_STEPS)
        return cap if self._since_shift is None else min(cap, self._since_shift - 1)

    def _refit(self) -> None:
        """``model=arima``: an ``AutoArima`` fitted on the newest ``ARIMA_FIT_STEPS`` steps, or the last
        value while fewer than ``MIN_SELECT_STEPS`` of them are finite or the fit fails; None while no
        value is finite. The interval keeps its online errors."""
        y = np.array(self.history)
        if not np.isfinite(y).any():
            self.model = None
            return
        self._sd1 = _change_sd(y)
        recent = y[-ARIMA_FIT_STEPS:]
        model: PointForecaster | None = None
        if np.isfinite(recent).sum() >= MIN_SELECT_STEPS:
            arima = AutoArima(None)
            try:
                arima.fit(recent)
                arima.predict(self.max_horizon)
            except Exception:  # any failure of the fit or its first forecast: the last value, never a failed tick
                pass
            else:
                model = arima
        if model is None:
            model = LastValue()
            model.fit(y)
        self.model = model
        self._record(model)

    def _select(self) -> None:
        y = np.array(self.history)
        self._since_select = 0
        if not np.isfinite(y).any():
            self.model = None
            return
        if self.refit_arima:
            self._refit()
            return
        if not self.detect_shifts:
            self._select_shipped(y)
            return
        self._sd1 = _change_sd(y)
        origins = self._origins(len(y))
        early = origins < min(self.origins, self.max_horizon + 2)
        model: PointForecaster | None = None
        if origins >= MIN_ORIGINS:
            # the step a young segment's backtest first scores every horizon keeps the early candidates
            # too: a full selection on a dozen origins picked the local linear trend on a ramp and carried
            # its slope past the ramp's top (ramp scenario, docs/forecasting.md)
            full = not early and not self._early
            try:
                if full:
                    best = select(candidates(len(y) - origins, self.period), y, origins, self.max_horizon, partial=True)
                else:
                    best = select_early(y, origins, self.max_horizon)
            except ValueError:  # every finite value is in the backtest part (e.g. after a long outage)
                pass
            else:
                model = best.model
                if full:  # a scheduled selection: its backtest seeds a fresh interval
                    self.intervals = ResidualIntervals(self.max_horizon)
                    self.intervals.seed(best.errors)
        self._early = model is None or early
        if model is None:
            model = LastValue()
            model.fit(y)
        self.model = model
        self._record(model)

    def _select_shipped(self, y: np.ndarray) -> None:
        self._sd1 = _change_sd(y, robust=False)
        self.intervals = ResidualIntervals(self.max_horizon)
        model: PointForecaster | None = None
        if len(y) >= MIN_SELECT_STEPS:
            origins = min(self.origins, len(y) - MIN_FIT_STEPS)
            try:
                best = select(candidates(len(y) - origins, self.period), y, origins, self.max_horizon)
            except ValueError:  # every finite value is in the backtest part (e.g. after a long outage)
                pass
            else:
                model = best.model
                self.intervals.seed(best.errors)
        self._early = model is None  # a stand-in until a selection succeeds
        if model is None:
            model = LastValue()
            model.fit(y)
        self.model = model
        self._record(model)
