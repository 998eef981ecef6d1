"""Tests of models.profiles: the simulator's contract, physical bounds, fit quality, reproducibility,
the A100 40 GB answer, and profile files.

Tests marked ``needs_data`` read the benchmark files from the shared data directory beside the
repository (``../shared/data``); CI always has it, so its absence fails them.
"""

from __future__ import annotations

import csv
import dataclasses
import json
from importlib import resources
from pathlib import Path
from typing import Any

import pytest
from support.paths import DATA_DIR

from autoscaler.errors import ProfileError
from models.profiles import (
    PerformanceProfile,
    bench,
    fit,
    get_profile,
    list_profiles,
    prefill_pairs,
    profile_name,
    shipped_entries,
    splitwise,
)
from models.profiles.specs import GPUS, LLAMA_3_8B, MIXTRAL_8X7B, MODELS

LEGACY = ["llama-3-8b/a100-80gb", "llama-3-8b/gh200", "llama-3-8b/h100-sxm"]
"""Names fleet files used before the multi-model profiles; they must keep loading."""
COEFFICIENTS = ("step_overhead_s", "prefill_s_per_token", "decode_s_per_seq", "bandwidth_efficiency",
                "attention_tokens_per_pair", "weight_read_s")
# Read the shipped document directly, not through the loader under test.
DOC: dict[str, Any] = json.loads(resources.files("models.profiles").joinpath("coefficients.json").read_text())
SHIPPED = sorted(DOC["profiles"])

# The shared data is always beside the clone in CI: a missing directory fails (conftest's data_dir).
needs_data = pytest.mark.usefixtures("data_dir")


@pytest.fixture(scope="module")
def data() -> fit.Data:
    return fit.Data.load(DATA_DIR)


def test_shipped_profiles() -> None:
    assert list_profiles() == SHIPPED
    assert set(LEGACY) <= set(SHIPPED)
    for name in SHIPPED:
        p = get_profile(name)
        assert isinstance(p, PerformanceProfile)
        assert p.name == name == profile_name(p.model, p.gpu, p.tensor_parallel)
        assert p.kv_bytes_per_token == MODELS[p.model].kv_bytes_per_token
    assert get_profile("llama-3-8b/h100-sxm").kv_bytes_per_token == 2 * 32 * 8 * 128 * 2 == 131072


def test_multi_gpu_profile_is_one_replica() -> None:
    p = get_profile("llama-3-70b/h100-sxm/tp4")
    assert (p.model, p.gpu, p.tensor_parallel) == ("llama-3-70b", "h100-sxm", 4)
    assert p.mem_bandwidth_bytes_per_s == 4 * 3.35e12
    assert p.kv_bytes_per_token == 2 * 80 * 8 * 128 * 2 == 327680


def test_published_parameter_counts_follow_from_the_shapes() -> None:
    for m in MODELS.values():
        assert m.parameters == m.num_parameters, m.key
        assert m.head_size * m.num_attention_heads == m.hidden_size, m.key
    # Mixtral: one token reads 2 of 8 experts: 46.70B - 6 x 32 layers x 3 x 4096 x 14336 = 12.88B.
    assert MIXTRAL_8X7B.active_weight_bytes == 2 * (46_702_792_704 - 6 * 32 * 3 * 4096 * 14336)
    assert LLAMA_3_8B.active_weight_bytes == LLAMA_3_8B.weight_bytes == 2 * 8_030_261_248


def test_unknown_profile_names_the_known_ones() -> None:
    with pytest.raises(ProfileError) as exc:
        get_profile("llama-3-8b/t4")
    assert str(exc.value) == f"unknown performance profile 'llama-3-8b/t4'; known: {', '.join(SHIPPED)}"


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
    gpu, model, tp = GPUS[p.gpu], MODELS[p.model], p.tensor_parallel
    bw = tp * gpu.mem_bandwidth_bytes_per_s
    assert p.mem_bandwidth_bytes_per_s == bw
    assert p.seconds_per_ctx_token >= p.kv_bytes_per_token / bw
    for seqs, ctx in [(1, 1), (1, 8192), (64, 64 * 4096), (256, 10**6)]:
        # A decode step streams the weights one token needs and every context token's KV, at most at peak.
        assert p.step_time(0, seqs, ctx) >= (model.active_weight_bytes + ctx * p.kv_bytes_per_token) / bw
    assert p.prefill_s_per_token >= model.prefill_flops_per_token / (tp * gpu.peak_dense_bf16_flops)


