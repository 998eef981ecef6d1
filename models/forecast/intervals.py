"""Empirical 90% prediction intervals from a model's own recent errors (split-conformal style).

Every model, anchors included, gets its interval the same way: the h-step interval is the point
forecast plus the 5th and 95th percentiles of the model's last ``window`` h-step errors, with the
split-conformal finite-sample correction (level (1 - a/2)(1 + 1/n), Lei et al. 2018, JASA 113:1094).
Until ``min_errors`` errors exist for a horizon, the interval is the random-walk one,
+-1.645 * sd1 * sqrt(h), with sd1 the standard deviation of the series' one-step changes
(FPP3 section 5.5, naive method).
"""

from __future__ import annotations

from collections import deque

import numpy as np

Z90 = 1.6448536269514722  # standard normal 95th percentile: the half-width of a central 90% interval


class ResidualIntervals:
    """Tracks h-step errors online and turns a point path into a 90% interval.

    Call pattern, once per step: ``observe(y_t)`` with the newest value (NaN = missing), then
    ``record(path)`` with the forecasts just made at this origin, shape (>= 1,), step 1 first;
    ``bounds(path, sd1)`` at any time.

    Args:
        max_horizon: longest horizon tracked, steps (>= 1).
        window: errors kept per horizon (the interval adapts to the newest ``window`` outcomes).
        min_errors: errors needed before a horizon uses its own errors.
        level: central coverage, in (0, 1).

    Raises:
        ValueError: an argument out of range.
    """

    def __init__(self, max_horizon: int, window: int = 200, min_errors: int = 20, level: float = 0.9) -> None:
        if max_horizon < 1 or window < 1 or min_errors < 1 or not 0 < level < 1:
            raise ValueError(f"bad interval settings: {max_horizon=}, {window=}, {min_errors=}, {level=}")
        self.max_horizon = max_horizon
        self.min_errors = min_errors
        self.level = level
        self.errors: list[deque[float]] = [deque(maxlen=window) for _ in range(max_horizon)]
        self._pending: deque[np.ndarray] = deque(maxlen=max_horizon)

    def observe(self, y: float) -> None:
        """Score the pending forecasts whose step is this observation (skipped when ``y`` is NaN)."""
        # _pending[-1] was made one step ago (its step-1 value targets y), _pending[-2] two steps ago, ...
        for age, path in enumerate(reversed(self._pending), start=1):
            if np.isfinite(y) and age <= len(path) and np.isfinite(path[age - 1]):
                self.errors[age - 1].append(float(y - path[age - 1]))

    def record(self, path: np.ndarray) -> None:
        """Remember the forecasts made at the current origin (only the first ``max_horizon`` steps)."""
        self._pending.append(np.asarray(path, dtype=np.float64)[: self.max_horizon].copy())

    def seed(self, errors: np.ndarray) -> None:
        """Add past errors (e.g. from a backtest), shape (n, H), NaN = none; column h is horizon h + 1."""
        for h in range(min(errors.shape[1], self.max_horizon)):
            self.errors[h].extend(float(e) for e in errors[:, h] if np.isfinite(e))

    def bounds(self, path: np.ndarray, sd1: float) -> tuple[np.ndarray, np.ndarray]:
        """Lower and upper 90% bounds for ``path`` (shape (h,)); ``sd1`` >= 0 is the random-walk fallback
        (NaN when unknown: the bounds of horizons without enough errors are then NaN).

        Horizons beyond ``max_horizon`` widen the last tracked horizon's errors by sqrt(h / max_horizon).
        """
        path = np.asarray(path, dtype=np.float64)
        lower, upper = np.empty_like(path), np.empty_like(path)
        alpha = 1 - self.level
        for i in range(len(path)):
            h = min(i, self.max_horizon - 1)
            widen = np.sqrt((i + 1) / (h + 1))
            e = self.errors[h]
            if len(e) >= self.min_errors:
                n = len(e)
                hi = min(1.0, (1 - alpha / 2) * (1 + 1 / n))
                q_lo, q_hi = np.quantile(np.array(e), [1 - hi, hi])
                lower[i], upper[i] = path[i] + widen * q_lo, path[i] + widen * q_hi
            else:
                half = Z90 * sd1 * np.sqrt(i + 1)
                lower[i], upper[i] = path[i] - half, path[i] + half
        return lower, upper
