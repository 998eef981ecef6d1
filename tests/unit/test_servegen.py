"""ServeGen client folders -> per-request arrivals (``autoscaler.workload.servegen``), and ``--span``."""

from __future__ import annotations

import csv
import math
from pathlib import Path

import numpy as np
import pytest

from autoscaler.errors import TraceError
from autoscaler.workload.build import build_workload, crop, parse_span
from autoscaler.workload.servegen import load_servegen
from autoscaler.workload.synthetic import BLOCK_TOKENS
from autoscaler.workload.types import Request, Workload


def write_client(folder: Path, client: int, rows: list[tuple[float, float, str, float]]) -> None:
    """``chunk-<client>-trace.csv`` with (window start, rate, dist, shape) rows; cv and scale filled in."""
    lines = [f"{t:g},{r:g},1.0,{d},{k:g},1.0" if r > 0 else f"{t:g},0,0,,0,0" for t, r, d, k in rows]
    (folder / f"chunk-{client}-trace.csv").write_text("\n".join(lines) + "\n")


def gaps_cv(wl: Workload, start: float, end: float) -> float:
    t = np.array([r.arrival_s for r in wl.requests if start <= r.arrival_s < end])
    g = np.diff(t)
    return float(g.std() / g.mean())


def test_window_rates_burstiness_and_span(tmp_path: Path) -> None:
    # client 0: Poisson 2 req/s in window 0, nothing in window 1, Gamma shape 0.25 (CV 2) at 1 req/s in
    # window 2; client 1: Weibull shape 0.5 at 0.5 req/s in every window.
    write_client(tmp_path, 0, [(0, 2.0, "Gamma", 1.0), (600, 0, "", 0), (1200, 1.0, "Gamma", 0.25)])
    write_client(tmp_path, 1, [(0, 0.5, "Weibull", 0.5), (600, 0.5, "Weibull", 0.5), (1200, 0.5, "Weibull", 0.5)])
    counts = {0: [], 1: []}
    for seed in range(20):
        wl = load_servegen(tmp_path, 0, 1800, seed=seed)
        assert all(0 <= r.arrival_s < 1800 for r in wl.requests)
        for r in wl.requests:
            assert r.input_tokens >= 1 and r.output_tokens >= 1
            assert len(r.hash_ids) == -(-r.input_tokens // BLOCK_TOKENS)
        owner0 = [r for r in wl.requests if r.input_tokens >= BLOCK_TOKENS and r.hash_ids[0] == 0]
        # client 0's requests in window 1 (600-1200 s): none
        assert not [r for r in owner0 if 600 <= r.arrival_s < 1200]
        counts[0].append(len([r for r in wl.requests if r.arrival_s < 600]))
        counts[1].append(len([r for r in wl.requests if 600 <= r.arrival_s < 1200]))
    # window 0: 2 x 600 + 0.5 x 600 = 1500 expected; window 1: 300 (client 1 alone). The mean of 20
    # seeds is within 5 standard errors (Poisson sd for client 0; Weibull CV sqrt(5) for client 1).
    sd0 = math.sqrt(1200 + 300 * 5) / math.sqrt(20)
    assert abs(np.mean(counts[0]) - 1500) < 5 * sd0
    assert abs(np.mean(counts[1]) - 300) < 5 * math.sqrt(300 * 5 / 20)
    # shape 1 Gamma is Poisson: gap CV 1; client 1 alone in window 1 has Weibull(0.5)'s CV sqrt(5).
    only0 = tmp_path / "only0"
    only0.mkdir()
    write_client(only0, 0, [(0, 2.0, "Gamma", 1.0), (600, 0, "", 0), (1200, 1.0, "Gamma", 0.25)])
    wl = load_servegen(only0, 0, 1800, seed=1)
    assert gaps_cv(wl, 0, 600) == pytest.approx(1.0, abs=0.12)
    assert gaps_cv(wl, 1200, 1800) == pytest.approx(2.0, rel=0.3)
    # a span inside the release: times from its start; same seed, same workload
    a, b = load_servegen(tmp_path, 1200, 1500, seed=3), load_servegen(tmp_path, 1200, 1500, seed=3)
    assert [(r.arrival_s, r.input_tokens) for r in a.requests] == [(r.arrival_s, r.input_tokens) for r in b.requests]
    assert a.requests and all(0 <= r.arrival_s < 300 for r in a.requests)
    # rate scale: half the rates, half the requests (within 5 sd of the Poisson/Weibull counts)
    full = np.mean([len(load_servegen(tmp_path, 0, 600, seed=s).requests) for s in range(10)])
    half = np.mean([len(load_servegen(tmp_path, 0, 600, rate_scale=0.5, seed=s).requests) for s in range(10)])
    assert abs(half - full / 2) < 5 * math.sqrt((600 + 150 * 5) / 10)


def test_clients_share_their_system_prompt_only(tmp_path: Path) -> None:
    write_client(tmp_path, 3, [(0, 1.0, "Gamma", 1.0)])
    write_client(tmp_path, 7, [(0, 1.0, "Gamma", 1.0)])
    wl = load_servegen(tmp_path, 0, 600, seed=0)
    firsts = {r.hash_ids[0] for r in wl.requests if r.input_tokens >= BLOCK_TOKENS}
    assert firsts == {3, 7}  # client c's system prompt is block id c (one block per client)
    rest = [h for r in wl.requests for h in r.hash_ids[1:]]
    short = [r.hash_ids[0] for r in wl.requests if r.input_tokens < BLOCK_TOKENS]
    assert len(set(rest + short)) == len(rest + short)  # every other block is unique
    assert not set(rest + short) & {3, 7}


@pytest.mark.parametrize(("row", "problem"), [
    ("0,1.0,1.0,Gamma,1.0", "expected 6"),
    ("0,abc,1.0,Gamma,1.0,1.0", "non-numeric"),
    ("0,-1,1.0,Gamma,1.0,1.0", "rate >= 0"),
    ("0,1.0,1.0,Poisson,1.0,1.0", "distribution"),
    ("0,1.0,1.0,Gamma,0,1.0", "shape > 0"),
    ("0,1.0,1.0,Weibull,0.001,1.0", "below 0.01"),
])
def test_malformed_rows_name_file_and_line(tmp_path: Path, row: str, problem: str) -> None:
    (tmp_path / "chunk-0-trace.csv").write_text("0,0,0,,0,0\n" + row + "\n")
    with pytest.raises(TraceError, match=rf"chunk-0-trace.csv: line 2: .*{problem}"):
        load_servegen(tmp_path, 0, 600)


def test_folder_and_span_errors(tmp_path: Path) -> None:
    with pytest.raises(TraceError, match="not a ServeGen folder"):
        load_servegen(tmp_path, 0, 600)
    write_client(tmp_path, 0, [(0, 0, "", 0)])
    with pytest.raises(TraceError, match="no request in the span"):
        load_servegen(tmp_path, 0, 600)
    with pytest.raises(ValueError, match="start < end"):
        load_servegen(tmp_path, 600, 600)
    for bad in ("10", "a:b", "5:5", "-1:10", "0:inf", "1_0:100"):
        with pytest.raises(ValueError, match="START:END"):
            parse_span(bad)
    assert parse_span("86400:172800") == (86400.0, 172800.0)


def test_too_many_requests_and_odd_folders_are_refused_before_generating(tmp_path: Path) -> None:
    write_client(tmp_path, 0, [(0, 5.0, "Gamma", 1.0)])
    # 5 req/s x 600 s x 1e4 = 3e7 requests: over the 20 M a run simulates (and never allocated)
    for scale in (1e4, 1e308):
        with pytest.raises(ValueError, match="at most 20,000,000"):
            load_servegen(tmp_path, 0, 600, rate_scale=scale)
    with pytest.raises(ValueError, match=r"--trace-format azure: .* is a ServeGen folder \(--trace-format servegen"):
        build_workload(tmp_path, "azure", span=(0.0, 600.0))
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(TraceError, match="not a ServeGen one"):
        build_workload(empty)


def test_crop_keeps_the_span_from_the_first_arrival() -> None:
    wl = Workload([Request(arrival_s=t, input_tokens=10, output_tokens=5) for t in (100.0, 101.0, 150.0, 160.0)])
    out = crop(wl, 1.0, 60.0)
    assert [r.arrival_s for r in out.requests] == [0.0, 49.0]  # 101 and 150 s: 1..50 s after the first
    with pytest.raises(ValueError, match="no request in --span"):
        crop(wl, 100.0, 200.0)


@pytest.mark.usefixtures("data_dir")
def test_a_real_day_has_the_published_aggregate_rate(data_dir: Path) -> None:
    """ServeGen m-large day 1 at rate x 0.02: the request count is the aggregate rate (the shared
    DERIVED_aggregate_rate_per_window.csv, summed over clients) x 600 s x 0.02, within 3%."""
    folder = data_dir / "servegen" / "language" / "m-large"
    with open(data_dir / "servegen" / "DERIVED_aggregate_rate_per_window.csv") as f:
        expected = sum(float(r["sum_rate_rps"]) * 600 * 0.02 for r in csv.DictReader(f)
                       if r["category_model"] == "language/m-large" and 86400 <= float(r["window_start_s"]) < 172800)
    wl = build_workload(folder, rate_scale=0.02, seed=0, span=(86400.0, 172800.0))
    assert len(wl.requests) == pytest.approx(expected, rel=0.03)
    assert wl.requests[0].arrival_s >= 0 and wl.requests[-1].arrival_s < 86400
    assert {r.request_class for r in wl.requests} == {"interactive", "batch"}
