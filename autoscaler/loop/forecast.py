"""Forecast stage: request rate and token mix ahead of time, from the estimate stage's signals.

Each tick it feeds ``models.forecast.LoadForecaster`` with the demand (``demand``: ``served``, the
completions ``request_rate_rps``, the default; ``arrivals``, ``arrival_rate_rps``, the gateway's arrivals or,
without a gateway, completions plus the growth of the requests in the system, ``loop.estimate``) and the mean
prompt and output tokens per request (``served_mix``: the finished requests' lengths over the
completions), None when unknown (a failed query or no traffic is never read as zero tokens; with
``arrivals`` an unknown arrival rate is fed as unknown, never replaced by the completions), and adds
to the estimate's signals, for ``horizon_s`` ahead: ``forecast_rate_rps`` (point), ``forecast_rate_lower_rps`` /
``forecast_rate_upper_rps`` (90% interval), ``forecast_input_tokens``, ``forecast_output_tokens``.
All are None until the forecaster has data. With ``smooth_s`` > 0 (the controller's
``forecast_smooth_s``, ``mpc:smooth_s=S``, opt-in) the request rate fed is the mean of the demand rates
fed over the last ``smooth_s`` seconds (``smoothed``; docs/forecasting.md, "Azure code: a forecast
that swings to 0"). ``ServiceEstimate.rate_forecast`` gets the request-rate
path, reaching ``path_horizon_s`` (a planning controller's horizon) when that is longer.
"""

from __future__ import annotations

import functools
import math
from collections import deque
from dataclasses import replace

from threadpoolctl import ThreadpoolController

from autoscaler.config import ForecastConfig
from autoscaler.state import FORECAST_NAMES, ForecastSignals, RateForecast, ServiceEstimate, Signals
from controllers.base import DEMANDS
from models.forecast import LoadForecaster

FORECAST_SIGNALS = tuple(FORECAST_NAMES.values())
"""The names the forecast signals are exported under (``autoscaler.state.FORECAST_NAMES``)."""


@functools.cache
def blas() -> ThreadpoolController:
    """The process's BLAS libraries, found once: ``threadpool_limits`` looks for them again on each call
    (reading the loaded libraries, ~3 ms a call, once per service per tick: 0.14 s of a 50-service tick,
    issue 35); ``ThreadpoolController.limit`` sets the same limits on the libraries found. numpy's and
    scipy's BLAS are loaded when ``models.forecast`` is imported (numpy, statsmodels), before this runs."""
    return ThreadpoolController()


def _known(x: float) -> float | None:
    """``x``, or None when it is not finite (an interval bound before the series' changes are known)."""
    return x if math.isfinite(x) else None


def per_request(tokens_rps: float | None, rate_rps: float | None) -> float | None:
    """Tokens per request from a token rate and a request rate (both per second).

    None when either is unknown or the request rate is not > 0 (no traffic is not zero tokens).
    """
    if tokens_rps is None or rate_rps is None or rate_rps <= 0:
        return None
    return tokens_rps / rate_rps


def served_mix(sig: Signals, longest: float | None = None) -> tuple[float | None, float | None]:
    """(mean prompt tokens, mean output tokens) per request finished over the signal window.

    Each is the finished requests' tokens over the finished requests (``request_prompt_tokens_rps`` and
    ``request_generation_tokens_rps`` over ``request_rate_rps``: vLLM's ``request_prompt_tokens`` and
    ``request_generation_tokens`` histograms and its e2e latency's count, all observed as a request
    finishes). Where the source has no such histogram (None: SGLang's query set, a custom one), the
    token counters over the completions: SGLang's collector counts both as a request finishes
    (``observe_one_finished_request``), so there the ratio is the finished mix too; vLLM's counters
    count a prompt at its prefill and its request when it completes, so while the fleet prefills far
    more than it finishes (a starved fleet) their ratio reads a mix no request has (issue 28: C2 on
    servegen-day seed 0 read 44k-1.4M prompt tokens a request from 10:00 on). A mean outside
    1..``longest`` tokens (the service's ``max_model_len``: no accepted request is longer; None: no
    bound) is not a mix: None, unknown.
    """
    rate, top = sig.request_rate_rps, math.inf if longest is None else longest
    prompt, output = sig.request_prompt_tokens_rps, sig.request_generation_tokens_rps
    mean_in = per_request(sig.prompt_tokens_rps if prompt is None else prompt, rate)
    mean_out = per_request(sig.generation_tokens_rps if output is None else output, rate)
    return (mean_in if mean_in is not None and 1.0 <= mean_in <= top else None,
            mean_out if mean_out is not None and 1.0 <= mean_out <= top else None)