def test_a100_80gb_stand_in_has_the_40gb_step_times() -> None:
    old, measured = get_profile("llama-3-8b/a100-80gb"), get_profile("llama-3-8b/a100-40gb")
    assert (old.gpu, measured.gpu) == ("a100-80gb", "a100-40gb")
    assert old.mem_bandwidth_bytes_per_s == 2.039e12 and measured.mem_bandwidth_bytes_per_s == 1.555e12
    for args in [(0, 1, 1000), (8192, 0, 0), (512, 64, 300_000)]:
        assert old.step_time(*args) == pytest.approx(measured.step_time(*args), rel=1e-12)
    assert DOC["profiles"]["llama-3-8b/a100-80gb"]["stand_in"]["profile"] == "llama-3-8b/a100-40gb"


def test_every_shipped_profile_within_ten_percent_held_out() -> None:
    for name, entry in DOC["profiles"].items():
        assert entry["rows_held_out"] >= 3, name
        assert entry["rows_fitted"] >= 12, name
        assert 0 <= entry["heldout_mape"] <= 0.10, name


@needs_data
@pytest.mark.parametrize("name", SHIPPED)
def test_held_out_error_recomputed_from_the_data(data: fit.Data, name: str) -> None:
    entry = DOC["profiles"][name]
    p = get_profile(name)
    combo = fit.Combo(entry["model"], entry["measured_gpu"], entry["tensor_parallel"], entry["source"])
    fit_rows, held_out, _ = fit.split_rows(combo, data)
    assert (len(fit_rows), len(held_out)) == (entry["rows_fitted"], entry["rows_held_out"])
    assert not set(held_out) & set(fit_rows)
    if combo.source == fit.LIB:
        # The held-out rows, read here straight from All_results.csv: every vLLM run of the model,
        # GPU and TP at length 512 that the entry does not list as excluded.
        skipped = {r["line"] for r in entry["excluded_rows"]}
        with (DATA_DIR / bench.ALL_RESULTS).open(newline="") as f:
            reader = csv.DictReader(f)
            lines = {reader.line_num for r in reader
                     if r["Framework"] == "vLLM" and r["Model"] == bench.MODEL_NAMES[combo.model]
                     and r["Hardware"] == bench.HARDWARE[combo.gpu] and r["Num of Hardware"] == str(combo.tp)
                     and r["Input Output Length"] == "512"} - skipped
        assert {r.line for r in held_out} == lines
    errors = [abs(q / m - 1) for r in held_out for q, m in zip(r.predict(p), r.measured, strict=True)]
    assert sum(errors) / len(errors) == pytest.approx(entry["heldout_mape"], rel=1e-9)
    assert sum(errors) / len(errors) <= 0.10
    # The per-group errors partition the same rows.
    groups = entry["heldout_groups"]
    assert sum(g["rows"] for g in groups.values()) == len(errors)
    assert sum(g["rows"] * g["mape"] for g in groups.values()) == pytest.approx(sum(errors), rel=1e-9)
    for group, g in groups.items():
        mine = [abs(r.predict(p)[0] / r.measured[0] - 1) for r in held_out if r.group == group]
        assert (len(mine), sum(mine) / len(mine)) == (g["rows"], pytest.approx(g["mape"], rel=1e-9)), group


SPLITWISE = [n for n in SHIPPED if DOC["profiles"][n]["source"] == "splitwise"]


