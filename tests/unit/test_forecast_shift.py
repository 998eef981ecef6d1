"""The forecaster's level-shift rule (models/forecast/auto.py): a step in the level starts a new
segment at that step; noise inside the interval never does."""

from __future__ import annotations

import numpy as np
import pytest

from models.forecast.auto import AutoForecaster, _change_sd
from models.forecast.baselines import LastValue
from models.forecast.intervals import Z90
from models.forecast.selection import Backtest, backtest, beats, early_candidates, select, select_early


def _uniform_noise(n: int, seed: int) -> np.ndarray:
    """Noise bounded in [-1, 1]: a one-step change is at most 2, so no error can leave a 90% interval
    of the right width by half its width (the bound the tests below rely on)."""
    return np.random.default_rng(seed).uniform(-1.0, 1.0, n)


def test_the_threshold_by_hand() -> None:
    # 10, 12, 10, ..., 10 (13 steps, the rule's minimum): one-step changes +-2, sd 2, no error yet,
    # so the one-step interval is the forecast f +- 1.645 * 2 and a shift lies beyond it by more
    # than half its width: f +- 2 * 1.645 * 2.
    f = AutoForecaster(max_horizon=3, detect_shifts=True)
    f.fit(np.array([10.0, 12.0] * 6 + [10.0]))
    fc = f.forecast(1)
    assert fc is not None
    point, edge = float(fc.mean[0]), 2 * Z90 * 2.0
    assert not f.is_shift(point + edge - 0.01)
    assert f.is_shift(point + edge + 0.01)
    assert not f.is_shift(point - edge + 0.01)
    assert f.is_shift(point - edge - 0.01)
    assert not f.is_shift(float("nan"))  # a missing step is no evidence
    # twelve steps: too few changes to measure the spread by, so no shift however far
    g = AutoForecaster(max_horizon=3, detect_shifts=True)
    g.fit(np.array([10.0, 12.0] * 6))
    assert not g.is_shift(1000.0)


def test_a_step_in_the_level_starts_a_segment_at_that_step_and_noise_never_does() -> None:
    n, at = 120, 60
    y = np.where(np.arange(n) < at, 20.0, 40.0) + _uniform_noise(n, 3)
    f = AutoForecaster(max_horizon=10, reselect_every=60, detect_shifts=True)
    fired = []
    for i, v in enumerate(y):
        before = f.shifts
        f.update(float(v))
        if f.shifts > before:
            fired.append(i)
            # reselected at the shift: the last value, not a model fitted across it
            fc = f.forecast(10)
            assert fc is not None and fc.model == "last_value"
            np.testing.assert_array_equal(fc.mean, np.full(10, v))
    assert fired == [at]


def test_without_the_rule_the_shift_widens_the_interval() -> None:
    """After the step the rule's interval comes from the changes without the shift (random walk,
    +-1.645 sd sqrt(h)); without the rule the shift's own errors enter every horizon's interval."""
    n, at = 80, 40
    y = np.where(np.arange(n) < at, 20.0, 40.0) + _uniform_noise(n, 5)
    widths = {}
    for rule in (True, False):
        f = AutoForecaster(max_horizon=10, reselect_every=60, detect_shifts=rule)
        for v in y[: at + 10]:
            f.update(float(v))
        fc = f.forecast(10)
        assert fc is not None
        widths[rule] = fc.upper[-1] - fc.mean[-1]
    # 10 steps after the shift no horizon has 20 errors yet: the rule's interval is the random
    # walk's, 1.645 sd sqrt(10), with sd that of the one-step changes less the shift's
    d = np.diff(y[: at + 10])
    sd = np.delete(d, at - 1).std()
    assert widths[True] == pytest.approx(Z90 * sd * np.sqrt(10))
    assert widths[False] > 2 * widths[True]


def test_a_trend_model_does_not_outlive_a_drop() -> None:
    """Up a ramp, flat, then a drop (the fault suite's pending-pods shape, by hand): after the drop
    the forecast is the new level, not a falling slope towards zero."""
    y = np.concatenate([np.linspace(10, 70, 20), np.full(15, 70.0), np.full(15, 5.0)])
    y = y + 0.5 * _uniform_noise(len(y), 7)
    f = AutoForecaster(max_horizon=10, reselect_every=60, detect_shifts=True)
    for v in y[:36]:  # the drop is step 35
        f.update(float(v))
    assert f.shifts >= 1
    fc = f.forecast(10)
    assert fc is not None and fc.model == "last_value"
    np.testing.assert_allclose(fc.mean, y[35])


