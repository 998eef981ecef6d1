"""Median ensemble: the per-step median of several models' forecasts.

Forecast combination is robust where single-model selection on a short backtest is not: one
model that goes wrong (a Holt-Winters trend fitted on a burst, a seasonal naive on a day unlike the
last) is outvoted (FPP3 section 13.4, "Forecast combinations").
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from models.forecast.base import PointForecaster


class MedianEnsemble(PointForecaster):
    """Median over ``members`` of their forecasts, step by step (the mean when there are two).

    Members are used as given: ``fit`` fits each one, ``update`` updates each one.

    Raises:
        ValueError: fewer than two members.
    """

    name = "median_ensemble"

    def __init__(self, members: Sequence[PointForecaster]) -> None:
        if len(members) < 2:
            raise ValueError(f"an ensemble needs >= 2 members, got {len(members)}")
        self.members = list(members)

    def fit(self, y: np.ndarray) -> None:
        for m in self.members:
            m.fit(y)

    def update(self, y: float) -> None:
        for m in self.members:
            m.update(y)

    def predict(self, horizon: int) -> np.ndarray:
        return np.median([m.predict(horizon) for m in self.members], axis=0)