@pytest.mark.parametrize("name", SHIPPED)
def test_attention_term_fitted_only_where_long_prefills_are(name: str) -> None:
    entry, p = DOC["profiles"][name], get_profile(name)
    flop_ratio = MODELS[p.model].attention_tokens_per_pair
    assert entry["attention"]["fitted"] == (entry["source"] == "splitwise")
    assert p.attention_tokens_per_pair == entry["coefficients"]["attention_tokens_per_pair"]
    if entry["attention"]["fitted"] and p.step_form == "linear":
        # Physically at least the FLOP ratio; in the linear form the 2k -> 8k growth of the rows asks
        # for 10-22 x (the short prefills' upward bend is charged to attention).
        assert 10 * flop_ratio <= p.attention_tokens_per_pair <= 25 * flop_ratio
    elif entry["attention"]["fitted"]:
        # The roofline form takes the bend as the weight reads' floor: attention near its FLOP ratio.
        assert flop_ratio <= p.attention_tokens_per_pair <= 10 * flop_ratio
    else:
        assert p.attention_tokens_per_pair == flop_ratio
        assert "extrapolated" in entry["attention"]["note"]


def test_chunk_cost_by_its_position_in_the_prompt_by_hand() -> None:
    p = get_profile("llama-2-70b/a100-80gb/tp4")
    assert p.step_form == "linear"
    c = DOC["profiles"][p.name]["coefficients"]
    r, o, k = c["attention_tokens_per_pair"], c["step_overhead_s"], c["prefill_s_per_token"]
    # The last 2048-token chunk of an 8192-token prompt: 2048 queries, each attending to the 6144
    # tokens before the chunk and to itself and the earlier tokens of the chunk.
    pairs = 2048 * 6144 + 2048 * 2049 // 2
    assert pairs == 14_681_088
    assert p.prefill_equivalent(2048, 6144) == pytest.approx(2048 + r * 14_681_088, rel=1e-12)
    last = p.step_time(2048, 0, 0, prefill_pairs(6144, 2048))
    assert last == pytest.approx(o + k * (2048 + r * 14_681_088), rel=1e-12)
    first = p.step_time(2048, 0, 0, prefill_pairs(0, 2048))
    assert first == pytest.approx(o + k * (2048 + r * 2_098_176), rel=1e-12)
    # Four chunks form the pairs of the whole prompt, 8192 x 8193 / 2, and cost three overheads more.
    chunks = [prefill_pairs(s, 2048) for s in (0, 2048, 4096, 6144)]
    assert sum(chunks) == 8192 * 8193 // 2 == 33_558_528
    whole = p.step_time(8192, 0, 0, 33_558_528)
    assert sum(p.step_time(2048, 0, 0, q) for q in chunks) == pytest.approx(whole + 3 * o, rel=1e-12)


# Llama-2-70B on two H100 SXM at the datasheet peaks, by hand: 68,976,648,192 parameters x 2 bytes
# = 137,953,296,384 weight bytes over 2 x 3.35 TB/s; 2 FLOPs per weight of the 80 layers' matmuls,
# 136,902,082,560 FLOPs a prompt token, over 2 x 989 TFLOPS dense BF16; attention 4 x 80 layers x
# 64 heads x 128 = 2,621,440 FLOPs a pair.
H100_TP2_WEIGHT_READ_S = 137_953_296_384 / (2 * 3.35e12)  # 20.590 ms
H100_TP2_S_PER_TOKEN = 136_902_082_560 / (2 * 989e12)  # 69.21 us: the knee at 297.5 tokens
H100_TP2_TOKENS_PER_PAIR = 2_621_440 / 136_902_082_560


def _datasheet_roofline(overhead_s: float) -> PerformanceProfile:
    return PerformanceProfile(
        name="roofline", model="llama-2-70b", gpu="h100-sxm", kv_bytes_per_token=327_680,
        mem_bandwidth_bytes_per_s=2 * 3.35e12, step_overhead_s=overhead_s, prefill_s_per_token=H100_TP2_S_PER_TOKEN,
        decode_s_per_seq=1e-4, bandwidth_efficiency=1.0, tensor_parallel=2,
        attention_tokens_per_pair=H100_TP2_TOKENS_PER_PAIR, weight_read_s=H100_TP2_WEIGHT_READ_S)


