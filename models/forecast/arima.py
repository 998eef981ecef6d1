"""ARIMA with automatic order selection, optionally with a Fourier season (dynamic harmonic regression).

Order selection follows ``pmdarima.auto_arima``'s defaults, which the Dynamo planner's ARIMA predictor
uses (Hyndman & Khandakar 2008, "Automatic time series forecasting", J. Stat. Softw. 27(3)):

* ``d``: difference while the KPSS test (level-stationarity null, alpha 0.05) rejects, up to 2;
* ``(p, q)``: stepwise AIC search from (2,2), (0,0), (1,0), (0,1), then repeatedly the eight
  neighbours (p +- 1, q +- 1 and both), ``p, q <= 5`` and ``p + q <= 5``, until no neighbour lowers AIC;
* a constant (drift when d = 1) when ``d < 2``.

Difference from pmdarima, stated: the constant is fixed by ``d`` rather than toggled during the
search. Drift is passed as a time-index regressor because statsmodels' ``extend`` mis-offsets
``trend="t"`` (checked: ``extend`` and ``append`` disagree with it, agree with the regressor).

A season of ``period`` steps enters as ``harmonics`` sine/cosine pairs (FPP3 section 10.5): a
seasonal ARIMA with a 144-step season would carry a state of >= 145 elements and take minutes to fit.
"""

from __future__ import annotations

import itertools
import warnings
from dataclasses import dataclass

import numpy as np
from statsmodels.tools.sm_exceptions import InterpolationWarning
from statsmodels.tsa.arima.model import ARIMA, ARIMAResults
from statsmodels.tsa.stattools import kpss

from models.forecast.base import PointForecaster, as_series, interpolate_gaps

MAX_D = 2  # pmdarima auto_arima default max_d
MAX_PQ = 5  # pmdarima defaults max_p = max_q = max_order = 5
KPSS_ALPHA = 0.05  # pmdarima auto_arima default alpha for the KPSS test


@dataclass(frozen=True)
class ArimaSpec:
    """An ARIMA(p, d, q) order and whether it has a constant (a mean when d = 0, drift when d = 1)."""

    order: tuple[int, int, int]
    constant: bool

    def regressors(self, t: np.ndarray) -> np.ndarray | None:
        """The drift column (step index ``t``, shape (len(t), 1)) when d = 1 with a constant, else None.

        The d = 0 mean is ARIMA's own ``trend="c"``.
        """
        if self.constant and self.order[1] == 1:
            return t.astype(np.float64).reshape(-1, 1)
        return None


class FourierSeason:
    """A season of ``period`` steps as ``harmonics`` sine/cosine pairs, fitted by least squares.

    Args:
        period: season length in steps (>= 2).
        harmonics: number of pairs (>= 1, at most period / 2).

    Raises:
        ValueError: an argument out of range.
    """

    def __init__(self, period: int, harmonics: int) -> None:
        if period < 2 or not 1 <= harmonics <= period / 2:
            raise ValueError(f"need period >= 2 and 1 <= harmonics <= period/2, got {period} and {harmonics}")
        self.period = period
        self.harmonics = harmonics
        self.coef = np.zeros(2 * harmonics)

    def columns(self, t: np.ndarray) -> np.ndarray:
        """Sine/cosine columns at step indices ``t``, shape (len(t), 2 * harmonics)."""
        k = np.arange(1, self.harmonics + 1)
        angle = 2 * np.pi * np.outer(t, k) / self.period
        return np.column_stack([np.sin(angle), np.cos(angle)])

    def fit(self, y: np.ndarray) -> None:
        """Least-squares coefficients on the finite steps of ``y`` (with an intercept, not kept)."""
        t = np.flatnonzero(np.isfinite(y))
        design = np.column_stack([np.ones(len(t)), self.columns(t)])
        self.coef = np.linalg.lstsq(design, y[t], rcond=None)[0][1:]

    def value(self, t: np.ndarray) -> np.ndarray:
        """The seasonal component at step indices ``t``, shape (len(t),), mean zero over a season."""
        return self.columns(t) @ self.coef


def choose_d(y: np.ndarray, max_d: int = MAX_D, alpha: float = KPSS_ALPHA) -> int:
    """Differences needed for the KPSS test not to reject level stationarity at ``alpha``.

    ``y`` must be gap-free (interpolate first). A constant (or constant after differencing) series
    needs no further difference.
    """
    z = np.asarray(y, dtype=np.float64)
    for d in range(max_d + 1):
        if len(z) < 3 or np.ptp(z) == 0:
            return d
        with warnings.catch_warnings():
            # p-values outside KPSS's table are clipped (InterpolationWarning); statsmodels 0.15
            # also warns (FutureWarning) about the tuple it returns
            warnings.simplefilter("ignore", InterpolationWarning)
            warnings.simplefilter("ignore", FutureWarning)
            p_value = kpss(z, regression="c", nlags="auto")[1]
        if p_value >= alpha:
            return d
        z = np.diff(z)
    return max_d


