"""The point-forecaster interface every load model implements, and the series helpers they share.

A series is a 1-D float array of equally spaced observations (one per step); NaN marks a step whose
value is unknown (a scrape failure, a gap). Zero is a value (idle traffic), never "unknown".
"""

from __future__ import annotations

from abc import ABC, abstractmethod

import numpy as np


class PointForecaster(ABC):
    """A model that is fitted on history, updated one step at a time, and predicts a path.

    Call pattern: ``fit(history)`` once, then each step ``update(y)`` with the newest value and
    ``predict(h)`` for the next ``h`` steps. ``update`` after ``fit`` continues the same series.

    Attributes:
        name: short model name used in tables and metrics labels.
    """

    name: str = ""

    @abstractmethod
    def fit(self, y: np.ndarray) -> None:
        """Fit on ``y`` (shape (n,), NaN = missing) and position the model after its last step.

        Raises:
            ValueError: ``y`` has no finite value.
        """

    @abstractmethod
    def update(self, y: float) -> None:
        """Append one step's observation (NaN = missing) without re-estimating parameters."""

    @abstractmethod
    def predict(self, horizon: int) -> np.ndarray:
        """Point forecasts for the next ``horizon`` steps, shape (horizon,), in the series' units."""


def as_series(y: np.ndarray | list[float]) -> np.ndarray:
    """``y`` as a 1-D float64 array with every non-finite value (NaN, +-inf) replaced by NaN.

    Raises:
        ValueError: ``y`` is not 1-D.
    """
    arr = np.array(y, dtype=np.float64)
    if arr.ndim != 1:
        raise ValueError(f"a series must be 1-D, got shape {arr.shape}")
    arr[~np.isfinite(arr)] = np.nan
    return arr


def require_finite(y: np.ndarray) -> None:
    """Raise ``ValueError`` when ``y`` holds no finite value (nothing to fit on)."""
    if not np.isfinite(y).any():
        raise ValueError("the series has no finite value to fit on")


def interpolate_gaps(y: np.ndarray) -> np.ndarray:
    """Fill NaN by linear interpolation between neighbours; edges take the nearest finite value.

    For models (Holt-Winters) whose fitting code cannot skip missing steps; state-space models
    skip them instead.

    Raises:
        ValueError: ``y`` has no finite value.
    """
    require_finite(y)
    idx = np.arange(len(y))
    ok = np.isfinite(y)
    return np.interp(idx, idx[ok], y[ok])


def last_finite(y: np.ndarray) -> float:
    """The newest finite value of ``y``.

    Raises:
        ValueError: ``y`` has no finite value.
    """
    require_finite(y)
    return float(y[np.flatnonzero(np.isfinite(y))[-1]])