def test_roofline_step_time_by_hand_at_the_datasheet_peaks() -> None:
    # The constants above agree with the specs the fit bounds come from.
    model, gpu = MODELS["llama-2-70b"], GPUS["h100-sxm"]
    assert pytest.approx(model.active_weight_bytes / (2 * gpu.mem_bandwidth_bytes_per_s)) == H100_TP2_WEIGHT_READ_S
    assert pytest.approx(model.prefill_flops_per_token / (2 * gpu.peak_dense_bf16_flops)) == H100_TP2_S_PER_TOKEN
    assert fit.bounds(fit.Combo("llama-2-70b", "h100-sxm", 2, fit.SPLITWISE)) == pytest.approx(
        (H100_TP2_WEIGHT_READ_S, H100_TP2_S_PER_TOKEN))
    p = _datasheet_roofline(0.005)
    assert (p.step_form, p.fixed_step_s) == ("roofline", pytest.approx(0.025590, abs=1e-6))
    # 128 tokens: 8.86 ms of FLOPs hide under the 20.59 ms weight read; attention 8,256 pairs.
    assert p.step_time(128, 0, 0, 8_256) == pytest.approx(0.005 + 0.0205900 + 8_256 * 1.3253e-9, rel=1e-4)
    # 297 tokens: still under the knee (20.556 ms of FLOPs); 298: just past it (20.625 ms).
    assert p.step_time(297, 0, 0) == pytest.approx(0.005 + 0.0205900, rel=1e-4)
    assert p.step_time(298, 0, 0) == pytest.approx(0.005 + 0.0206252, rel=1e-4)
    # 2048 tokens: compute-bound, 141.75 ms of FLOPs, plus 2,098,176 pairs of attention (2.78 ms).
    assert p.step_time(2048, 0, 0, 2_098_176) == pytest.approx(0.005 + 0.1417469 + 0.0027807, rel=1e-4)
    # 8192 tokens: 566.99 ms of FLOPs + 44.48 ms of attention (33,558,528 pairs).
    assert p.step_time(8192, 0, 0, 33_558_528) == pytest.approx(0.005 + 0.5669878 + 0.0444751, rel=1e-4)
    # A decode step reads the weights once whatever its batch; a mixed step hides a short chunk under it.
    assert p.step_time(0, 16, 65_536) == pytest.approx(0.005 + 0.02059004 + 16e-4 + 65_536 * 327_680 / 6.7e12, rel=1e-6)
    assert p.step_time(256, 16, 0, 32_896) == pytest.approx(0.005 + 0.0205900 + 32_896 * 1.3253e-9 + 16e-4, rel=1e-4)
    # The linear form with the same terms charges the weight read and the FLOPs both (their sum).
    linear = dataclasses.replace(p, weight_read_s=0.0, step_overhead_s=0.005 + H100_TP2_WEIGHT_READ_S)
    assert linear.step_form == "linear"
    assert linear.step_time(128, 0, 0) == pytest.approx(0.005 + 0.02059004 + 0.00885918, rel=1e-6)
    assert linear.step_time(0, 16, 65_536) == pytest.approx(p.step_time(0, 16, 65_536))


def test_slowed_roofline_profile_is_slower_by_the_factor_everywhere() -> None:
    p = _datasheet_roofline(0.005)
    slow = p.slowed(1.5)
    for args in [(0, 1, 1000), (128, 0, 0, 8_256), (8192, 0, 0, 33_558_528), (512, 64, 300_000, 131_328)]:
        assert slow.step_time(*args) == pytest.approx(1.5 * p.step_time(*args), rel=1e-12)


