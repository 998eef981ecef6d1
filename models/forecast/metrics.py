"""Forecast accuracy metrics: MASE, MAPE and interval coverage.

MASE (Hyndman & Koehler 2006, "Another look at measures of forecast accuracy") divides the mean
absolute error by a scale fixed per series: here the in-sample mean absolute one-step change of the
training part (the one-step naive forecast's MAE, non-seasonal, m = 1). The same scale serves every
horizon, so MASE at 3 steps compares models at 3 steps; a ratio of two models' MASE at one horizon
does not depend on the scale at all.
"""

from __future__ import annotations

import numpy as np


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
