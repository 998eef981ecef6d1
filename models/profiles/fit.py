"""Fit the performance profiles to measured vLLM runs and write ``coefficients.json``.

Usage::

    python -m models.profiles.fit --data /work/shared/data --out models/profiles/coefficients.json

Data (``<data>/llm-inference-bench``, LLM-Inference-Bench, github.com/argonne-lcf/LLM-Inference-Bench
at 4211f5d4e9bc0145ed541b6d372d5d8223b44235, BSD-3-Clause, arXiv:2411.00136):

- ``All_results.csv``: offline static-batch runs, Framework == vLLM, Model == Meta-Llama-3-8B,
  Num of Hardware == 1, Hardware in {Nvidia A100, H100, GH200 GPU}: batch B in {1, 16, 32, 64},
  input = output = L in {128, ..., 2048}; Latency = seconds for the whole batch.
- ``Fig_21__all_results_TTFT.csv``: the same benchmark with output length 1 (B=16, L=1024), i.e. the
  prefill alone; the only rows that pin the prefill slope, so they are always fitted.
- ``Fig_3__A100_H100_quant_all_results.csv``: independent re-runs (fp16 weights and KV) on A100 and
  H100, used only as a cross-check (``replicate_mape``).

The runs used vLLM 0.5.x (``vLLM/*/`` scripts of that repository) without chunked prefill, so the
scheduler's default ``max_num_batched_tokens = max(max_model_len, 2048) = 8192`` applies: whole
prompts are packed ``8192 // L`` per prefill-only step, then ``L - 1`` decode steps follow with all B
sequences, the j-th with KV context ``B * (L + j)``. A row's predicted latency is the sum of
``PerformanceProfile.step_time`` over those steps (``predict_latency``).

Per GPU, the four coefficients of ``PerformanceProfile`` are fitted by
``scipy.optimize.least_squares`` on log(predicted / measured) latency (latencies span 0.4-125 s),
within physical bounds: the step overhead is at least the time to read the weights at peak
bandwidth, the prefill cost per token at least its matmul FLOPs at peak tensor throughput, the
per-sequence cost non-negative, and the bandwidth efficiency in [0.3, 1]. All rows with L = 512 are
held out (the middle length, so the held-out error measures interpolation at every batch size).

Caveat: the A100 rows were most likely measured on 40 GB A100s (1.555 TB/s, see ``EXCLUDED``) but
feed the ``a100-80gb`` profile (2.039 TB/s); its fitted overhead and efficiency absorb the slower
memory, so that profile errs on the slow side for an 80 GB card.
"""

from __future__ import annotations

import argparse
import csv
import datetime
import hashlib
import json
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from scipy.optimize import least_squares

from models.profiles.profile import PerformanceProfile
from models.profiles.specs import A100_80GB, GPUS, LLAMA_3_8B, GpuSpec, ModelSpec

BENCH_REPO = "github.com/argonne-lcf/LLM-Inference-Bench"
BENCH_COMMIT = "4211f5d4e9bc0145ed541b6d372d5d8223b44235"
"""Repository HEAD the files were copied at (``All_results.csv`` last changed in ae7e7a41)."""
VIDUR_REPO = "github.com/microsoft/vidur"
VIDUR_COMMIT = "7d47513363ec447a741ac5e47241580b47724fbf"

ALL_RESULTS = "llm-inference-bench/All_results.csv"
TTFT_RESULTS = "llm-inference-bench/Fig_21__all_results_TTFT.csv"
REPLICATE_RESULTS = "llm-inference-bench/Fig_3__A100_H100_quant_all_results.csv"
VIDUR_A100_MLP = "vidur-profiling/profiling/compute/a100/meta-llama/Meta-Llama-3-8B/mlp.csv"
"""Paths relative to the ``--data`` directory."""

DATA_FRAMEWORK = "vLLM"
DATA_MODEL = "meta-llama/Meta-Llama-3-8B"
REPLICATE_DTYPES = "Weight = fp16, KV Cache = fp16"
MEASURED_HARDWARE: dict[str, str] = {
    "a100-80gb": "Nvidia A100 GPU",
    "h100-sxm": "Nvidia H100 GPU",
    "gh200": "Nvidia GH200 GPU",
}
"""GPU key -> ``Hardware`` value of its rows in the benchmark files."""
A100_PROFILE = f"{LLAMA_3_8B.key}/{A100_80GB.key}"
"""The profile whose prefill slope is cross-checked against Vidur's A100 kernel profile."""