@needs_data
@pytest.mark.parametrize("name", SPLITWISE)
def test_held_out_8192_token_prefills_within_ten_percent(data: fit.Data, name: str) -> None:
    # Read straight from perf_model.csv: every unbatched 8192-token prompt of the profile's hardware and TP.
    entry, p = DOC["profiles"][name], get_profile(name)
    hardware = {"a100-80gb": "a100-80gb", "h100-sxm": "h100-80gb"}[p.gpu]
    with (DATA_DIR / splitwise.PERF_MODEL).open(newline="") as f:
        measured = [float(r["prompt_time"]) / 1e3 for r in csv.DictReader(f)
                    if r["model"] == "llama2-70b" and r["hardware"] == hardware
                    and r["tensor_parallel"] == str(p.tensor_parallel) and r["prompt_size"] == "8192"
                    and r["batch_size"] == "1"]
    assert len(measured) == 5
    c = entry["coefficients"]
    # Past the knee (the largest shipped weight read, 33.8 ms, is 100 tokens' FLOPs on A100 TP 2) the
    # roofline form is the linear one without the weight read.
    attention = c["prefill_s_per_token"] * c["attention_tokens_per_pair"] * 33_558_528
    predicted = c["step_overhead_s"] + c["prefill_s_per_token"] * 8192 + attention
    assert p.step_time(8192, 0, 0, 33_558_528) == pytest.approx(predicted, rel=1e-12)
    # Held out of the fit: no fitted row is a prefill of more than 4096 tokens.
    combo = fit.Combo(entry["model"], entry["measured_gpu"], entry["tensor_parallel"], entry["source"])
    fit_rows, held_out, _ = fit.split_rows(combo, data)
    assert all(isinstance(r, splitwise.SplitwiseRow) for r in fit_rows)
    assert not [r for r in fit_rows
                if isinstance(r, splitwise.SplitwiseRow) and r.phase == "prefill" and r.prompt > 4096]
    assert sorted(r.measured[0] for r in held_out if r.group == "prefill > 2048") == sorted(measured)
    error = sum(abs(predicted / m - 1) for m in measured) / 5
    assert error <= 0.10
    assert entry["heldout_groups"]["prefill > 2048"]["mape"] == pytest.approx(error, rel=1e-9)


@needs_data
@pytest.mark.parametrize("name", SHIPPED)
def test_step_form_is_the_rule_s_choice_from_both_forms_held_out_errors(data: fit.Data, name: str) -> None:
    # Both forms' per-group held-out errors, recomputed here from the data with each form's shipped
    # coefficients, and the form shipped is what the documented rule picks from them.
    entry = DOC["profiles"][name]
    forms = entry["forms"]
    assert entry["step_form"] == forms["chosen"] == get_profile(name).step_form
    combo = fit.Combo(entry["model"], entry["measured_gpu"], entry["tensor_parallel"], entry["source"])
    _, held_out, _ = fit.split_rows(combo, data)
    worst, overall = {}, {}
    for form in ("linear", "roofline"):
        c = forms[form]["coefficients"]
        assert ("weight_read_s" in c) == (form == "roofline")
        p = dataclasses.replace(get_profile(name), **{"weight_read_s": 0.0, **c})
        assert p.step_form == form
        errors: dict[str, list[float]] = {}
        for r in held_out:
            errors.setdefault(r.group, []).extend(abs(q / m - 1) for q, m in zip(r.predict(p), r.measured, strict=True))
        means = {g: sum(e) / len(e) for g, e in errors.items()}
        assert means == pytest.approx({g: v["mape"] for g, v in forms[form]["heldout_groups"].items()}, rel=1e-9)
        worst[form] = max(means.values())
        overall[form] = sum(sum(e) for e in errors.values()) / sum(len(e) for e in errors.values())
    roofline = worst["roofline"] <= worst["linear"] - 0.01 and overall["roofline"] <= overall["linear"]
    assert entry["step_form"] == ("roofline" if roofline else "linear")
    assert entry["coefficients"] == forms[entry["step_form"]]["coefficients"]


def test_every_shipped_profile_within_ten_percent_on_every_held_out_group() -> None:
    for name, entry in DOC["profiles"].items():
        for group, g in entry["heldout_groups"].items():
            assert g["mape"] <= 0.10, (name, group)


