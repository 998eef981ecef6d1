"""The control loop's per-tick shortcuts (issue 33) give what the long way gives: the simulated source's
bucket deltas, ``extrapolated_rate``'s shared interval, ``sanitize`` on clean signals, and ``Signals.value``
on a field."""

from __future__ import annotations

import math

import numpy as np
import pytest

from autoscaler.adapters.simulator import _deltas, extrapolated_rate
from autoscaler.loop.estimate import FRACTIONS, _clean, sanitize
from autoscaler.state import DERIVED, ForecastSignals, PrioritySignals, Signals


def test_deltas_are_each_cumulative_bucket_minus_the_one_before() -> None:
    # buckets 1..4 of the vector hold cumulative counts 1, 3, 3, 7.5: per bucket 1, 2, 0, 4.5 (by hand)
    assert _deltas([9.0, 1.0, 3.0, 3.0, 7.5, 100.0], slice(1, 5)) == [1.0, 2.0, 0.0, 4.5]


def test_deltas_have_the_bits_of_numpy_diff() -> None:
    rng = np.random.default_rng(3)
    cum = np.cumsum(rng.random(24) / 7.0)
    got = _deltas([0.5, *cum.tolist()], slice(1, 25))
    want = np.diff(cum, prepend=0.0).tolist()
    assert [x.hex() for x in got] == [x.hex() for x in want]


def test_sanitize_returns_clean_signals_as_they_are() -> None:
    s = Signals(request_rate_rps=2.0, kv_usage=1.0, prefix_hit_rate=0.0, queue_length=0.0,
                by_priority={"batch": PrioritySignals(arrival_rate_rps=1.0)}, arrival_dispersion=1.3)
    warnings: list[str] = []
    assert sanitize(s, warnings, "svc") is s
    assert warnings == []


def test_sanitize_still_drops_derived_signals_and_rejects_bad_values() -> None:
    warnings: list[str] = []
    out = sanitize(Signals(request_rate_rps=2.0, ttft_p95_ratio=1.2), warnings, "svc")
    assert (out.request_rate_rps, out.ttft_p95_ratio, warnings) == (2.0, None, [])
    out = sanitize(Signals(kv_usage=1.5, running=math.nan, queue_length=-1.0,
                           by_priority={"batch": PrioritySignals(wait_s=math.inf)}), warnings, "svc")
    assert (out.kv_usage, out.running, out.queue_length, out.priority("batch").wait_s) == (None, None, None, None)
    assert warnings == ["svc: rejected kv_usage=1.5 (must be finite, >= 0, <= 1)",
                        "svc: rejected queue_length=-1 (must be finite, >= 0)",
                        "svc: rejected gateway_wait_s.batch=inf (must be finite, >= 0)"]


def _clean_by_flat(s: Signals) -> bool:
    """``sanitize``'s test for nothing to change as written before its shortcut: over ``flat()``'s dict."""
    return all(x is None or (0.0 <= x < math.inf and (x <= 1.0 or name not in FRACTIONS))
               for name, x in s.flat(derived=False).items()) and all(getattr(s, n) is None for n in DERIVED)


@pytest.mark.parametrize("bad", [math.nan, -1.0, math.inf, 1.5, 0.5])
def test_sanitize_shortcut_finds_a_bad_value_wherever_flat_has_it(bad: float) -> None:
    # one value set in each place flat() reads it from: the fields (a fraction and not), a derived
    # signal, a priority's, the forecast's, the warmth's (only while known) and the dispersion; 1.5 is
    # bad only as a fraction, 0.5 nowhere but as a derived signal (which sanitize always drops)
    base = {"request_rate_rps": 2.0, "by_priority": {"batch": PrioritySignals(arrival_rate_rps=1.0)},
            "forecast": ForecastSignals(rate_rps=1.0)}
    places = [{"kv_usage": bad}, {"running": bad}, {"prefix_hit_rate": bad}, {"slo_p95_ratio": bad},
              {"by_priority": {"batch": PrioritySignals(wait_s=bad)}},
              {"by_priority": {"batch": PrioritySignals(), "critical": PrioritySignals(queue=bad)}},
              {"forecast": ForecastSignals(output_tokens=bad)},
              {"prefix_hit_rate_forecast": bad, "warmth_known": True},
              {"prefix_hit_rate_forecast": bad, "warmth_known": False},
              {"arrival_dispersion": bad}]
    verdicts = []
    for place in places:
        s = Signals(**{**base, **place})
        assert _clean(s) == _clean_by_flat(s), place
        verdicts.append(_clean(s))
    # by hand: which of the ten places leave nothing to change (True)
    if bad == 0.5:  # fine everywhere but as a derived signal
        hand = [True, True, True, False, True, True, True, True, True, True]
    elif bad == 1.5:  # bad as a fraction (kv_usage, prefix_hit_rate) and as a derived signal only
        hand = [False, True, False, False, True, True, True, True, True, True]
    else:  # nan, -1, inf: bad wherever flat() reads it (the warmth only while known)
        hand = [False, False, False, False, False, False, False, False, True, False]
    assert verdicts == hand


def test_value_reads_a_field_as_flat_does() -> None:
    s = Signals(request_rate_rps=3.0, slo_p95_ratio=0.8, arrival_dispersion=1.7,
                by_priority={"batch": PrioritySignals(arrival_rate_rps=0.5)})
    for name in ("request_rate_rps", "slo_p95_ratio", "ttft_p95_s", "arrival_dispersion", "arrival_rate_rps.batch"):
        assert s.value(name) == s.flat().get(name)
    assert (s.value("request_rate_rps"), s.value("slo_p95_ratio"), s.value("arrival_rate_rps.batch")) == (3.0, 0.8, 0.5)
    assert s.value("ttft_p95_s") is None and s.value("no_such_signal") is None


def test_extrapolated_rate_extrapolates_each_series_to_its_own_zero_point() -> None:
    # samples at 100, 200, 300 s over the window [0, 300]: 200 s sampled, 100 s to the start (within
    # 1.1 intervals, so extrapolated there), none to the end. A: +20 from 10; its zero point (200 x 10
    # / 20 = 100 s back) is not nearer than the start: 20 x 300 / 200 / 300 = 0.1/s. B: +100 from 5,
    # zero 10 s back: 100 x 210 / 200 / 300 = 0.35/s. C: flat, 0. With or without B among the series
    # (the shortcut when no series reaches its zero point inside the window), each gets its own.
    t = np.array([100.0, 200.0, 300.0])
    abc = np.array([[10.0, 5.0, 7.0], [20.0, 55.0, 7.0], [30.0, 105.0, 7.0]])
    every, without_b = extrapolated_rate(t, abc, 0.0, 300.0), extrapolated_rate(t, abc[:, [0, 2]], 0.0, 300.0)
    assert every is not None and without_b is not None
    assert every.tolist() == pytest.approx([0.1, 0.35, 0.0], rel=1e-12)
    assert without_b.tolist() == pytest.approx([0.1, 0.0], rel=1e-12)