MAX_NUM_BATCHED_TOKENS = 8192
"""Prefill tokens per step in the benchmark runs (vLLM 0.5 default without chunked prefill)."""
HELD_OUT_LENGTH = 512
"""Input = output length whose All_results rows are held out."""
MIN_BANDWIDTH_EFFICIENCY = 0.3
"""Lower bound of the fitted KV-read bandwidth efficiency (upper bound 1: peak bandwidth)."""
EXCLUDED: dict[tuple[str, int, int, int], str] = {
    ("Nvidia A100 GPU", 2048, 2048, 64): (
        "KV demand 64 x 4096 tokens x 128 KiB = 34 GB exceeds the ~20 GB KV pool of a 40 GB A100 "
        "(the runs used ALCF Polaris paths, whose A100s have 40 GB), so vLLM preempts and recomputes: "
        "throughput rises 5% from B=32 to B=64 here (26-31% on H100/GH200); 125.7 s, and 125.5 s "
        "in Fig_3. Step time does not model preemption."
    ),
}
"""(Hardware, input length, output length, batch) -> why such runs are not used."""


@dataclass(frozen=True)
class BenchRow:
    """One measured offline run: B prompts of ``input_len`` tokens, ``output_len`` tokens each.

    Attributes:
        hardware: ``Hardware`` column, e.g. ``"Nvidia H100 GPU"``.
        batch: prompts in the batch (B).
        input_len: prompt tokens per request.
        output_len: generated tokens per request.
        latency_s: measured seconds for the whole batch.
        source: data file, relative to the data directory.
    """

    hardware: str
    batch: int
    input_len: int
    output_len: int
    latency_s: float
    source: str


@dataclass(frozen=True)
class ProfileFit:
    """Result of fitting one profile.

    Attributes:
        profile: the fitted profile.
        fit_rows: rows the coefficients were fitted to.
        held_out_rows: rows kept out of the fit.
        excluded_rows: rows not used at all (reasons in ``EXCLUDED``).
        fit_mape: mean |predicted / measured - 1| over ``fit_rows``.
        held_out_mape: the same over ``held_out_rows``.
    """

    profile: PerformanceProfile
    fit_rows: tuple[BenchRow, ...]
    held_out_rows: tuple[BenchRow, ...]
    excluded_rows: tuple[BenchRow, ...]
    fit_mape: float
    held_out_mape: float


def read_csv(path: Path) -> list[dict[str, str]]:
    """Rows of a published CSV as dicts, header names and values stripped, blank lines skipped."""
    # Published files have blank lines, padded header names and short rows (missing -> "").
    with path.open(newline="", encoding="utf-8") as f:
        return [{k.strip(): (v or "").strip() for k, v in r.items() if k} for r in csv.DictReader(f)]


def _is_selected(r: dict[str, str]) -> bool:
    return (
        r["Framework"] == DATA_FRAMEWORK
        and r["Model"] == DATA_MODEL
        and r["Num of Hardware"] == "1"
        and r["Hardware"] in MEASURED_HARDWARE.values()
    )


def _bench_row(r: dict[str, str], source: str, input_col: str, output_col: str, latency_col: str) -> BenchRow:
    return BenchRow(
        r["Hardware"],
        int(r["Batch Size"]),
        int(r[input_col]),
        int(r[output_col]),
        float(r[latency_col]),
        source,
    )


def load_rows(data_dir: Path) -> list[BenchRow]:
    """Selected single-GPU vLLM Llama-3-8B rows of ``ALL_RESULTS`` and ``TTFT_RESULTS``.

    Raises:
        FileNotFoundError: a data file is missing.
    """
    io = "Input Output Length"
    rows = [
        _bench_row(r, ALL_RESULTS, io, io, "Latency")
        for r in read_csv(data_dir / ALL_RESULTS)
        if _is_selected(r)
    ]
    rows += [
        _bench_row(r, TTFT_RESULTS, "Input Length", "Output Length", "Latency")
        for r in read_csv(data_dir / TTFT_RESULTS)
        if _is_selected(r)
    ]
    return rows