def test_default_fleet_profiles_keep_the_linear_form() -> None:
    # The rule leaves every LLM-Inference-Bench profile linear (the forms agree there within 0.2
    # points), so the embedded default's figures (README) are not moved by the roofline.
    text = (Path(__file__).resolve().parents[2] / "autoscaler" / "default_fleet.yaml").read_text()
    names = [line.split("profile:")[1].strip() for line in text.splitlines() if line.strip().startswith("profile:")]
    assert names and all(get_profile(n).step_form == "linear" for n in names)
    assert {n for n in SHIPPED if get_profile(n).step_form == "roofline"} == {
        "llama-2-70b/a100-80gb/tp2", "llama-2-70b/a100-80gb/tp8", "llama-2-70b/h100-sxm/tp2"}


@needs_data
def test_refit_reproduces_shipped_coefficients(data: fit.Data) -> None:
    fits = fit.fit_all(data)
    assert {n for n, f in fits.items() if fit.shipped(f)} | set(fit.STAND_INS) == set(SHIPPED)
    for name in SHIPPED:
        refit = fits[fit.STAND_INS[name][0]].profile if name in fit.STAND_INS else fits[name].profile
        refit = fit.stand_in(name, refit) if name in fit.STAND_INS else refit
        shipped = get_profile(name)
        for field in COEFFICIENTS:
            assert getattr(refit, field) == pytest.approx(getattr(shipped, field), rel=1e-6), (name, field)


@needs_data
def test_combos_not_shipped_err_over_ten_percent(data: fit.Data) -> None:
    # What the fit refuses is refused for its error, and the document says so.
    refused = {n: f for n, f in fit.fit_all(data).items() if not fit.shipped(f)}
    assert refused  # Mixtral and Llama-2-70B on 4 A100 40GB
    for name, f in refused.items():
        assert f.held_out_mape > 0.10
        assert name not in SHIPPED
        assert f"{name} ({f.combo.source})" in DOC["not_shipped"]


@needs_data
def test_a100_rows_are_40gb_cards(data: fit.Data) -> None:
    # Llama-3-8B, L = 2048, B = 32 -> 64 doubles the KV demand to 64 x 4096 x 128 KiB = 34.4 GB: more
    # than a 40 GB A100 holds after the 16 GB of weights, well within an 80 GB card or an H100.
    def latency(gpu: str, batch: int) -> float:
        (row,) = [r for r in bench.rows_for(data.bench, "llama-3-8b", gpu, 1)
                  if r.source == bench.ALL_RESULTS and r.input_len == 2048 and r.batch == batch]
        return row.latency_s

    assert latency("a100-40gb", 64) / latency("a100-40gb", 32) > 1.8  # work doubles, time with it: preempted
    assert latency("h100-sxm", 64) / latency("h100-sxm", 32) < 1.6  # batching still pays
    (row,) = [r for r in bench.rows_for(data.bench, "llama-3-8b", "a100-40gb", 1)
              if r.input_len == 2048 and r.batch == 64]
    assert bench.preemption("llama-3-8b", "a100-40gb", 1, row) is not None
    assert bench.preemption("llama-3-8b", "a100-80gb", 1, row) is None


@needs_data
@pytest.mark.parametrize(("name", "n_rows"), [("llama-3-8b/a100-40gb", 19), ("llama-3-8b/h100-sxm", 20)])
def test_independent_rerun_latencies(name: str, n_rows: int) -> None:
    # Fig_3 re-ran the fp16 benchmark on A100 and H100: none of these runs was fitted. The A100's
    # preempting B=64, L=2048 run is left out as in the fit.
    p = get_profile(name)
    reruns = [r for r in bench.load_replicate_rows(DATA_DIR)
              if r.hardware == bench.HARDWARE[p.gpu] and r.model == bench.MODEL_NAMES[p.model]
              and bench.preemption(p.model, p.gpu, 1, r) is None]
    assert len(reruns) == n_rows
    assert fit.mape(p, reruns) <= 0.10


