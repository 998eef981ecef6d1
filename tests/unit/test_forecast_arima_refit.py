"""The request rate's ARIMA refitted every step (``AutoForecaster(model="arima")``, ``mpc:forecast=arima``).

The series is a swing whose best forecast is known by hand: a stationary AR(2) around 4.5 req/s,
``y_k - 4.5 = 1.6 (y_{k-1} - 4.5) - 0.8 (y_{k-2} - 4.5) + e_k`` (complex roots of modulus
sqrt(0.8) = 0.894, a swing of about 13.5 steps), e_k normal with sd 0.3 from a fixed seed. Its
conditional mean h steps ahead is the recursion with the errors set to 0, computed below from the
last two values alone. The history ends one step after a trough (103 steps on seed 2), where the
load is about to rise by 2 req/s: the case where issue 28 found the loop's forecaster flat.
"""

from __future__ import annotations

import numpy as np
import pytest

from autoscaler.config import ForecastConfig
from autoscaler.config.loading import default_config
from autoscaler.dryrun import Shadow
from autoscaler.loop.forecast import ForecastStage
from controllers.mpc import STAGE_FORECASTS, MPCController
from models.forecast.auto import AutoForecaster
from models.forecast.load import LoadForecaster

PHI1, PHI2, MU = 1.6, -0.8, 4.5


def swing(seed: int = 2, n: int = 300) -> np.ndarray:
    rng = np.random.default_rng(seed)
    e = rng.normal(0.0, 0.3, n)
    y = np.full(n, MU)
    for k in range(2, n):
        y[k] = MU + PHI1 * (y[k - 1] - MU) + PHI2 * (y[k - 2] - MU) + e[k]
    return y


def trough_turn(y: np.ndarray, start: int) -> int:
    """The first history length >= ``start`` whose last value rises from a trough 1 req/s below the mean."""
    return next(n for n in range(start, len(y))
                if y[n - 1] > y[n - 2] < y[n - 3] and y[n - 2] < MU - 1.0)


def best_forecast(hist: np.ndarray, h: int) -> np.ndarray:
    """The AR(2)'s conditional mean at steps 1..h, by its recursion from the last two values."""
    a, b = hist[-1] - MU, hist[-2] - MU
    out = []
    for _ in range(h):
        a, b = PHI1 * a + PHI2 * b, a
        out.append(MU + a)
    return np.array(out)


def test_the_refitted_arima_follows_the_swing_where_the_last_value_stays_flat() -> None:
    y = swing()
    n = trough_turn(y, 100)
    hist = y[:n]
    truth = best_forecast(hist, 4)
    # by hand from the recursion (seed 2, n = 103): 3.798, 4.449, 4.980, 5.309 req/s; last value 3.16
    assert n == 103
    assert np.allclose(truth, [3.798, 4.449, 4.980, 5.309], atol=1e-3)
    model = AutoForecaster(None, max_horizon=6, model="arima")
    model.fit(hist)
    f = model.forecast(4)
    assert f is not None and f.model == "sarimax"
    assert np.all(np.abs(f.mean - truth) < 0.3)  # within a tenth of the 2.15 req/s the load rises
    # the last value is 2.15 req/s under the best forecast 4 steps ahead
    assert truth[-1] - hist[-1] > 2.0


def test_the_loops_default_keeps_the_last_value_on_the_same_swing() -> None:
    """The default (``model=auto``, the loop's level-shift rule on, a reselection an hour after the
    young segment's) fed the swing step by step for under an hour (32 steps, to the first trough's
    turn): a flat mean at the last step's value, 2.875 req/s, where the recursion's best forecast 4
    steps ahead is 4.923. The defect ``model=arima`` is for."""
    y = swing()
    n = trough_turn(y, 20)
    hist = y[:n]
    assert n < 60  # within the hour: no scheduled full selection yet
    lf = LoadForecaster(step_s=60.0, max_horizon_s=600.0, detect_shifts=True)
    for k, v in enumerate(hist):
        lf.update(60.0 * k + 30.0, float(v), None, None)
    lf.update(60.0 * n + 30.0, None, None, None)  # closes the last step; this one unknown
    f = lf.forecast(240.0).rate_rps
    assert f is not None and f.model == "last_value"
    assert np.all(f.path.mean == hist[-1])
    truth = best_forecast(hist, 4)
    assert truth[-1] - f.path.mean[3] > 1.0