def smoothed(rates: deque[tuple[float, float | None]], time_s: float, rate_rps: float | None,
             span_s: float) -> float | None:
    """Record ``rate_rps`` (requests/s, None: unknown) at ``time_s`` (seconds) in ``rates`` and return the
    mean of the known rates recorded in ``(time_s - span_s, time_s]``; None where none is known (an unknown
    rate is left out, never read as 0). ``rates`` is pruned of older entries in place.

    Fed one rate per tick, each over the signal window, this is a moving average over about
    ``span_s`` plus one window: on a trace whose arrivals come in bursts minutes apart (Azure code x20:
    no arrival in 19 % of its 60-s windows, docs/forecasting.md) a 60-s rate swings between 0 and the
    burst, and a last-value forecast with it.

    Raises:
        ValueError: ``span_s`` not a finite number > 0, or ``time_s`` before the newest entry.
    """
    if not 0 < span_s < math.inf:
        raise ValueError(f"smoothed: span_s must be a finite number > 0, got {span_s}")
    if rates and time_s < rates[-1][0]:
        raise ValueError(f"smoothed: time {time_s} is before the newest rate's, {rates[-1][0]}")
    rates.append((time_s, rate_rps))
    # ``rates[0][0] < time_s``: a rate recorded at ``time_s`` is in the window whatever ``span_s`` (> 0); with a
    # span below ``time_s``'s float spacing (``mpc:smooth_s=1e-300``) ``time_s - span_s`` rounds to ``time_s``
    # and the test alone popped the rate just recorded, then indexed an empty deque
    while rates[0][0] < time_s and rates[0][0] <= time_s - span_s:
        rates.popleft()
    known = [r for _, r in rates if r is not None and math.isfinite(r)]
    return sum(known) / len(known) if known else None


class ForecastStage:
    """One service's load forecaster; ``rate_model``: the request rate's model (``LoadForecaster``'s:
    ``auto`` or ``arima``, the controller's ``forecast_model``); ``demand``: what it is fed, ``served``
    (the completions) or ``arrivals`` (the controller's ``forecast_demand``; module docstring);
    ``longest``: the longest request the service accepts, tokens (its ``max_model_len``; None: no
    bound), above which a mean length is unknown (``served_mix``); ``smooth_s``: with > 0, the request
    rate fed is ``smoothed`` over that many seconds (0: the rate itself, the default).

    Completions are what the fleet served: while it is overloaded they stay at its capacity whatever
    arrives, and while a backlog drains they count the drain on top of the arrivals (issue 34's
    decode-pool-loss: 24-31 req/s completed at 12 arriving), so a forecast fitted on them reads a
    drain as load and an overload as no rise. The arrivals read neither.

    Raises:
        ValueError: an unknown ``rate_model`` or ``demand``, or ``smooth_s`` not a finite number >= 0.
    """

    def __init__(self, cfg: ForecastConfig, path_horizon_s: float | None = None, rate_model: str = "auto",
                 demand: str = "served", longest: float | None = None, smooth_s: float = 0.0) -> None:
        if demand not in DEMANDS:
            raise ValueError(f"forecast stage: demand must be one of {', '.join(DEMANDS)}, got '{demand}'")
        if not 0 <= smooth_s < math.inf:
            raise ValueError(f"forecast stage: smooth_s must be a finite number >= 0, got {smooth_s}")
        self.smooth_s = smooth_s
        self._rates: deque[tuple[float, float | None]] = deque()
        self.demand = demand
        self.longest = longest
        self.cfg = cfg
        self.path_horizon_s = max(cfg.horizon_s, path_horizon_s or 0.0)
        self.forecaster = LoadForecaster(step_s=cfg.step_s, max_horizon_s=max(self.path_horizon_s, cfg.step_s),
                                         detect_shifts=cfg.detect_shifts, rate_model=rate_model)

    def apply(self, est: ServiceEstimate, window_s: float | None = None) -> ServiceEstimate:
        """Update with ``est``'s signals; ``est`` with the forecast signals and the rate path.

        While the source holds less than ``window_s`` (the signals' window, seconds) of samples
        (``est.history_s``), its rates are over a part of the window: they are not fed (a simulation
        starting at t = 0 would show a ramp from zero that no traffic made, and its errors would
        widen the forecast's interval for as long as they are kept).

        BLAS runs single-threaded meanwhile: the state-space fits multiply small matrices, for which
        OpenBLAS's threads cost far more than they save (the measurement: ``docs/forecasting.md``).
        """
        sig = est.signals
        served = sig.request_rate_rps
        rate = sig.arrival_rate_rps if self.demand == "arrivals" else served
        partial = window_s is not None and est.history_s is not None and est.history_s < window_s
        with blas().limit(limits=1, user_api="blas"):
            if not partial:
                if self.smooth_s > 0:  # recorded; an unknown rate is fed unknown (a gap), not the recent mean
                    mean = smoothed(self._rates, est.time_s, rate, self.smooth_s)
                    rate = None if rate is None else mean
                self.forecaster.update(est.time_s, rate, *served_mix(sig, self.longest))
            f, long = self.forecaster.forecast_pair(self.cfg.horizon_s, self.path_horizon_s)
            path = long.rate_rps
        rate_forecast = None if path is None else RateForecast(
            tuple(path.times_s.tolist()), tuple(path.path.mean.tolist()), tuple(path.path.upper.tolist()))
        forecast = ForecastSignals(
            rate_rps=f.rate_rps.point if f.rate_rps else None,
            rate_lower_rps=_known(f.rate_rps.lower) if f.rate_rps else None,
            rate_upper_rps=_known(f.rate_rps.upper) if f.rate_rps else None,
            input_tokens=f.mean_input_tokens.point if f.mean_input_tokens else None,
            output_tokens=f.mean_output_tokens.point if f.mean_output_tokens else None,
        )
        return replace(est, signals=replace(sig, forecast=forecast), rate_forecast=rate_forecast)
