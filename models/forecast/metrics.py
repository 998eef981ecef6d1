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
"""

from __future__ import annotations

import numpy as np
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
