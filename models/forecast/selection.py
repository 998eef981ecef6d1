"""Model selection by rolling-origin backtest (FPP3 section 5.10, "time series cross-validation").

A candidate is fitted on all but the last ``origins`` steps, then walked forward one step at a time:
at each origin it forecasts ``horizon`` steps and is updated with the next value. The score is the
mean absolute error averaged over horizons 1..``horizon`` (MASE without its scale, which is the same
for every candidate on one series and so cannot change the ranking). Because the walk ends on the
newest value, the winner is returned already positioned for the next forecast, so choosing a model
costs one fit per candidate plus ``origins`` updates (no refit of the winner).

The median ensemble of every candidate that could be fitted competes too; its backtest is read
off the candidates' recorded forecasts at no extra cost, and its members are the walked candidates.

With few origins the longest horizons have no target yet: ``score`` is then infinite (every candidate
ties and the first, the last value, wins), ``partial_score`` averages the horizons that have one
(``select(..., partial=True)``, used by ``auto.AutoForecaster``'s opt-in level-shift rule).

A young segment's few origins rank models noisily, so there ``select_early`` keeps the last value
unless a challenger beats it by more than the backtest's noise (``beats``: a one-sided paired test on
the origins' errors, the Diebold-Mariano idea without its autocorrelation correction).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
from scipy.stats import t as student_t

from models.forecast.arima import AutoArima
from models.forecast.base import PointForecaster
from models.forecast.baselines import LastValue, SeasonalNaive
from models.forecast.ensemble import MedianEnsemble
from models.forecast.ets import HoltWinters
from models.forecast.llt import LocalLinearTrend

Factory = Callable[[], PointForecaster]


@dataclass
class Backtest:
    """One candidate's rolling-origin result.

    Attributes:
        model: the candidate, fitted and updated through the whole series.
        forecasts: forecast per origin and horizon, shape (origins, horizon).
        errors: actual - forecast, shape (origins, horizon), NaN where the target is missing or
            beyond the series.
    """

    model: PointForecaster
    forecasts: np.ndarray
    errors: np.ndarray

    @property
    def score(self) -> float:
        """Mean absolute error averaged over horizons, series units (inf when a horizon has no score)."""
        per_h = [np.nanmean(np.abs(c)) if np.isfinite(c).any() else np.inf for c in self.errors.T]
        return float(np.mean(per_h))

    @property
    def partial_score(self) -> float:
        """Mean absolute error averaged over the horizons that have a target, series units (inf when none has)."""
        per_h = [float(np.nanmean(np.abs(c))) for c in self.errors.T if np.isfinite(c).any()]
        return float(np.mean(per_h)) if per_h else np.inf


def _targets(y: np.ndarray, origins: int, horizon: int) -> np.ndarray:
    """Actual value for each backtest origin and horizon, shape (origins, horizon), NaN beyond the series."""
    start = len(y) - origins
    idx = start + np.arange(origins)[:, None] + np.arange(horizon)[None, :]
    return np.where(idx < len(y), y[np.minimum(idx, len(y) - 1)], np.nan)


def backtest(factory: Factory, y: np.ndarray, origins: int, horizon: int) -> Backtest:
    """Rolling-origin evaluation of one candidate on ``y`` (shape (n,), NaN = missing).

    Raises:
        ValueError: ``origins`` not in [1, n - 2], or the candidate cannot be fitted on y[:n - origins]
            (too short, no finite value).
    """
    n = len(y)
    if not 1 <= origins <= n - 2:
        raise ValueError(f"origins must be in [1, {n - 2}], got {origins}")
    start = n - origins
    model = factory()
    model.fit(y[:start])
    forecasts = np.empty((origins, horizon))
    for i in range(origins):
        forecasts[i] = model.predict(horizon)
        model.update(float(y[start + i]))
    return Backtest(model, forecasts, _targets(y, origins, horizon) - forecasts)


def candidates(n_fit: int, period: int | None) -> list[Factory]:
    """The candidate models for a fit history of ``n_fit`` steps, simplest first (ties go to it).

    Seasonal variants need two seasons of fit history (Holt-Winters' heuristic initialisation, the
    Fourier fit); seasonal naive needs one.
    """
    seasonal = period if period and n_fit >= 2 * period else None
    out: list[Factory] = [LastValue]
    if period and n_fit >= period:
        out.append(lambda: SeasonalNaive(period))
    if n_fit >= 10:
        out += [
            lambda: HoltWinters(seasonal),
            lambda: AutoArima(seasonal),
            LocalLinearTrend,
        ]
    return out


def early_candidates() -> list[Factory]:
    """The candidates while a segment's backtest is short: the last value and Holt's damped trend.

    A few origins cannot rank six models (the ARIMA order search and the local linear trend then fit
    a slope on a burst); a damped trend is the one trend model whose forecast levels off.
    """
    return [LastValue, lambda: HoltWinters(None)]


CHALLENGE_ALPHA = 0.05
"""One-sided level of ``beats``: a challenger replaces the last value when a difference as large would
arise by chance at most 5 % of the time between two equally good models."""


def _origin_errors(b: Backtest) -> np.ndarray:
    """Mean absolute error per origin over the horizons that have a target, shape (origins,), NaN where none has."""
    a = np.abs(b.errors)
    counts = np.isfinite(a).sum(axis=1)
    sums = np.nansum(a, axis=1)
    return np.where(counts > 0, sums / np.maximum(counts, 1), np.nan)


def beats(challenger: Backtest, incumbent: Backtest, alpha: float = CHALLENGE_ALPHA) -> bool:
    """Whether ``challenger``'s errors are lower than ``incumbent``'s by more than chance: a one-sided
    paired t-test at level ``alpha`` on the per-origin mean absolute errors (origins where both
    have a target; False with fewer than two). Overlapping horizons make neighbouring origins'
    errors correlated, which this test ignores: it is lenient by that much (the Diebold-Mariano
    test would widen the variance by the errors' autocovariances up to lag horizon - 1, which a
    handful of origins cannot estimate).
    """
    d = _origin_errors(incumbent) - _origin_errors(challenger)
    d = d[np.isfinite(d)]
    if len(d) < 2:
        return False
    mean = float(d.mean())
    sd = float(d.std(ddof=1))
    if sd == 0.0:
        return mean > 0.0
    return mean / (sd / np.sqrt(len(d))) > float(student_t.ppf(1.0 - alpha, len(d) - 1))


def select_early(y: np.ndarray, origins: int, horizon: int) -> Backtest:
    """A young segment's selection: the best of ``early_candidates`` and their median by
    ``Backtest.partial_score``, kept only where it ``beats`` the last value; else the last value.

    Raises:
        ValueError: the last value cannot be fitted (no finite value before the backtest).
    """
    incumbent = backtest(LastValue, y, origins, horizon)
    try:
        best = select(early_candidates(), y, origins, horizon, partial=True)
    except ValueError:
        return incumbent
    if isinstance(best.model, LastValue) or not beats(best, incumbent):
        return incumbent
    return best


def select(factories: Sequence[Factory], y: np.ndarray, origins: int, horizon: int, partial: bool = False) -> Backtest:
    """The lowest backtest score among the candidates and their median ensemble (ties: the earlier);
    ``partial``: ranked by ``Backtest.partial_score``.

    Candidates that cannot be fitted are skipped.

    Raises:
        ValueError: no candidate could be fitted.
    """
    results: list[Backtest] = []
    for factory in factories:
        try:
            results.append(backtest(factory, y, origins, horizon))
        except (ValueError, np.linalg.LinAlgError):
            continue
    if not results:
        raise ValueError("no forecasting candidate could be fitted on this history")
    if len(results) >= 2:
        forecasts = np.median([r.forecasts for r in results], axis=0)
        ensemble = MedianEnsemble([r.model for r in results])
        results.append(Backtest(ensemble, forecasts, _targets(y, origins, horizon) - forecasts))
    return min(results, key=lambda r: r.partial_score if partial else r.score)
