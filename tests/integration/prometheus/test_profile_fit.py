"""autoscaler profile fit: a profile recovered from data a known profile produced.

The benchmark results are written by the simulator in vLLM's format (``autoscaler.simulator.vllm_bench``)
from a shipped profile; the Prometheus range is the simulator's own exposition of one replica,
backfilled with promtool and read back through a real Prometheus. The fit must recover the
profile's coefficients within 10 % (the issue's bar), and refuse data that cannot pin one.
"""

from __future__ import annotations

import heapq
import json
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from support.promserver import backfill
from typer.testing import CliRunner

from autoscaler.cli import app
from autoscaler.config import EngineConfig
from autoscaler.config.loading import parse_config
from autoscaler.errors import ProfileError
from autoscaler.faults.promserver import PromServer
from autoscaler.realtime import LiveSimulation
from autoscaler.simulator import vllm_bench as sim_bench
from autoscaler.simulator.engine import READY, SimRequest
from autoscaler.simulator.exposition import OpenMetricsHistory
from autoscaler.workload.types import Request, Workload
from models.profiles import PerformanceProfile, get_profile, measured, prefill_pairs, vllm_bench
from models.profiles.measured import COEFFICIENTS, Rows
from models.profiles.profile_file import load_profile_file
from models.profiles.specs import MODELS

TOLERANCE = 0.10  # the bar: coefficients within 10 %
runner = CliRunner()


def _truth(p: PerformanceProfile) -> dict[str, float]:
    return {"step_overhead_s": p.step_overhead_s, "prefill_s_per_token": p.prefill_s_per_token,
            "decode_s_per_seq": p.decode_s_per_seq, "bandwidth_efficiency": p.bandwidth_efficiency}


def _assert_recovers(written: Path, p: PerformanceProfile) -> None:
    got = load_profile_file(written)
    print(f"\n{p.name} from {written.name}: " + ", ".join(f"{k} {getattr(got, k) / v - 1:+.1%}"
                                                       for k, v in _truth(p).items()))
    for key, want in _truth(p).items():
        assert getattr(got, key) == pytest.approx(want, rel=TOLERANCE), key


def _mixed_sizes(n: int, seed: int) -> list[tuple[int, int]]:
    rng = np.random.default_rng(seed)
    return [(int(rng.integers(50, 4000)), int(rng.integers(10, 600))) for _ in range(n)]


# --------------------------------------------------------------------------- the least-squares fit
def _rows(theta: np.ndarray, design: np.ndarray, pairs: np.ndarray | None = None, ratio: float = 0.0) -> Rows:
    q = np.zeros(len(design)) if pairs is None else pairs
    return Rows(design @ theta + theta[1] * ratio * q, *design.T, prefill_pairs=q, unit="step")


def test_exact_rows_give_the_coefficients_back() -> None:
    rng = np.random.default_rng(0)
    design = np.column_stack([np.ones(200), rng.integers(0, 8000, 200), rng.integers(0, 64, 200),
                              rng.integers(0, 200_000, 200)]).astype(float)
    theta = np.array([8e-3, 2.5e-5, 5e-5, 6e-8])
    f = measured.fit(_rows(theta, design), "<rows>", 0.0)
    assert [f.coefficients[k] for k in COEFFICIENTS] == pytest.approx(theta, rel=1e-9)
    assert f.rows_held_out == 40 and f.rows_fitted == 160 and f.heldout_mape < 1e-9


def test_attention_pairs_count_at_the_architecture_ratio() -> None:
    # Rows made with prefill cost a (p + r q): fitted with r, the prefill slope is a again; fitted as
    # if attention were free, the slope absorbs the pairs (mean 2k-token prompts: ~4 % more).
    rng = np.random.default_rng(2)
    p = rng.integers(100, 4000, 200).astype(float)
    design = np.column_stack([np.ones(200), p, rng.integers(1, 256, 200),
                              rng.integers(0, 2_000_000, 200)]).astype(float)
    theta, r = np.array([8e-3, 2.5e-5, 5e-5, 6e-8]), MODELS["llama-3-8b"].attention_tokens_per_pair
    rows = _rows(theta, design, prefill_pairs(0, p), r)
    assert measured.fit(rows, "<rows>", r).coefficients["prefill_s_per_token"] == pytest.approx(2.5e-5, rel=1e-9)
    assert measured.fit(rows, "<rows>", 0.0).coefficients["prefill_s_per_token"] > 1.03 * 2.5e-5