def fit_spec(y: np.ndarray, spec: ArimaSpec) -> ARIMAResults:
    """Maximum-likelihood fit of ``spec`` to ``y`` (NaN = missing, skipped by the Kalman filter).

    Raises:
        numpy.linalg.LinAlgError, ValueError: statsmodels could not fit this order.
    """
    trend = "c" if spec.constant and spec.order[1] == 0 else "n"
    model = ARIMA(y, exog=spec.regressors(np.arange(len(y))), order=spec.order, trend=trend)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # start-parameter and convergence chatter on short series
        return model.fit()


def stepwise_search(y: np.ndarray, max_pq: int = MAX_PQ) -> tuple[ArimaSpec, ARIMAResults]:
    """The lowest-AIC ARIMA for ``y`` by the stepwise search in the module docstring.

    Args:
        y: series (NaN = missing), shape (n,), n >= 5.
        max_pq: bound on p, q and p + q.

    Raises:
        ValueError: no finite value, or no candidate order could be fitted.
    """
    d = choose_d(interpolate_gaps(y))
    tried: dict[tuple[int, int], float] = {}
    fits: dict[tuple[int, int], ARIMAResults] = {}

    def aic(p: int, q: int) -> float:
        if (p, q) not in tried:
            spec = ArimaSpec((p, d, q), d < 2)
            try:
                fits[(p, q)] = fit_spec(y, spec)
                tried[(p, q)] = float(fits[(p, q)].aic)
            except (np.linalg.LinAlgError, ValueError):
                tried[(p, q)] = float("inf")  # pmdarima error_action="ignore"
        return tried[(p, q)]

    best = min([(2, 2), (0, 0), (1, 0), (0, 1)], key=lambda pq: aic(*pq))
    improved = True
    while improved:
        improved = False
        for dp, dq in itertools.product((-1, 0, 1), repeat=2):
            p, q = best[0] + dp, best[1] + dq
            if (dp, dq) == (0, 0) or min(p, q) < 0 or max(p, q) > max_pq or p + q > max_pq:
                continue
            if aic(p, q) < aic(*best):
                best, improved = (p, q), True
                break
    if not np.isfinite(tried[best]):
        raise ValueError("no ARIMA order could be fitted")
    return ArimaSpec((best[0], d, best[1]), d < 2), fits[best]


class AutoArima(PointForecaster):
    """ARIMA chosen by ``stepwise_search``, with an optional Fourier season, filtered forward each step.

    With a ``period``, the season is fitted first by least squares (``FourierSeason``) and the
    ARIMA models what it leaves (regression with ARIMA errors, estimated in two stages: a joint
    maximum-likelihood fit of 8 Fourier coefficients per order tried took ~30 s on 1,008 steps).

    Args:
        period: season length in steps, or None.
        harmonics: sine/cosine pairs; 4 follow a daily shape with a morning and an evening peak.
        max_pq: bound on p, q and p + q (2 keeps a refit to a second or two for online re-selection).

    Parameters stay fixed between fits; ``update`` only runs the Kalman filter (a few ms).

    Raises:
        ValueError: bad ``period``/``harmonics``; ``fit`` on fewer than 10 steps (or two seasons).
        RuntimeError: ``update`` or ``predict`` before ``fit``.
    """

    name = "sarimax"

    def __init__(self, period: int | None = None, harmonics: int = 4, max_pq: int = 2) -> None:
        self.season = FourierSeason(period, harmonics) if period else None
        self.max_pq = max_pq
        self.spec: ArimaSpec | None = None
        self._res: ARIMAResults | None = None
        self._t = 0

    def _seasonal(self, t: np.ndarray) -> np.ndarray:
        return self.season.value(t) if self.season else np.zeros(len(t))

    def fit(self, y: np.ndarray) -> None:
        y = as_series(y)
        need = 2 * self.season.period if self.season else 10
        if len(y) < need:
            raise ValueError(f"ARIMA needs {need} steps of history, got {len(y)}")
        if self.season:
            self.season.fit(y)
        self.spec, self._res = stepwise_search(y - self._seasonal(np.arange(len(y))), self.max_pq)
        self._t = len(y)

    def update(self, y: float) -> None:
        if self._res is None or self.spec is None:
            raise RuntimeError("AutoArima.update before fit")
        t = np.array([self._t])
        z = y - self._seasonal(t)[0] if np.isfinite(y) else np.nan
        self._res = self._res.extend(np.array([z]), exog=self.spec.regressors(t))
        self._t += 1

    def predict(self, horizon: int) -> np.ndarray:
        if self._res is None or self.spec is None:
            raise RuntimeError("AutoArima.predict before fit")
        t = np.arange(self._t, self._t + horizon)
        z = np.asarray(self._res.forecast(horizon, exog=self.spec.regressors(t)), dtype=np.float64)
        return z + self._seasonal(t)