def load_replicate_rows(data_dir: Path) -> list[BenchRow]:
    """Independent re-runs in ``REPLICATE_RESULTS`` (fp16 weights and KV; A100 and H100 only).

    Exact duplicate lines of the published file are dropped; ``EXCLUDED`` rows are left out.

    Raises:
        FileNotFoundError: the data file is missing.
    """
    io = "Input Output Length"
    rows = {
        _bench_row(r, REPLICATE_RESULTS, io, io, "latency")
        for r in read_csv(data_dir / REPLICATE_RESULTS)
        if _is_selected(r) and r["kv_cache_dtype"] == REPLICATE_DTYPES
    }
    return sorted((r for r in rows if _exclusion(r) is None), key=_row_key)


def _row_key(r: BenchRow) -> tuple[str, str, int, int, int]:
    return (r.hardware, r.source, r.input_len, r.output_len, r.batch)


def _exclusion(r: BenchRow) -> str | None:
    return EXCLUDED.get((r.hardware, r.input_len, r.output_len, r.batch))


def split_rows(
    rows: Iterable[BenchRow], hardware: str
) -> tuple[list[BenchRow], list[BenchRow], list[BenchRow]]:
    """Split ``hardware``'s rows into (fit, held-out, excluded), each sorted by (source, L, B)."""
    fit: list[BenchRow] = []
    held_out: list[BenchRow] = []
    excluded: list[BenchRow] = []
    for r in sorted((r for r in rows if r.hardware == hardware), key=_row_key):
        if _exclusion(r) is not None:
            excluded.append(r)
        elif r.source == ALL_RESULTS and r.input_len == HELD_OUT_LENGTH:
            held_out.append(r)
        else:
            fit.append(r)
    return fit, held_out, excluded