@needs_data
@pytest.mark.parametrize("name", ["llama-3-8b/a100-40gb", "llama-3-8b/gh200", "llama-3-8b/h100-sxm"])
def test_mean_inter_token_latency_matches_fig22(name: str) -> None:
    # Fig_22 publishes TTFT and end-to-end latency of the B=16, input = output = 1024 run (its
    # "Output Length" column is the TTFT run's 1); mean ITL = (end - TTFT) / 1023.
    p = get_profile(name)
    (row,) = [
        r
        for _, r in bench.read_csv(DATA_DIR / "llm-inference-bench/Fig_22__all_results_TTFT_ITL.csv")
        if r["Hardware"] == bench.HARDWARE[p.gpu] and r["Framework"] == "vLLM"
        and r["Model"] == bench.MODEL_NAMES[p.model]
    ]
    batch, length = int(row["Batch Size"]), int(row["Input Length"])
    itl = (float(row["end_latency"]) - float(row["TTFT Latency"])) / (length - 1)
    # Mean context over decode steps j = 1..L-1 is L + L/2 per sequence.
    predicted = p.step_time(0, batch, 0) + p.seconds_per_ctx_token * batch * 1.5 * length
    assert predicted == pytest.approx(itl, rel=0.10)


@needs_data
def test_a100_prefill_slope_matches_vidur_kernel_profile() -> None:
    # Vidur's per-op A100 kernel times (no attention) must roughly agree with the fitted slope
    # (prefill is compute-bound: 40 and 80 GB A100s have the same 312 TFLOPS).
    vidur = fit.vidur_prefill_s_per_token(DATA_DIR)
    assert get_profile("llama-3-8b/a100-40gb").prefill_s_per_token == pytest.approx(vidur, rel=0.20)


def _write(path: Path, doc: object) -> str:
    path.write_text(json.dumps(doc), encoding="utf-8")
    return str(path)


@pytest.mark.parametrize("name", ["llama-3-70b/h100-sxm/tp4", "llama-2-70b/a100-80gb/tp8"])
def test_profile_file_with_a_shipped_entry_is_that_profile(tmp_path: Path, name: str) -> None:
    loaded = get_profile(_write(tmp_path / "p.json", shipped_entries()[name]))
    shipped = get_profile(name)
    assert loaded.name == str(tmp_path / "p.json")
    model, gpu, tp = name.split("/")
    assert (loaded.model, loaded.gpu, loaded.tensor_parallel) == (model, gpu, int(tp.removeprefix("tp")))
    for args in [(0, 1, 1000), (8192, 0, 0, 33_558_528), (512, 64, 300_000, 131_328)]:
        assert loaded.step_time(*args) == shipped.step_time(*args)
    # Without the coefficient, a file's attention term is the architecture's FLOP ratio.
    entry = shipped_entries()[name]
    del entry["coefficients"]["attention_tokens_per_pair"]
    bare = get_profile(_write(tmp_path / "bare.json", entry))
    assert bare.attention_tokens_per_pair == MODELS[shipped.model].attention_tokens_per_pair


def _entry(**changes: Any) -> dict[str, Any]:
    entry = json.loads(json.dumps(shipped_entries()["llama-3-8b/h100-sxm"]))
    for key, value in changes.items():
        *parents, last = key.split(".")
        node = entry
        for p in parents:
            node = node[p]
        if value is None:
            del node[last]
        else:
            node[last] = value
    return entry


@pytest.mark.parametrize(("changes", "message"), [
    ({"coefficients.step_overhead_s": None}, "coefficients.step_overhead_s: Field required"),
    ({"coefficients.bandwidth_efficiency": 1.5},
     "coefficients.bandwidth_efficiency: Input should be less than or equal to 1"),
    ({"architecture.num_kv_heads": 0}, "architecture.num_kv_heads: Input should be greater than or equal to 1"),
    ({"tensor_parallel": "2"}, "tensor_parallel: a number is expected, got the string '2' (write it without quotes)"),
    ({"gpu": "t4"}, "gpu: unknown GPU 't4'; known: a100-40gb, a100-80gb, gh200, h100-sxm"),
    ({"kv_bytes_per_token": 65536},
     "kv_bytes_per_token: 65536, but the architecture, GPU and tensor_parallel give 131072"),
    ({"tensor_parallel": 2},
     "mem_bandwidth_bytes_per_s: 3.35e+12, but the architecture, GPU and tensor_parallel give 6.7e+12"),
])
def test_bad_profile_file_names_the_file_and_the_field(tmp_path: Path, changes: dict[str, Any], message: str) -> None:
    path = _write(tmp_path / "bad.json", _entry(**changes))
    with pytest.raises(ProfileError) as exc:
        get_profile(path)
    assert str(exc.value) == f"{path}: {message}"