def test_the_fallback_spread_drops_a_shift_by_hand() -> None:
    # changes 1, -1 (five each), 50: median 1, MAD 2, so 50 is 49 > 5 * 1.4826 * 2 away and dropped;
    # the sd of five 1s and five -1s is 1
    y = np.cumsum([0.0] + [1, -1] * 5 + [50])
    assert _change_sd(y) == pytest.approx(1.0)
    assert _change_sd(y, robust=False) == pytest.approx(np.diff(y).std())
    # a constant history (MAD 0) keeps every change: ten 0s and a 6
    assert _change_sd(np.array([1.0] * 11 + [7.0])) == pytest.approx(np.sqrt(36 / 11 - (6 / 11) ** 2))
    # fewer than ten changes: the MAD is no measure, nothing is dropped
    short = np.cumsum([0.0, 1, -1, 1, -1, 50])
    assert _change_sd(short) == pytest.approx(np.diff(short).std())


def test_a_short_backtest_scores_the_horizons_it_has() -> None:
    # fit on 1..5, one origin: forecast 5 for the target 6 at horizon 1; horizons 2-3 have none
    r = backtest(LastValue, np.array([1.0, 2.0, 3.0, 4.0, 5.0, 6.0]), origins=1, horizon=3)
    assert r.partial_score == 1.0 and r.score == np.inf


def test_the_fleet_files_key_reaches_every_quantitys_forecaster() -> None:
    """``controller.forecast.detect_shifts`` (on by default) is what the loop's forecast stage builds
    each quantity's ``AutoForecaster`` with."""
    from autoscaler.config.control import ForecastConfig
    from autoscaler.loop.forecast import ForecastStage

    assert ForecastConfig().detect_shifts is True
    for on in (False, True):
        stage = ForecastStage(ForecastConfig(enabled=True, detect_shifts=on))
        assert [m.detect_shifts for m in stage.forecaster.models.values()] == [on, on, on]


def _bt(errors: list[list[float]]) -> Backtest:
    e = np.array(errors, dtype=float)
    return Backtest(LastValue(), np.zeros_like(e), e)


def test_a_challenger_beats_the_last_value_only_by_more_than_the_noise() -> None:
    """The paired one-sided t-test by hand (t quantiles from a table: t(0.95, 3) = 2.353)."""
    inc = _bt([[3.0, 3.0]] * 4)
    # differences 2, 2, 2, 2: no spread, a positive mean
    assert beats(_bt([[1.0, 1.0]] * 4), inc)
    # differences 2, -1, 2, -1: mean 0.5, sd sqrt(3) = 1.732, t = 0.5 / (1.732 / 2) = 0.577 < 2.353
    assert not beats(_bt([[1.0, 1.0], [4.0, 4.0], [1.0, 1.0], [4.0, 4.0]]), inc)
    # differences 2, 1, 2, 1: mean 1.5, sd 0.577, t = 5.20 > 2.353
    assert beats(_bt([[1.0, 1.0], [2.0, 2.0], [1.0, 1.0], [2.0, 2.0]]), inc)
    # per origin the horizons that have a target: origin 4's second horizon has none, so its
    # difference is 3 - 1 = 2 from the first horizon alone (with the NaN read as 0 it would be 2.5)
    inc_nan = _bt([[3.0, 3.0]] * 3 + [[3.0, np.nan]])
    ch_nan = _bt([[1.0, 1.0], [2.0, 2.0], [1.0, 1.0], [1.0, np.nan]])
    d = np.array([2.0, 1.0, 2.0, 2.0])
    t = d.mean() / (d.std(ddof=1) / 2)
    assert t == pytest.approx(7.0) and beats(ch_nan, inc_nan)  # mean 1.75, sd 0.5
    # one origin is no test; a worse challenger never wins
    assert not beats(_bt([[0.0, 0.0]]), _bt([[5.0, 5.0]]))
    assert not beats(inc, _bt([[1.0, 1.0]] * 4))


def test_a_young_segment_keeps_the_last_value_on_a_random_walk_and_takes_a_clear_trend() -> None:
    # random walks, where the last value is the best forecast: the challenger's wins are chance, so
    # the test lets through about its 5 % (a little more: overlapping horizons, ``beats``), where the
    # plain partial-score ranking took a challenger on 75 of 200
    walks = [50.0 + np.cumsum(np.random.default_rng(seed).standard_normal(20)) for seed in range(200)]
    plain = sum(select(early_candidates(), y, 6, 3, partial=True).model.name != "last_value" for y in walks)
    paired = sum(select_early(y, origins=6, horizon=3).model.name != "last_value" for y in walks)
    assert plain > 50 and paired <= 20
    # a clean ramp of 2 per step: the last value misses by 2h at every origin, the trend by ~0
    ramp = 2.0 * np.arange(20.0) + 0.01 * _uniform_noise(20, 1)
    best = select_early(ramp, origins=6, horizon=3)
    assert best.model.name != "last_value"
    assert np.nanmax(np.abs(best.errors)) < 0.5