def test_collinear_columns_are_refused_by_name() -> None:
    # Every step decodes 16 sequences: the step overhead and the per-sequence cost cannot be told
    # apart, and the fit must say which two.
    rng = np.random.default_rng(1)
    steps = np.ones(100)
    design = np.column_stack([steps, rng.integers(0, 8000, 100), 16 * steps, rng.integers(0, 200_000, 100)])
    with pytest.raises(ProfileError) as err:
        measured.fit(_rows(np.array([8e-3, 2.5e-5, 5e-5, 6e-8]), design.astype(float)), "<rows>", 0.0)
    assert "<rows>: cannot pin step_overhead_s, decode_s_per_seq from 100 steps" in str(err.value)


def test_a_step_far_off_every_fit_is_left_out_rather_than_unpin_the_rest() -> None:
    # Rows with 1 % noise, and one whose duration is a seventh of its work (a step split by a late
    # token): kept, it alone would raise the residual scale, and so every standard error, about sixfold.
    rng = np.random.default_rng(3)
    design = np.column_stack([np.ones(2000), rng.integers(0, 8000, 2000), rng.integers(1, 64, 2000),
                              rng.integers(0, 200_000, 2000)]).astype(float)
    theta = np.array([8e-3, 2.5e-5, 5e-5, 6e-8])
    rows = _rows(theta, design)
    duration = rows.duration_s * (1 + 0.01 * rng.standard_normal(2000))
    duration[7] /= 7
    f = measured.fit(Rows(duration, *design.T, prefill_pairs=np.zeros(2000), unit="step"), "<rows>", 0.0)
    assert [f.coefficients[k] for k in COEFFICIENTS] == pytest.approx(theta, rel=0.05)
    # 1 % noise on 1,600 rows: the decode term's error is that of a clean fit, well inside the 5 % bar.
    assert f.relative_se["decode_s_per_seq"] < 0.02


def test_too_few_rows_are_refused() -> None:
    design = np.ones((10, 4))
    with pytest.raises(ProfileError, match="10 usable steps of busy engine time, need at least 20"):
        measured.fit(_rows(np.ones(4), design), "<rows>", 0.0)


# --------------------------------------------------------------------------- vLLM benchmark results
@pytest.mark.parametrize("name", ["llama-3-8b/h100-sxm", "llama-3-70b/h100-sxm/tp4"])
def test_poisson_benchmark_with_start_times_recovers_the_profile(name: str, tmp_path: Path) -> None:
    p = get_profile(name)
    bench = tmp_path / "bench.json"
    # Each streamed chunk reaches the client up to a fraction of a millisecond late (exponential, mean 0.1 ms).
    sim_bench.write(bench, sim_bench.run(p, _mixed_sizes(400, 2), request_rate=3.0, jitter_s=1e-4))
    model, gpu = p.model, p.gpu
    out = tmp_path / "mine.json"
    res = runner.invoke(app, ["profile", "fit", "--model", model, "--gpu", gpu, "--tensor-parallel",
                              str(p.tensor_parallel), "--bench", str(bench), "--out", str(out)])
    assert res.exit_code == 0, res.output
    assert f"wrote {out}" in res.output
    _assert_recovers(out, p)


def test_closed_loop_benchmark_without_start_times_is_replayed(tmp_path: Path) -> None:
    # vLLM's own client saves no send times: at --request-rate inf with --max-concurrency the
    # latencies replay them (each request goes when one finishes).
    p = get_profile("qwen2-7b/h100-sxm")
    result = sim_bench.run(p, _mixed_sizes(300, 3), max_concurrency=24, drop_start_times=True)
    assert "start_times" not in result and result["request_rate"] == "inf"
    bench = tmp_path / "bench.json"
    sim_bench.write(bench, result)
    out = tmp_path / "mine.json"
    res = runner.invoke(app, ["profile", "fit", "--model", "qwen2-7b", "--gpu", "h100-sxm", "--bench", str(bench),
                              "--out", str(out)])
    assert res.exit_code == 0, res.output
    _assert_recovers(out, p)


