"""Tests of models.profiles: the simulator's contract, physical bounds, fit quality, reproducibility.

Tests marked ``needs_data`` read the benchmark files from the shared data directory beside the
repository (``../shared/data``); CI always has it, so its absence fails them.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from autoscaler.errors import ProfileError
from models.profiles import PerformanceProfile, fit, get_profile, list_profiles
from models.profiles.fit import BenchRow
from models.profiles.specs import GPUS, LLAMA_3_8B

DATA_DIR = Path(__file__).resolve().parents[2] / "shared" / "data"
SHIPPED = ["llama-3-8b/a100-80gb", "llama-3-8b/gh200", "llama-3-8b/h100-sxm"]
COEFFICIENTS = ("step_overhead_s", "prefill_s_per_token", "decode_s_per_seq", "bandwidth_efficiency")

# The shared data is always beside the clone in CI: a missing directory fails (conftest's data_dir).
needs_data = pytest.mark.usefixtures("data_dir")


@pytest.fixture(scope="module")
def rows() -> list[BenchRow]:
    return fit.load_rows(DATA_DIR)


def test_shipped_profiles() -> None:
    assert list_profiles() == SHIPPED
    for name in SHIPPED:
        p = get_profile(name)
        assert isinstance(p, PerformanceProfile)
        assert p.name == name == f"{p.model}/{p.gpu}"
        assert p.kv_bytes_per_token == 2 * 32 * 8 * 128 * 2 == 131072


def test_unknown_profile_names_the_known_ones() -> None:
    with pytest.raises(ProfileError) as exc:
        get_profile("llama-3-8b/t4")
    assert str(exc.value) == (
        "unknown performance profile 'llama-3-8b/t4'; known: "
        "llama-3-8b/a100-80gb, llama-3-8b/gh200, llama-3-8b/h100-sxm"
    )


@pytest.mark.parametrize("name", SHIPPED)
def test_step_time_is_affine_in_context_and_zero_when_idle(name: str) -> None:
    p = get_profile(name)
    assert p.step_time(0, 0, 0) == 0.0
    for prefill, seqs, ctx in [(0, 1, 1), (0, 64, 262_144), (512, 32, 123_457), (8192, 256, 10**7)]:
        assert (
            p.step_time(prefill, seqs, ctx) == p.step_time(prefill, seqs, 0) + p.seconds_per_ctx_token * ctx
        )
    assert p.step_time(8192, 0, 0) > p.step_time(512, 0, 0) > 0.0


def test_step_time_rejects_bad_counts() -> None:
    p = get_profile(SHIPPED[0])
    for args in [(-1, 0, 0), (0, -1, 0), (0, 1, -1), (0, 0, 10)]:
        with pytest.raises(ValueError):
            p.step_time(*args)


@pytest.mark.parametrize("name", SHIPPED)
def test_cannot_beat_datasheet_peaks(name: str) -> None:
    p = get_profile(name)
    gpu = GPUS[p.gpu]
    bw = gpu.mem_bandwidth_bytes_per_s
    assert p.mem_bandwidth_bytes_per_s == bw
    assert p.seconds_per_ctx_token >= p.kv_bytes_per_token / bw
    for seqs, ctx in [(1, 1), (1, 8192), (64, 64 * 4096), (256, 10**6)]:
        # A decode step streams every weight and every context token's KV at most at peak bandwidth.
        assert p.step_time(0, seqs, ctx) >= (LLAMA_3_8B.weight_bytes + ctx * p.kv_bytes_per_token) / bw
    assert p.prefill_s_per_token >= LLAMA_3_8B.prefill_flops_per_token / gpu.peak_dense_bf16_flops


@needs_data
@pytest.mark.parametrize("name", SHIPPED)
def test_held_out_mape_within_20_percent(rows: list[BenchRow], name: str) -> None:
    p = get_profile(name)
    fit_rows, held_out, _ = fit.split_rows(rows, fit.MEASURED_HARDWARE[p.gpu])
    assert len(held_out) == 4
    assert {r.input_len for r in held_out} == {fit.HELD_OUT_LENGTH}
    assert not set(held_out) & set(fit_rows)
    assert fit.mape(p, held_out) <= 0.20


@needs_data
def test_refit_reproduces_shipped_coefficients() -> None:
    fits = fit.fit_all(DATA_DIR)
    assert sorted(fits) == SHIPPED
    for name, result in fits.items():
        shipped = get_profile(name)
        for field in COEFFICIENTS:
            assert getattr(result.profile, field) == pytest.approx(getattr(shipped, field), rel=1e-6), (
                name,
                field,
            )


@needs_data
@pytest.mark.parametrize(("name", "n_rows"), [("llama-3-8b/a100-80gb", 19), ("llama-3-8b/h100-sxm", 20)])
def test_independent_rerun_latencies(name: str, n_rows: int) -> None:
    # Fig_3 re-ran the fp16 benchmark on A100 and H100: none of these runs was fitted. The A100's
    # preempting B=64, L=2048 run is left out as in the fit.
    p = get_profile(name)
    reruns = [r for r in fit.load_replicate_rows(DATA_DIR) if r.hardware == fit.MEASURED_HARDWARE[p.gpu]]
    assert len(reruns) == n_rows
    assert fit.mape(p, reruns) <= 0.10


@needs_data
@pytest.mark.parametrize("name", SHIPPED)
def test_mean_inter_token_latency_matches_fig22(name: str) -> None:
    # Fig_22 publishes TTFT and end-to-end latency of the B=16, input = output = 1024 run (its
    # "Output Length" column is the TTFT run's 1); mean ITL = (end - TTFT) / 1023.
    p = get_profile(name)
    (row,) = [
        r
        for r in fit.read_csv(DATA_DIR / "llm-inference-bench/Fig_22__all_results_TTFT_ITL.csv")
        if r["Hardware"] == fit.MEASURED_HARDWARE[p.gpu]
        and r["Framework"] == "vLLM"
        and r["Model"] == fit.DATA_MODEL
    ]
    batch, length = int(row["Batch Size"]), int(row["Input Length"])
    itl = (float(row["end_latency"]) - float(row["TTFT Latency"])) / (length - 1)
    # Mean context over decode steps j = 1..L-1 is L + L/2 per sequence.
    predicted = p.step_time(0, batch, 0) + p.seconds_per_ctx_token * batch * 1.5 * length
    assert predicted == pytest.approx(itl, rel=0.10)


@needs_data
def test_a100_prefill_slope_matches_vidur_kernel_profile() -> None:
    # Vidur's per-op A100 kernel times (no attention) must roughly agree with the fitted slope.
    vidur = fit.vidur_prefill_s_per_token(DATA_DIR)
    assert get_profile("llama-3-8b/a100-80gb").prefill_s_per_token == pytest.approx(vidur, rel=0.20)