def predict_latency(profile: PerformanceProfile, row: BenchRow) -> float:
    """Seconds the benchmark run ``row`` takes under ``profile`` (steps as in the module doc)."""
    per_step = max(1, MAX_NUM_BATCHED_TOKENS // row.input_len)
    full_steps, last_prompts = divmod(row.batch, per_step)
    prefill = full_steps * profile.step_time(per_step * row.input_len, 0, 0)
    prefill += profile.step_time(last_prompts * row.input_len, 0, 0)
    steps = row.output_len - 1
    # Context of decode step j (1..steps) is B * (L + j): the prompt plus j generated tokens.
    ctx_tokens = row.batch * (steps * row.input_len + steps * (steps + 1) // 2)
    decode = steps * profile.step_time(0, row.batch, 0) + profile.seconds_per_ctx_token * ctx_tokens
    return prefill + decode


def mape(profile: PerformanceProfile, rows: Sequence[BenchRow]) -> float:
    """Mean absolute relative error of ``predict_latency`` over ``rows``."""
    return float(np.mean([abs(predict_latency(profile, r) / r.latency_s - 1.0) for r in rows]))


def _profile(model: ModelSpec, gpu: GpuSpec, params: Sequence[float]) -> PerformanceProfile:
    step_overhead_s, prefill_s_per_token, decode_s_per_seq, bandwidth_efficiency = map(float, params)
    return PerformanceProfile(
        name=f"{model.key}/{gpu.key}",
        model=model.key,
        gpu=gpu.key,
        kv_bytes_per_token=model.kv_bytes_per_token,
        mem_bandwidth_bytes_per_s=gpu.mem_bandwidth_bytes_per_s,
        step_overhead_s=step_overhead_s,
        prefill_s_per_token=prefill_s_per_token,
        decode_s_per_seq=decode_s_per_seq,
        bandwidth_efficiency=bandwidth_efficiency,
    )


def fit_profile(model: ModelSpec, gpu: GpuSpec, rows: Iterable[BenchRow]) -> ProfileFit:
    """Fit ``gpu``'s profile to its rows among ``rows`` (least squares on log latency ratio).

    Raises:
        ValueError: there are fewer fit rows than coefficients.
    """
    fit, held_out, excluded = split_rows(rows, MEASURED_HARDWARE[gpu.key])
    if len(fit) < 4:
        raise ValueError(f"{gpu.key}: {len(fit)} fit rows, need at least 4")
    weights_read_s = model.weight_bytes / gpu.mem_bandwidth_bytes_per_s
    compute_s_per_token = model.prefill_flops_per_token / gpu.peak_dense_bf16_flops
    lower = np.array([weights_read_s, compute_s_per_token, 0.0, MIN_BANDWIDTH_EFFICIENCY])
    upper = np.array([np.inf, np.inf, np.inf, 1.0])
    scale = np.array([weights_read_s, compute_s_per_token, 1e-5, 1.0])
    start = np.array([1.5 * weights_read_s, 1.5 * compute_s_per_token, 5e-5, 0.7])

    def residuals(params: np.ndarray) -> list[float]:
        p = _profile(model, gpu, params)
        return [math.log(predict_latency(p, r) / r.latency_s) for r in fit]

    result = least_squares(
        residuals, start, bounds=(lower, upper), x_scale=scale, xtol=1e-12, ftol=1e-12, gtol=1e-12
    )
    profile = _profile(model, gpu, result.x)
    return ProfileFit(
        profile=profile,
        fit_rows=tuple(fit),
        held_out_rows=tuple(held_out),
        excluded_rows=tuple(excluded),
        fit_mape=mape(profile, fit),
        held_out_mape=mape(profile, held_out),
    )


def fit_all(data_dir: Path) -> dict[str, ProfileFit]:
    """Fit every shipped profile (Llama-3-8B on each GPU of ``MEASURED_HARDWARE``), by name."""
    rows = load_rows(data_dir)
    fits = (fit_profile(LLAMA_3_8B, GPUS[key], rows) for key in MEASURED_HARDWARE)
    return {f.profile.name: f for f in fits}


def vidur_prefill_s_per_token(data_dir: Path) -> float:
    """Marginal A100 prefill seconds per token of Llama-3-8B's non-attention ops, from Vidur.

    Sums the median per-layer op times (ms) of ``VIDUR_A100_MLP`` at TP 1 (embedding excluded:
    it runs once per model, not per layer), takes the slope between 4096 and 8192 tokens (8192 =
    the benchmark's prefill step) and multiplies by the layer count. Repeated profiling rows at the
    same token count are averaged. Attention is not in the file; at the benchmark's 1-2k-token
    prompts it adds only a few percent.
    """
    per_layer_ms: dict[int, list[float]] = {}
    for r in read_csv(data_dir / VIDUR_A100_MLP):
        if r["num_tensor_parallel_workers"] == "1":
            ops = [k for k in r if k.endswith(".median") and not k.startswith("time_stats.emb.")]
            per_layer_ms.setdefault(int(r["num_tokens"]), []).append(sum(float(r[k]) for k in ops))
    lo, hi = 4096, MAX_NUM_BATCHED_TOKENS
    slope_ms = (float(np.mean(per_layer_ms[hi])) - float(np.mean(per_layer_ms[lo]))) / (hi - lo)
    return slope_ms * 1e-3 * LLAMA_3_8B.num_layers


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _row_doc(profile: PerformanceProfile, r: BenchRow) -> dict[str, object]:
    return {
        "source": r.source,
        "batch": r.batch,
        "input_len": r.input_len,
        "output_len": r.output_len,
        "latency_s": r.latency_s,
        "predicted_s": predict_latency(profile, r),
    }


def build_document(
    fits: dict[str, ProfileFit], data_dir: Path, vidur_s_per_token: float
) -> dict[str, object]:
    """The ``coefficients.json`` content: coefficients per profile plus provenance and checks.

    ``vidur_s_per_token`` is ``vidur_prefill_s_per_token(data_dir)``, recorded as a cross-check.
    """
    replicates = load_replicate_rows(data_dir)
    a100 = fits[A100_PROFILE].profile
    profiles: dict[str, object] = {}
    for name, f in fits.items():
        p, gpu = f.profile, GPUS[f.profile.gpu]
        reps = [r for r in replicates if r.hardware == MEASURED_HARDWARE[p.gpu]]
        profiles[name] = {
            "model": p.model,
            "gpu": p.gpu,
            "coefficients": {
                "step_overhead_s": p.step_overhead_s,
                "prefill_s_per_token": p.prefill_s_per_token,
                "decode_s_per_seq": p.decode_s_per_seq,
                "bandwidth_efficiency": p.bandwidth_efficiency,
            },
            "kv_bytes_per_token": p.kv_bytes_per_token,
            "mem_bandwidth_bytes_per_s": p.mem_bandwidth_bytes_per_s,
            "gpu_source": gpu.source,
            "measured_hardware": MEASURED_HARDWARE[p.gpu],
            "n_fit_rows": len(f.fit_rows),
            "n_held_out_rows": len(f.held_out_rows),
            "fit_mape": f.fit_mape,
            "held_out_mape": f.held_out_mape,
            "replicate_mape": mape(p, reps) if reps else None,
            "n_replicate_rows": len(reps),
            "held_out_rows": [_row_doc(p, r) for r in f.held_out_rows],
            "excluded_rows": [{**_row_doc(p, r), "reason": _exclusion(r)} for r in f.excluded_rows],
        }
    files = [ALL_RESULTS, TTFT_RESULTS, REPLICATE_RESULTS, VIDUR_A100_MLP]
    return {
        "fitted_on": datetime.date.today().isoformat(),
        "fitted_by": "python -m models.profiles.fit",
        "model_form": (
            "step_time = step_overhead_s + prefill_s_per_token*p + decode_s_per_seq*n"
            " + c*kv_bytes_per_token/(bandwidth_efficiency*mem_bandwidth_bytes_per_s); 0 when idle"
        ),
        "sources": {
            "llm-inference-bench": {"repo": BENCH_REPO, "commit": BENCH_COMMIT},
            "vidur-profiling": {"repo": VIDUR_REPO, "commit": VIDUR_COMMIT},
            "files_sha256": {name: _sha256(data_dir / name) for name in files},
        },
        "row_filters": {
            "Framework": DATA_FRAMEWORK,
            "Model": DATA_MODEL,
            "Num of Hardware": 1,
            "Hardware": sorted(MEASURED_HARDWARE.values()),
            "held_out": f"{ALL_RESULTS} rows with Input Output Length == {HELD_OUT_LENGTH}",
            "fit_also": f"{TTFT_RESULTS} rows (output length 1: prefill only)",
            "replicates": f"{REPLICATE_RESULTS} rows with kv_cache_dtype == '{REPLICATE_DTYPES}'",
            "max_num_batched_tokens": MAX_NUM_BATCHED_TOKENS,
        },
        "cross_checks": {
            "vidur_a100_prefill_s_per_token": vidur_s_per_token,
            "fitted_a100_prefill_s_per_token": a100.prefill_s_per_token,
            "note": "Vidur: marginal non-attention op time per token, 4096->8192 tokens, x32 layers",
        },
        "profiles": profiles,
    }


def main(argv: Sequence[str] | None = None) -> None:
    """Fit, print coefficients and errors per profile, and write the JSON document."""
    parser = argparse.ArgumentParser(
        prog="python -m models.profiles.fit", description="Fit performance profiles, write coefficients.json."
    )
    parser.add_argument("--data", type=Path, required=True, help="shared data directory")
    parser.add_argument("--out", type=Path, required=True, help="coefficients.json to write")
    args = parser.parse_args(argv)
    fits = fit_all(args.data)
    vidur = vidur_prefill_s_per_token(args.data)
    for name, f in fits.items():
        p = f.profile
        print(
            f"{name}: step_overhead={p.step_overhead_s * 1e3:.3f} ms "
            f"prefill={p.prefill_s_per_token * 1e6:.2f} us/token "
            f"decode={p.decode_s_per_seq * 1e6:.2f} us/seq eta={p.bandwidth_efficiency:.3f} "
            f"({p.seconds_per_ctx_token * 1e9:.2f} ns/ctx-token) | fit MAPE {f.fit_mape:.2%} "
            f"({len(f.fit_rows)} rows), held-out MAPE {f.held_out_mape:.2%} ({len(f.held_out_rows)} rows)"
        )
    a100 = fits[A100_PROFILE].profile
    print(
        f"A100 prefill: Vidur non-attention ops {vidur * 1e6:.2f} us/token, "
        f"fitted {a100.prefill_s_per_token * 1e6:.2f} us/token"
    )
    doc = build_document(fits, args.data, vidur)
    args.out.write_text(json.dumps(doc, indent=2) + "\n", encoding="utf-8")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
