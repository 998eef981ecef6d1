"""Forecast accuracy metrics: MASE, MAPE and interval coverage, and sampling-noise floors.

MASE (Hyndman & Koehler 2006, "Another look at measures of forecast accuracy") divides the mean
absolute error by a scale fixed per series: here the in-sample mean absolute one-step change of the
training part (the one-step naive forecast's MAE, non-seasonal, m = 1). The same scale serves every
horizon, so MASE at 3 steps compares models at 3 steps; a ratio of two models' MASE at one horizon
does not depend on the scale at all.

Noise floors: a series built from request samples carries noise that no forecaster can remove,
whatever it knows of the past. A bin's request count is at least as variable as a Poisson draw
around its expected value when requests arrive independently given the past (``poisson_mad``); a
bin's mean token length varies around the length distribution's mean by its sampling error
(``mean_sampling_mad``). Their mean over the scored bins, over the MASE scale, bounds any
forecaster's MASE from below under that sampling model.

Hindsight linear bound (``hindsight_linear_mae``): the smallest mean absolute error any linear
predictor from a fixed set of past values reaches on the scored steps, its coefficients chosen on
those same steps. A linear forecaster has to learn its coefficients from the past, so none does
better on average on those features; forecasters that are not linear in them, or that read other
data, are not bounded by it.
"""

from __future__ import annotations

import numpy as np
from scipy.optimize import linprog
from scipy.stats import poisson


def naive_scale(y: np.ndarray) -> float:
    """Mean absolute change between consecutive finite steps of ``y`` (pairs touching NaN are skipped).

    Raises:
        ValueError: no finite consecutive pair, or every change is zero (MASE undefined).
    """
    d = np.abs(np.diff(np.asarray(y, dtype=np.float64)))
    d = d[np.isfinite(d)]
    if len(d) == 0 or d.mean() == 0:
        raise ValueError("MASE scale undefined: no finite non-zero one-step change in the training series")
    return float(d.mean())


def mase(actual: np.ndarray, predicted: np.ndarray, scale: float) -> float:
    """Mean |actual - predicted| / ``scale`` over pairs where both are finite (NaN when none)."""
    e = np.abs(np.asarray(actual, dtype=np.float64) - np.asarray(predicted, dtype=np.float64))
    e = e[np.isfinite(e)]
    return float(e.mean() / scale) if len(e) else float("nan")


def mape(actual: np.ndarray, predicted: np.ndarray) -> float:
    """Mean |actual - predicted| / |actual| in percent, over finite pairs with ``actual`` != 0 (NaN when none)."""
    a = np.asarray(actual, dtype=np.float64)
    p = np.asarray(predicted, dtype=np.float64)
    ok = np.isfinite(a) & np.isfinite(p) & (a != 0)
    return float(100 * np.mean(np.abs(a[ok] - p[ok]) / np.abs(a[ok]))) if ok.any() else float("nan")


def coverage(actual: np.ndarray, lower: np.ndarray, upper: np.ndarray) -> float:
    """Fraction of finite ``actual`` values within [lower, upper] (NaN when none is finite)."""
    a = np.asarray(actual, dtype=np.float64)
    ok = np.isfinite(a)
    if not ok.any():
        return float("nan")
    return float(np.mean((a[ok] >= np.asarray(lower)[ok]) & (a[ok] <= np.asarray(upper)[ok])))


def poisson_mad(lam: np.ndarray) -> np.ndarray:
    """``E|N - median(N)|`` for ``N ~ Poisson(lam)``, elementwise: the least expected absolute error
    of any prediction of a Poisson count with mean ``lam`` (the median minimises it).

    With ``m`` the median, ``E|N - m| = lam - m + 2 E[(m - N)+]`` and
    ``E[(m - N)+] = m F(m-1) - lam F(m-2)`` (``F`` the Poisson CDF, ``k pmf(k) = lam pmf(k-1)``).
    For large ``lam`` it approaches ``sqrt(2 lam / pi)``.

    Raises:
        ValueError: a negative or non-finite ``lam``.
    """
    lam = np.asarray(lam, dtype=np.float64)
    if not np.all(np.isfinite(lam)) or np.any(lam < 0):
        raise ValueError("poisson_mad: lam must be finite and >= 0")
    m = poisson.median(lam)
    return lam - m + 2 * (m * poisson.cdf(m - 1, lam) - lam * poisson.cdf(m - 2, lam))


def mean_sampling_mad(sd: np.ndarray, n: np.ndarray) -> np.ndarray:
    """``E|mean - mu|`` of the mean of ``n`` independent draws with standard deviation ``sd``, by the
    normal approximation: ``sqrt(2/pi) sd / sqrt(n)`` (NaN where ``n`` < 1)."""
    n = np.asarray(n, dtype=np.float64)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(n >= 1, np.sqrt(2 / np.pi) * np.asarray(sd, dtype=np.float64) / np.sqrt(n), np.nan)


def hindsight_linear_mae(y: np.ndarray, start: int, horizon: int, lags: int, period: int | None = None) -> float:
    """Least mean absolute error of a linear predictor of y[t + horizon] from past values, over origins t >= start.

    Features at origin t: 1, y[t], ..., y[t - lags + 1] and, with ``period``, y[t + horizon - period]
    and y[t + horizon - 2 period] (a missing value carries the one before it forward; origins whose
    features or target are missing are skipped). The coefficients minimise the summed absolute error
    over the scored origins themselves: least absolute deviations as an exact linear program
    (``scipy.optimize.linprog``, HiGHS). Last value is one such predictor, so the result never exceeds
    its mean absolute error.

    Raises:
        ValueError: ``lags`` or ``horizon`` < 1, or no origin with finite features and target.
        RuntimeError: the linear program failed.
    """
    if lags < 1 or horizon < 1:
        raise ValueError(f"lags and horizon must be >= 1, got {lags}, {horizon}")
    y = np.asarray(y, dtype=np.float64)
    filled = y.copy()
    for i in range(1, len(filled)):
        if not np.isfinite(filled[i]):
            filled[i] = filled[i - 1]
    rows, target = [], []
    for t in range(max(start, lags - 1), len(y) - horizon):
        season = [filled[t + horizon - k * period] if t + horizon - k * period >= 0 else np.nan
                  for k in (1, 2)] if period else []
        x = np.r_[1.0, filled[t - lags + 1:t + 1][::-1], season]
        if np.isfinite(y[t + horizon]) and np.isfinite(x).all():
            rows.append(x)
            target.append(y[t + horizon])
    if not rows:
        raise ValueError("no origin with finite features and target")
    a, b = np.array(rows), np.array(target)
    n, k = a.shape
    # min sum(u + v) subject to a @ beta + u - v = b, u, v >= 0, beta free
    res = linprog(np.r_[np.zeros(k), np.ones(2 * n)], A_eq=np.hstack([a, np.eye(n), -np.eye(n)]), b_eq=b,
                  bounds=[(None, None)] * k + [(0, None)] * (2 * n), method="highs")
    if not res.success:
        raise RuntimeError(f"least-absolute-deviation fit failed: {res.message}")
    return float(res.fun) / n
