"""Tests for the sampling-noise floors in models.forecast.metrics, against hand-computed values."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.stats import poisson

from models.forecast.metrics import hindsight_linear_mae, mean_sampling_mad, poisson_mad


def test_poisson_mad_hand_computed() -> None:
    # Poisson(1): median 1; E|N - 1| = P(0) * 1 + sum_{k>=2} (k - 1) P(k) = e^-1 + (E N - 1 + P(0)) = 2/e.
    # Poisson(0.3): median 0, so E|N - 0| = E N = 0.3. Poisson(0) is always 0.
    got = poisson_mad(np.array([1.0, 0.3, 0.0]))
    assert got == pytest.approx([2 / math.e, 0.3, 0.0])


def test_poisson_mad_matches_direct_sum_and_large_mean_limit() -> None:
    k = np.arange(0, 3000)
    for lam in (2.5, 10.0, 150.7):
        m = poisson.median(lam)
        direct = float(np.sum(np.abs(k - m) * poisson.pmf(k, lam)))
        assert poisson_mad(np.array([lam]))[0] == pytest.approx(direct, rel=1e-9)
    # Normal limit sqrt(2 lam / pi) for a large mean.
    assert poisson_mad(np.array([10_000.0]))[0] == pytest.approx(math.sqrt(2e4 / math.pi), rel=1e-3)


def test_poisson_mad_is_the_least_mean_absolute_error_by_simulation() -> None:
    rng = np.random.default_rng(0)
    draws = rng.poisson(7.0, 200_000)
    floor = poisson_mad(np.array([7.0]))[0]
    # No constant prediction does better than the floor (up to sampling error).
    best = min(np.mean(np.abs(draws - c)) for c in np.arange(4.0, 10.0, 0.25))
    assert best == pytest.approx(floor, rel=0.01)


def test_poisson_mad_rejects_bad_means() -> None:
    with pytest.raises(ValueError, match="lam"):
        poisson_mad(np.array([-1.0]))
    with pytest.raises(ValueError, match="lam"):
        poisson_mad(np.array([np.nan]))


def test_mean_sampling_mad() -> None:
    # sd 10 over 4 draws: sqrt(2/pi) * 10 / 2 = 3.989...; n = 0 is undefined (NaN).
    got = mean_sampling_mad(np.array([10.0, 10.0]), np.array([4, 0]))
    assert got[0] == pytest.approx(math.sqrt(2 / math.pi) * 5)
    assert np.isnan(got[1])
    rng = np.random.default_rng(1)
    means = rng.normal(0.0, 3.0, (100_000, 9)).mean(axis=1)
    assert np.mean(np.abs(means)) == pytest.approx(mean_sampling_mad(np.array([3.0]), np.array([9]))[0], rel=0.01)


def test_hindsight_linear_mae_hand_computed() -> None:
    # lags 1, horizon 1 on [1, 2, 3, 10]: points (1, 2), (2, 3), (3, 10). An optimal LAD line passes
    # through two of them: through (1, 2) and (3, 10) (y = 4x - 2) misses (2, 3) by 3, the other two
    # pairs miss the third point by 6. Best total 3 over 3 points: MAE 1.
    assert hindsight_linear_mae(np.array([1.0, 2.0, 3.0, 10.0]), 0, 1, 1) == pytest.approx(1.0, abs=1e-7)


def test_hindsight_linear_mae_is_zero_on_exact_linear_recurrences() -> None:
    # A sinusoid plus a constant obeys y[t+1] - c = 2 cos(w) (y[t] - c) - (y[t-1] - c): y[t+3] is linear
    # in y[t], y[t-1] and 1. It never settles, so last value is far off.
    t = np.arange(200)
    wave = 5 + 3 * np.sin(0.3 * t + 1)
    assert np.mean(np.abs(wave[13:] - wave[10:-3])) > 1.0
    assert hindsight_linear_mae(wave, 10, 3, 2) == pytest.approx(0.0, abs=1e-6)
    # A seasonal series: the value one season back is exact.
    t = np.arange(300)
    season = np.sin(2 * np.pi * t / 24) + (t % 24 == 5)
    assert hindsight_linear_mae(season, 100, 3, 1, period=24) == pytest.approx(0.0, abs=1e-7)


def test_hindsight_linear_mae_never_exceeds_last_value() -> None:
    rng = np.random.default_rng(3)
    walk = np.cumsum(rng.normal(size=400))
    walk[[50, 51, 200]] = np.nan  # missing values are carried forward in features, skipped as targets
    start, h = 100, 3
    got = hindsight_linear_mae(walk, start, h, 4)
    filled = walk.copy()
    for i in range(1, len(filled)):
        if not np.isfinite(filled[i]):
            filled[i] = filled[i - 1]
    origins = [o for o in range(start, len(walk) - h) if np.isfinite(walk[o + h])]
    last_value = float(np.mean([abs(walk[o + h] - filled[o]) for o in origins]))
    assert 0 < got <= last_value + 1e-9


def test_hindsight_linear_mae_rejects_bad_arguments() -> None:
    with pytest.raises(ValueError, match="lags and horizon"):
        hindsight_linear_mae(np.arange(10.0), 0, 0, 1)
    with pytest.raises(ValueError, match="no origin"):
        hindsight_linear_mae(np.full(10, np.nan), 0, 1, 1)
