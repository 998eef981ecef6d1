"""``benchmarks/forecast.py --json``: its model rows, plus one ``hindsight_linear`` row per series."""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
from pathlib import Path

import numpy as np
import pytest
from support.paths import ROOT

from models.forecast.metrics import hindsight_linear_mae, naive_scale

SPEC = importlib.util.spec_from_file_location("bench_forecast", ROOT / "benchmarks" / "forecast.py")
assert SPEC is not None and SPEC.loader is not None
bench = importlib.util.module_from_spec(SPEC)
sys.modules["bench_forecast"] = bench  # its dataclasses look their module up
SPEC.loader.exec_module(bench)


@pytest.mark.slow
def test_json_adds_the_hindsight_linear_row_per_series(monkeypatch: pytest.MonkeyPatch,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    # one short AR(1) series (so the run takes seconds): every model row is kept, and the extra row
    # holds the hindsight linear MASE at 3 steps computed here from the metric itself
    rng = np.random.default_rng(0)
    y = np.empty(160)
    y[0] = 10.0
    for t in range(1, len(y)):
        y[t] = 10.0 + 0.8 * (y[t - 1] - 10.0) + rng.normal()
    series = [bench.Series("ar1", y, None, 30)]
    monkeypatch.setattr(bench, "all_series", lambda data, bin_s: series)
    bench.run(argparse.Namespace(data=Path("."), bin_s=15.0, json=True, cache=False))
    rows = json.loads(capsys.readouterr().out)
    models = {r["model"] for r in rows}
    assert set(bench.models(None)) <= models
    bound = [r for r in rows if r["model"] == "hindsight_linear"]
    assert len(bound) == 1 and bound[0]["dataset"] == "ar1" and bound[0]["horizon_steps"] == 3
    half = len(y) // 2
    expected = hindsight_linear_mae(y, half - 1, 3, bench.HINDSIGHT_LAGS, None) / naive_scale(y[:half])
    assert bound[0]["mase"] == pytest.approx(expected)
    # the bound is a floor for every linear forecaster: no model row at 3 steps beats it by much
    # (the models are fitted causally on less data; last value is one such linear predictor)
    last = next(r for r in rows if r["model"] == "last_value" and r["horizon_steps"] == 3)
    assert bound[0]["mase"] <= last["mase"]
