"""The typed signals (``autoscaler.state.Signals``): the names the fleet file, the query sets and the
exporter use map one to one onto fields, unknown stays None, and unknown names are refused."""

from __future__ import annotations

import dataclasses

import pytest

from autoscaler.state import (
    DERIVED,
    DISPERSION_NAME,
    FORECAST_NAMES,
    PRIORITY_NAMES,
    SIGNALS,
    WARMTH_NAME,
    ForecastSignals,
    PrioritySignals,
    Signals,
)


def test_every_named_signal_is_a_field_in_order() -> None:
    """SIGNALS then DERIVED are the float fields of Signals, in declaration order: a signal added in one
    place and not the other fails here, not at a controller's first lookup."""
    floats = [f.name for f in dataclasses.fields(Signals) if f.type == "float | None"]
    assert floats[:len(SIGNALS) + len(DERIVED)] == [*SIGNALS, *DERIVED]
    assert floats[len(SIGNALS) + len(DERIVED):] == ["prefix_hit_rate_forecast", "arrival_dispersion"]
    assert set(PRIORITY_NAMES) == {f.name for f in dataclasses.fields(PrioritySignals)}
    assert set(FORECAST_NAMES) == {f.name for f in dataclasses.fields(ForecastSignals)}


def test_empty_signals_are_unknown_not_zero() -> None:
    s = Signals()
    assert all(v is None for v in s.flat().values())
    assert list(s.flat()) == [*SIGNALS, *DERIVED]  # no priorities, no forecast, no warmth: absent
    assert s.priority("critical") == PrioritySignals()  # a priority the source did not report: all unknown
    assert s.priority("critical").shed_rps is None


def test_flat_names_round_trip_through_of() -> None:
    """The exported names (``gateway_shed_rps.<priority>``, ...) come back to the same fields."""
    s = Signals(kv_usage=0.5, slo_mean_ratio=1.25,
                by_priority={"sheddable": PrioritySignals(arrival_rate_rps=3.0, shed_rps=1.0)})
    flat = s.flat()
    assert flat["gateway_shed_rps.sheddable"] == 1.0
    assert flat["arrival_rate_rps.sheddable"] == 3.0
    assert flat["gateway_wait_s.sheddable"] is None
    assert Signals.of(flat) == s
    assert s.value("slo_mean_ratio") == 1.25
    assert s.value("gateway_shed_rps.sheddable") == 1.0
    assert s.value("no_such_signal") is None


def test_derived_left_out_on_request() -> None:
    assert "slo_mean_ratio" not in Signals().flat(derived=False)


def test_forecast_and_warmth_appear_once_their_stages_run() -> None:
    forecast = ForecastSignals(**dict.fromkeys(FORECAST_NAMES, 2.0))  # type: ignore[arg-type]
    s = dataclasses.replace(Signals(), forecast=forecast, prefix_hit_rate_forecast=0.4, warmth_known=True)
    flat = s.flat()
    assert all(flat[name] == 2.0 for name in FORECAST_NAMES.values())
    assert flat[WARMTH_NAME] == 0.4
    assert Signals.of(flat) == s  # the forecast's and the warmth's names come back too


def test_the_arrivals_dispersion_appears_only_where_measured() -> None:
    assert DISPERSION_NAME not in Signals().flat()
    s = Signals(arrival_dispersion=3.5)
    assert s.flat()[DISPERSION_NAME] == 3.5
    assert Signals.of(s.flat()) == s


def test_unknown_name_is_refused_with_its_name() -> None:
    with pytest.raises(KeyError, match="unknown signal 'kv_usag'"):
        Signals.of({"kv_usag": 0.5})
    with pytest.raises(KeyError, match="unknown signal 'gateway_shed'"):
        Signals.of({"gateway_shed": 1.0})


def test_signals_are_frozen() -> None:
    with pytest.raises(dataclasses.FrozenInstanceError):
        Signals().kv_usage = 0.5  # type: ignore[misc]