def test_unreadable_profile_files(tmp_path: Path) -> None:
    (tmp_path / "broken.json").write_text("{", encoding="utf-8")
    (tmp_path / "list.json").write_text("[]", encoding="utf-8")
    for name, start in [("missing.json", "cannot read profile file"), ("broken.json", "not a JSON profile file"),
                        ("list.json", "a profile file is one JSON object")]:
        with pytest.raises(ProfileError) as exc:
            get_profile(str(tmp_path / name))
        assert str(exc.value).startswith(f"{tmp_path / name}: {start}")
        assert "\n" not in str(exc.value)


@needs_data
def test_keep_holds_the_shipped_coefficients_only_where_a_refit_agrees(data: fit.Data) -> None:
    fits = fit.fit_all(data)
    kept = fit.keep(fits, DOC)
    for name in SHIPPED:
        if name in fit.STAND_INS:
            continue
        for g in (kept[name], kept[name].alternative):
            assert g is not None
            c = DOC["profiles"][name]["forms"][g.profile.step_form]["coefficients"]
            assert {k: getattr(g.profile, k) for k in c} == c, name  # exactly the shipped values
            assert g.held_out_mape == pytest.approx(fit.mape(g.profile, g.held_out_rows), rel=1e-12)
    # A document 0.1 % off is not kept: the refit's own coefficients stay.
    off = json.loads(json.dumps(DOC))
    off["profiles"]["llama-3-8b/h100-sxm"]["forms"]["linear"]["coefficients"]["step_overhead_s"] *= 1.001
    refit = fit.keep(fits, off)["llama-3-8b/h100-sxm"]
    assert refit.profile == fits["llama-3-8b/h100-sxm"].profile


@pytest.mark.parametrize(("text", "expected"), [
    (None, "cannot read coefficients document: No such file or directory"),
    ("[1]", "a coefficients document is one JSON object, got list"),
    ('{"profiles": []}', "profiles: a mapping of profile name -> entry is expected"),
    ('{"profiles": {"p": {"coefficients": {"step_overhead_s": "0.01"}}}}',
     "profiles.p.coefficients.step_overhead_s: a finite number is expected, got '0.01'"),
    ('{"profiles": {"p": {"forms": {"roofline": {"coefficients": {"weight_read_s": null}}}}}}',
     "profiles.p.forms.roofline.coefficients.weight_read_s: a finite number is expected, got None"),
])
def test_a_bad_keep_document_is_one_line_before_any_fit(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                        text: str | None, expected: str) -> None:
    kept = tmp_path / "kept.json"
    if text is not None:
        kept.write_text(text, encoding="utf-8")
    # --data names no data: a fit would fail on it, so exit 2 with this message proves the check comes first
    with pytest.raises(SystemExit) as exc:
        fit.main(["--data", str(tmp_path / "no-data"), "--out", str(tmp_path / "out.json"), "--keep", str(kept)])
    assert exc.value.code == 2
    (line,) = capsys.readouterr().err.strip().splitlines()[-1:]
    assert line == f"python -m models.profiles.fit: error: --keep: {kept}: {expected}"
    assert not (tmp_path / "out.json").exists()


def test_the_shipped_document_is_a_valid_keep_document() -> None:
    doc = fit.read_kept(Path(fit.__file__).with_name("coefficients.json"))
    assert doc["profiles"] == DOC["profiles"]