def test_the_stage_builds_the_rate_model_asked_for_and_refuses_others() -> None:
    stage = ForecastStage(ForecastConfig(), 600.0, "arima")
    models = stage.forecaster.models
    assert models["rate_rps"].refit_arima and not models["mean_input_tokens"].refit_arima
    assert not ForecastStage(ForecastConfig(), 600.0).forecaster.models["rate_rps"].refit_arima
    with pytest.raises(ValueError, match="model must be one of auto, arima, got 'ets'"):
        AutoForecaster(model="ets")
    assert STAGE_FORECASTS == ("auto", "arima")


def test_too_short_a_history_is_the_last_value_and_no_value_is_no_forecast() -> None:
    model = AutoForecaster(None, max_horizon=3, model="arima")
    assert model.forecast(3) is None
    for v in (2.0, float("nan"), 3.0):
        model.update(v)
    f = model.forecast(3)
    assert f is not None and f.model == "last_value" and np.all(f.mean == 3.0)


def test_mpc_forecast_arima_asks_the_loop_for_the_refitted_rate_and_plain_mpc_does_not() -> None:
    cfg = default_config()
    weights = {cfg.services[0].name: {v.name: 1.0 for v in cfg.services[0].variants}}
    arima = MPCController(cfg, weights, forecast="arima")
    plain = MPCController(cfg, weights)
    assert (arima.forecast_model, plain.forecast_model) == ("arima", "auto")
    assert arima.forecast_horizon_s == plain.forecast_horizon_s == 40 * cfg.controller.tick_s
    assert Shadow(arima).forecast_model == "arima"  # the dry-run wrapper passes it on
    with pytest.raises(ValueError, match="forecast must be one of auto, arima, last, perfect, got 'ets'"):
        MPCController(cfg, weights, forecast="ets")


def test_the_control_loop_builds_the_refitted_rate_for_mpc_forecast_arima_only() -> None:
    """The runner hands the controller's ``forecast_model`` to each service's forecast stage: without it
    ``mpc:forecast=arima`` would run on ``auto`` with every test above still passing."""
    from autoscaler.loop.runner import ControlLoop

    cfg = default_config()
    weights = {cfg.services[0].name: {v.name: 1.0 for v in cfg.services[0].variants}}
    for spec, refit in (("arima", True), ("auto", False)):
        loop = ControlLoop(cfg, None, None, MPCController(cfg, weights, forecast=spec))  # type: ignore[arg-type]
        models = loop.forecasts[cfg.services[0].name].forecaster.models
        assert models["rate_rps"].refit_arima is refit and not models["mean_input_tokens"].refit_arima


def test_a_fit_that_fails_in_any_way_falls_back_to_the_last_value(monkeypatch: pytest.MonkeyPatch) -> None:
    """A statsmodels failure of any kind (not only ValueError) in the fit or its first forecast gives the
    last finite value, never an exception out of the tick."""
    from models.forecast import auto

    y = swing()[:40]
    for where in ("fit", "predict"):
        def boom(self: object, *a: object, **k: object) -> None:
            raise RuntimeError("the optimiser diverged")

        with monkeypatch.context() as m:
            m.setattr(auto.AutoArima, where, boom)
            model = AutoForecaster(None, max_horizon=3, model="arima")
            for v in y:
                model.update(float(v))
            model.update(float("nan"))
            f = model.forecast(3)
        assert f is not None and f.model == "last_value" and np.all(f.mean == y[-1])