def test_held_out_error_is_recomputed_from_the_written_profile(tmp_path: Path) -> None:
    p = get_profile("llama-3-8b/h100-sxm")
    bench = tmp_path / "bench.json"
    sim_bench.write(bench, sim_bench.run(p, _mixed_sizes(200, 4), request_rate=3.0, jitter_s=1e-4))
    out = tmp_path / "mine.json"
    res = runner.invoke(app, ["profile", "fit", "--model", "llama-3-8b", "--gpu", "h100-sxm", "--bench", str(bench),
                              "--out", str(out), "-o", "json"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.output)
    got = load_profile_file(out)
    rows = vllm_bench.steps(vllm_bench.load(bench))
    held = np.arange(len(rows)) % measured.HOLD_OUT_EVERY == measured.HOLD_OUT_EVERY - 1
    prefill = rows.prefill_tokens + got.attention_tokens_per_pair * rows.prefill_pairs
    pred = (got.step_overhead_s * rows.steps + got.prefill_s_per_token * prefill
            + got.decode_s_per_seq * rows.decode_seqs + got.seconds_per_ctx_token * rows.ctx_tokens)
    assert doc["heldout_mape"] == pytest.approx(float(np.mean(np.abs(pred[held] / rows.duration_s[held] - 1))),
                                                rel=1e-9)
    assert doc["rows_held_out"] == int(held.sum()) and doc["rows_fitted"] == len(rows) - int(held.sum())


def test_the_written_file_serves_as_a_fleet_profile(tmp_path: Path) -> None:
    p = get_profile("llama-3-8b/h100-sxm")
    bench = tmp_path / "bench.json"
    sim_bench.write(bench, sim_bench.run(p, _mixed_sizes(200, 5), request_rate=3.0))
    out = tmp_path / "mine.json"
    assert runner.invoke(app, ["profile", "fit", "--model", "llama-3-8b", "--gpu", "h100-sxm", "--bench",
                               str(bench), "--out", str(out)]).exit_code == 0
    mine = get_profile(str(out))
    # One prefill step of 1000 tokens and a decode step of 32 sequences at 64k context, as the source profile.
    for args in ((1000, 0, 0), (0, 32, 65536), (512, 16, 20000)):
        assert mine.step_time(*args) == pytest.approx(p.step_time(*args), rel=0.02)


def test_prefill_only_benchmark_cannot_pin_the_decode_terms(tmp_path: Path) -> None:
    p = get_profile("llama-3-8b/h100-sxm")
    rng = np.random.default_rng(6)
    bench = tmp_path / "bench.json"
    sim_bench.write(bench, sim_bench.run(p, [(int(rng.integers(100, 4000)), 1) for _ in range(200)],
                                         request_rate=5.0))
    out = tmp_path / "mine.json"
    res = runner.invoke(app, ["profile", "fit", "--model", "llama-3-8b", "--gpu", "h100-sxm", "--bench", str(bench),
                              "--out", str(out)])
    assert res.exit_code == 2
    assert "cannot pin decode_s_per_seq, seconds_per_ctx_token" in res.output and "no step has any" in res.output
    assert not out.exists()


def test_a_rate_sweep_into_overload_recovers_the_profile(tmp_path: Path) -> None:
    # The user's sweep: the same prompts at 4 and 16 requests/s. At 16/s the queue grows until
    # max_num_seqs (256) run; the rest wait and prefill nothing, which the steps must show.
    p = get_profile("llama-3-8b/h100-sxm")
    sizes = _mixed_sizes(500, 1)
    paths = []
    for rate in (4.0, 16.0):
        paths.append(tmp_path / f"run-{rate:g}qps.json")
        sim_bench.write(paths[-1], sim_bench.run(p, sizes, request_rate=rate, jitter_s=1e-4))
    rows = vllm_bench.steps(vllm_bench.load(paths[1]))
    assert rows.decode_seqs.max() == 256
    truth = np.array([p.step_overhead_s, p.prefill_s_per_token, p.decode_s_per_seq, p.seconds_per_ctx_token])
    priced = rows.design(p.attention_tokens_per_pair) @ truth
    # The steps priced by the true profile within the delivery jitter (0.1 ms on steps of 10-60 ms);
    # prefill given to waiting requests beyond max_num_seqs put this at 59 %.
    assert float(np.sqrt(np.mean((priced / rows.duration_s - 1) ** 2))) < 0.03
    out = tmp_path / "mine.json"
    res = runner.invoke(app, ["profile", "fit", "--model", "llama-3-8b", "--gpu", "h100-sxm", "--bench", str(paths[0]),
                              "--bench", str(paths[1]), "--out", str(out)])
    assert res.exit_code == 0, res.output
    _assert_recovers(out, p)


def test_a_sweep_of_equal_requests_is_told_to_mix_lengths_not_rates(tmp_path: Path) -> None:
    # vllm bench serve's random prompts default to one length (1024 in, 128 out): every step's
    # sequences have about the same mean context at any rate, so the context term and the
    # per-sequence one move together, and a second rate cannot separate them.
    p = get_profile("llama-3-8b/h100-sxm")
    paths = []
    for rate in (4.0, 16.0):
        paths.append(tmp_path / f"run-{rate:g}qps.json")
        sim_bench.write(paths[-1], sim_bench.run(p, [(1024, 128)] * 300, request_rate=rate, jitter_s=1e-4))
    res = runner.invoke(app, ["profile", "fit", "--model", "llama-3-8b", "--gpu", "h100-sxm", "--bench", str(paths[0]),
                              "--bench", str(paths[1]), "--out", str(tmp_path / "mine.json")])
    assert res.exit_code == 2
    text = " ".join(res.output.split())
    assert "cannot pin decode_s_per_seq, seconds_per_ctx_token" in text
    assert "--random-range-ratio" in text and "more than one concurrency or request rate" not in text


def test_jitter_wider_than_the_tolerance_is_named(tmp_path: Path) -> None:
    p = get_profile("llama-3-8b/h100-sxm")
    bench = tmp_path / "bench.json"
    sim_bench.write(bench, sim_bench.run(p, _mixed_sizes(300, 7), request_rate=4.0, jitter_s=5e-4))
    with pytest.raises(ProfileError, match="raise --tolerance"):
        vllm_bench.steps(vllm_bench.load(bench))


def _write(tmp_path: Path, doc: Any) -> Path:
    path = tmp_path / "b.json"
    path.write_text(doc if isinstance(doc, str) else json.dumps(doc))
    return path


@pytest.mark.parametrize(("edit", "message"), [
    (lambda d: d.pop("itls"), "'itls' missing or not a list: save the run with --save-result --save-detailed"),
    (lambda d: d.pop("start_times"), "request_rate 2.0 with no 'start_times'"),
    (lambda d: d["itls"][3].pop(), "request 3: 4 inter-token gaps for 6 output tokens"),
    (lambda d: d["ttfts"].__setitem__(1, float("nan")), "ttfts[1] must be a finite number"),
    (lambda d: d["output_lens"].append(4), "'output_lens' has 11 entries, 'input_lens' 10"),
    (lambda d: d["input_lens"].__setitem__(2, 1e300), "input_lens[2] must be a finite number in [1, 1e+07]"),
    (lambda d: d["input_lens"].__setitem__(2, 100.5), "input_lens[2] must be a whole number, got 100.5"),
    (lambda d: d["ttfts"].__setitem__(4, 1e300), "ttfts[4] must be a finite number in [0, 1e+06]"),
    (lambda d: d.__setitem__("errors", "boom"), "'errors' missing or not a list"),
])
def test_bad_benchmark_files_are_named(tmp_path: Path, edit: Any, message: str) -> None:
    doc = sim_bench.run(get_profile("llama-3-8b/h100-sxm"), [(100, 6)] * 10, request_rate=2.0)
    edit(doc)
    with pytest.raises(ProfileError) as err:
        vllm_bench.load(_write(tmp_path, doc))
    assert message in str(err.value) and str(tmp_path / "b.json") in str(err.value)


def test_a_refused_fit_keeps_the_previous_profile_and_its_inputs(tmp_path: Path) -> None:
    p = get_profile("llama-3-8b/h100-sxm")
    good, bad = tmp_path / "good.json", tmp_path / "bad.json"
    sim_bench.write(good, sim_bench.run(p, _mixed_sizes(200, 8), request_rate=3.0))
    sim_bench.write(bad, sim_bench.run(p, [(1000, 1)] * 50, request_rate=3.0))
    out = tmp_path / "mine.json"
    base = ["profile", "fit", "--model", "llama-3-8b", "--gpu", "h100-sxm", "--out", str(out)]
    assert runner.invoke(app, [*base, "--bench", str(good)]).exit_code == 0
    before = out.read_bytes()
    assert runner.invoke(app, [*base, "--bench", str(bad)]).exit_code == 2
    assert out.read_bytes() == before and [f.name for f in tmp_path.iterdir() if f.name.startswith(".")] == []
    res = runner.invoke(app, ["profile", "fit", "--model", "llama-3-8b", "--gpu", "h100-sxm", "--bench", str(good),
                              "--out", str(good)])
    assert res.exit_code == 2 and "is one of the --bench files" in res.output
    assert json.loads(good.read_text())["input_lens"]  # still the benchmark
    res = runner.invoke(app, [*base, "--bench", str(good), "--bench", str(tmp_path / "." / "good.json")])
    assert res.exit_code == 2 and "given twice" in res.output


def test_a_context_term_far_below_the_datasheet_is_refused(tmp_path: Path) -> None:
    # Llama-3-8B's steps read as a 64-GPU replica: the KV-read time would mean a sliver of the bandwidth.
    bench = tmp_path / "bench.json"
    sim_bench.write(bench, sim_bench.run(get_profile("llama-3-8b/h100-sxm"), _mixed_sizes(200, 9), request_rate=3.0))
    res = runner.invoke(app, ["profile", "fit", "--model", "llama-3-8b", "--gpu", "h100-sxm", "--tensor-parallel",
                              "64", "--bench", str(bench), "--out", str(tmp_path / "x.json")])
    assert res.exit_code == 2 and f"{bench}: the fitted KV-read time" in res.output and "plausible" in res.output


def test_cli_refuses_bad_options_before_reading_data(tmp_path: Path) -> None:
    base = ["profile", "fit", "--gpu", "h100-sxm", "--bench", str(tmp_path / "none.json")]
    for extra, message in ((["--model", "gpt-9", "--out", "x.json"], "--model: unknown model 'gpt-9'; known:"),
                           (["--model", "llama-3-8b", "--out", "x.yaml"], "a profile file's name ends in .json"),
                           (["--model", "llama-3-8b", "--out", "x.json", "--prometheus-url", "http://h:1"],
                            "give either --bench"),
                           (["--model", "llama-3-8b", "--out", "x.json", "--max-num-batched-tokens", "0"],
                            "--max-num-batched-tokens must be >= 1"),
                           (["--model", "llama-3-8b", "--out", "x.json", "--tolerance", "-1"],
                            "--tolerance must be in [0, 1) s"),
                           (["--model", "llama-3-8b", "--out", "x.json", "--tensor-parallel", "1000"],
                            "--tensor-parallel must be in [1, 64]"),
                           (["--model", "llama-3-8b", "--out", str(tmp_path)], "is a directory")):
        res = runner.invoke(app, base + extra)
        assert res.exit_code == 2 and message in res.output, res.output
    res = runner.invoke(app, ["profile", "fit", "--model", "llama-3-8b", "--gpu", "h100-sxm", "--bench",
                              str(tmp_path / "none.json"), "--out", str(tmp_path / "x.json")])
    assert res.exit_code == 2 and "cannot read benchmark result: No such file or directory" in res.output
    res = runner.invoke(app, ["profile", "fit", "--model", "llama-3-8b", "--gpu", "H100-SXM", "--bench",
                              "/dev/zero", "--out", str(tmp_path / "x.json")])
    assert res.exit_code == 2 and "/dev/zero: cannot read benchmark result: not a regular file" in res.output
    # Prometheus options are checked before connecting (nothing listens on port 9).
    res = runner.invoke(app, ["profile", "fit", "--model", "llama-3-8b", "--gpu", "h100-sxm", "--prometheus-url",
                              "http://127.0.0.1:9", "--selector", 'model_name="m"', "--start", "2000", "--end", "1000",
                              "--out", str(tmp_path / "x.json")])
    assert res.exit_code == 2 and "--start .. --end spans -1000 s" in res.output
    assert not (tmp_path / "x.json").exists()


def test_the_pool_of_a_pod_is_found_from_a_model_selector_and_adds_its_engines(tmp_path: Path) -> None:
    """vLLM 0.33's ``vllm:cache_config_info`` carries the CacheConfig's fields and ``engine``, no
    ``model_name`` (``vllm/v1/metrics/loggers.py``): the documented selector ``model_name="m"`` must
    still find each pod's pool, through the pod's other series, and a data-parallel pod's two engines
    (1000 and 2000 blocks of 16 tokens) hold 48,000 tokens between them."""
    from prometheus_api_client import PrometheusConnect

    from autoscaler.adapters.prometheus_profile import pool_tokens

    base = 1_700_000_000
    lines = ["# TYPE vllm:cache_config_info gauge"]
    for pod, engine, blocks in (("m-0", "0", 1000), ("m-0", "1", 2000), ("x-0", "0", 500)):
        lines += [f'vllm:cache_config_info{{block_size="16",engine="{engine}",namespace="default",'
                  f'num_gpu_blocks="{blocks}",pod="{pod}"}} 1 {base + t}' for t in range(0, 61, 15)]
    lines.append("# TYPE vllm:num_requests_running gauge")
    for pod, model in (("m-0", "m"), ("x-0", "x")):
        lines += [f'vllm:num_requests_running{{engine="0",model_name="{model}",namespace="default",pod="{pod}"}} 2 '
                  f'{base + t}' for t in range(0, 61, 15)]
    (tmp_path / "in.om").write_text("\n".join([*lines, "# EOF", ""]))
    backfill(tmp_path / "in.om", tmp_path / "tsdb")
    prom = PromServer(tmp_path / "prom", tsdb=tmp_path / "tsdb").start()
    try:
        pools = pool_tokens(PrometheusConnect(prom.url), 'model_name="m"', base + 60, "pod")
    finally:
        prom.stop()
    assert pools == {"m-0": 16 * (1000 + 2000)}


# --------------------------------------------------------------------------- simulator metrics
def _alone(req: Request) -> tuple[sim_bench._Recording, sim_bench._Sink]:
    """``req`` run to its end on an idle H100 replica: the replica and its event sink."""
    sink = sim_bench._Sink()
    r = sim_bench._Recording(0, "s", "v", get_profile("llama-3-8b/h100-sxm"), EngineConfig(), 10_000, 16, sink,
                             0.0, 0.0, 0.0, False)
    r.state = READY
    r.enqueue(SimRequest(req), 0.0)
    while sink.events:
        t, _, version = heapq.heappop(sink.events)
        r.on_step_end(t, version)
    return r, sink


def test_a_one_token_request_has_a_time_per_output_token_of_zero() -> None:
    """vLLM records every finished request's TPOT, 0 when it generated one token
    (``vllm/v1/metrics/stats.py``: ``decode_time / (n - 1) if n - 1 > 0 else 0``)."""
    r, _ = _alone(Request(0.0, 100, 1, rid=0))
    assert (r.metrics.tpot.count, r.metrics.tpot.total) == (1, 0.0)
    assert (r.metrics.iteration_tokens.count, r.metrics.iteration_tokens.total) == (1, 101)


def test_iteration_tokens_counts_every_step() -> None:
    # One 100-token prompt with 3 output tokens on an idle replica: a prefill step counted as vLLM 0.33
    # counts it (``vllm/v1/metrics/loggers.py``: the prompt tokens computed + the tokens generated, so
    # 100 + its first token), then two decode steps of one sequence each: 3 steps, 101 + 1 + 1 tokens.
    r, sink = _alone(Request(0.0, 100, 3, rid=0))
    h = r.metrics.iteration_tokens
    assert (h.count, h.total) == (3, 103)
    assert len(sink.tokens[0]) == 2  # the two decode tokens' times


# --------------------------------------------------------------------------- a Prometheus range
SLO = {"interactive": {"ttft_s": 2.0, "itl_s": 0.1}, "batch": {"ttft_s": 20.0, "itl_s": 0.25}}
PHASES = (  # (req/s, prompt tokens range, output tokens range): load and context vary apart
    (2.5, (4000, 6000), (100, 200)), (14, (50, 150), (200, 400)), (6, (1000, 2000), (100, 300)),
    (2, (100, 200), (500, 800)), (8, (2000, 3000), (50, 100)), (5, (300, 600), (300, 500)))
PHASE_S = 100.0


@dataclass
class Range:
    prom: PromServer
    base: int
    end: int
    profile: PerformanceProfile


def _phased(phases: tuple[tuple[float, tuple[int, int], tuple[int, int]], ...], repeats: int, seed: int) -> Workload:
    rng = np.random.default_rng(seed)
    reqs, t = [], 0.0
    for i, (rate, inp, out) in enumerate(phases * repeats):
        end = (i + 1) * PHASE_S
        while (t := t + rng.exponential(1 / rate)) < end:
            reqs.append(Request(t, int(rng.integers(*inp)), int(rng.integers(*out))))
        t = end
    return Workload(reqs, source="phases")


def _history(work: Path, name: str, wl: Workload, base: int) -> None:
    doc = {"services": [{"name": "llm", "model": "m", "slo": SLO, "variants": [
        {"name": "h100", "gpu": "H100-SXM", "price_per_gpu_hour": 2.99, "min_replicas": 1, "max_replicas": 1,
         "initial_replicas": 1, "startup_cold_s": 30, "startup_warm_s": 30, "kv_cache_tokens": 400_000,
         "profile": name}]}],
        "controller": {"tick_s": 15, "window_s": 60}, "simulator": {"scrape_interval_s": 1}}
    live = LiveSimulation(parse_config(doc, "<test>"), wl, controller="static")
    recorder = OpenMetricsHistory(live.collector)
    live.run(substep_s=1.0, on_step=lambda t: recorder.record(base + t))
    recorder.write(work / f"{base}.om")
    backfill(work / f"{base}.om", work / "tsdb")


@pytest.fixture(scope="module")
def history(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Range]:
    work = tmp_path_factory.mktemp("profile-fit")
    p = get_profile("llama-3-8b/h100-sxm")
    base = int(time.time()) - 4 * 3600  # within the default 15 d retention, far from the live head
    _history(work, p.name, _phased(PHASES, 6, 0), base)
    # Two hours later, an hour of one steady phase: too little variation to pin the decode terms.
    _history(work, p.name, _phased(PHASES[2:3], 18, 1), base + 7200)
    prom = PromServer(work / "prom", tsdb=work / "tsdb")
    try:
        prom.start()
        yield Range(prom, base, base + int(len(PHASES) * 6 * PHASE_S), p)
    finally:
        prom.stop()


@pytest.mark.slow
def test_prometheus_range_recovers_the_profile(history: Range, tmp_path: Path) -> None:
    out = tmp_path / "live.json"
    res = runner.invoke(app, ["profile", "fit", "--model", "llama-3-8b", "--gpu", "h100-sxm", "--prometheus-url",
                              history.prom.url, "--selector", 'model_name="m",variant="h100"', "--start",
                              str(history.base), "--end", str(history.end), "--window", "20", "--resolution", "1",
                              "--out", str(out)])
    assert res.exit_code == 0, res.output
    _assert_recovers(out, history.profile)
    doc = json.loads(out.read_text())
    assert doc["fitted_from"]["kind"] == "prometheus" and doc["row_unit"] == "window" and doc["rows_held_out"] > 0


def test_prometheus_range_of_one_steady_load_is_refused(history: Range, tmp_path: Path) -> None:
    start = history.base + 7200
    res = runner.invoke(app, ["profile", "fit", "--model", "llama-3-8b", "--gpu", "h100-sxm", "--prometheus-url",
                              history.prom.url, "--selector", 'model_name="m"', "--start", str(start), "--end",
                              str(start + 1800), "--window", "20", "--resolution", "1", "--out",
                              str(tmp_path / "x.json")])
    assert res.exit_code == 2 and "cannot pin" in res.output and "decode_s_per_seq" in res.output, res.output


def test_prometheus_selector_matching_nothing_is_named(history: Range, tmp_path: Path) -> None:
    res = runner.invoke(app, ["profile", "fit", "--model", "llama-3-8b", "--gpu", "h100-sxm", "--prometheus-url",
                              history.prom.url, "--selector", 'model_name="other"', "--start", str(history.base),
                              "--end", str(history.end), "--out", str(tmp_path / "x.json")])
    assert res.exit_code == 2 and "no series for" in res.output and 'model_name="other"' in res.output
