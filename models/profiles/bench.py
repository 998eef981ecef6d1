"""LLM-Inference-Bench rows: offline static-batch vLLM runs, and their latency under a profile.

Data (``<data>/llm-inference-bench``, github.com/argonne-lcf/LLM-Inference-Bench at
4211f5d4e9bc0145ed541b6d372d5d8223b44235, BSD-3-Clause, arXiv:2411.00136):

- ``All_results.csv``: Framework == vLLM, batch B in {1, 16, 32, 64}, input = output = L in
  {128, ..., 2048}; Latency = seconds for the whole batch. ``Num of Hardware`` is the tensor-parallel
  degree: the repository's vLLM scripts (``vLLM/A100/Throughput_measurement/benchmark_throughput.py``,
  looped by ``run_benchmarks.sh`` over ``--tensor-parallel-size 1 2 4``) write
  ``args.tensor_parallel_size`` there.
- ``Fig_21__all_results_TTFT.csv``: the same benchmark with output length 1 (B=16, L=1024) on one GPU,
  i.e. the prefill alone: the only rows that separate the prefill slope from the decode terms.
- ``Fig_3__A100_H100_quant_all_results.csv``: independent re-runs (fp16 weights and KV) on one A100
  and one H100, used only as a cross-check.

The runs used vLLM 0.5.x without chunked prefill, so the scheduler's default
``max_num_batched_tokens = max(max_model_len, 2048)`` (``max_model_len`` = the config's
``max_position_embeddings``) applies: whole prompts are packed ``max_num_batched_tokens // L`` per
prefill-only step, then ``L - 1`` decode steps follow with all B sequences, the j-th with KV
context ``B * (L + j)``. A row's predicted latency is the sum of ``PerformanceProfile.step_time``
over those steps, each prompt's attention pairs included (``BenchRow.predict``).
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from pathlib import Path

from models.profiles.profile import PerformanceProfile, prefill_group, prefill_pairs
from models.profiles.specs import GPUS, MODELS

ALL_RESULTS = "llm-inference-bench/All_results.csv"
TTFT_RESULTS = "llm-inference-bench/Fig_21__all_results_TTFT.csv"
REPLICATE_RESULTS = "llm-inference-bench/Fig_3__A100_H100_quant_all_results.csv"
"""Paths relative to the ``--data`` directory."""

FRAMEWORK = "vLLM"
REPLICATE_DTYPES = "Weight = fp16, KV Cache = fp16"
HARDWARE: dict[str, str] = {
    "a100-40gb": "Nvidia A100 GPU",
    "h100-sxm": "Nvidia H100 GPU",
    "gh200": "Nvidia GH200 GPU",
}
"""GPU key -> ``Hardware`` value of its rows (A100s with 40 GB: see ``models.profiles.fit``)."""
MODEL_NAMES: dict[str, str] = {
    "llama-3-8b": "meta-llama/Meta-Llama-3-8B",
    "llama-3-70b": "meta-llama/Meta-Llama-3-70B",
    "llama-2-7b": "meta-llama/Llama-2-7b-hf",
    "llama-2-70b": "meta-llama/Llama-2-70b-hf",
    "mistral-7b": "mistralai/Mistral-7B-v0.1",
    "mixtral-8x7b": "mistralai/Mixtral-8x7B-v0.1",
    "qwen2-7b": "Qwen/Qwen2-7B",
    "qwen2-72b": "Qwen/Qwen2-72B",
}
"""Model key -> ``Model`` value of its rows."""

HELD_OUT_LENGTH = 512
"""Input = output length whose ``ALL_RESULTS`` rows are held out (the middle length: the held-out
error measures interpolation at every batch size)."""
GPU_MEMORY_UTILIZATION = 0.9
"""vLLM's default ``gpu_memory_utilization``: the share of each GPU's memory for weights and KV."""


@dataclass(frozen=True)
class BenchRow:
    """One measured offline run: B prompts of ``input_len`` tokens, ``output_len`` tokens each.

    Attributes:
        hardware: ``Hardware`` column, e.g. ``"Nvidia H100 GPU"``.
        num_hardware: ``Num of Hardware`` (the tensor-parallel degree; 1 in ``TTFT_RESULTS``).
        model: ``Model`` column, e.g. ``"meta-llama/Meta-Llama-3-8B"``.
        batch: prompts in the batch (B).
        input_len: prompt tokens per request.
        output_len: generated tokens per request.
        latency_s: measured seconds for the whole batch.
        source: data file, relative to the data directory.
        line: line of ``source`` (the header is line 1).
    """

    hardware: str
    num_hardware: int
    model: str
    batch: int
    input_len: int
    output_len: int
    latency_s: float
    source: str
    line: int

    @property
    def measured(self) -> tuple[float, ...]:
        """The measured seconds this row pins: its latency."""
        return (self.latency_s,)

    def predict(self, profile: PerformanceProfile) -> tuple[float, ...]:
        """Seconds the run takes under ``profile`` (steps as in the module doc)."""
        return (predict_latency(profile, self),)

    @property
    def held_out(self) -> bool:
        """Kept out of the fit: ``ALL_RESULTS`` rows of length ``HELD_OUT_LENGTH``."""
        return self.source == ALL_RESULTS and self.input_len == HELD_OUT_LENGTH

    @property
    def group(self) -> str:
        """Row group for per-group errors: ``TTFT_RESULTS`` rows (output length 1) are prefills
        (``profile.prefill_group``), ``ALL_RESULTS`` rows whole runs, prefill and decode,
        ``"mixed B=<B>"``."""
        if self.output_len == 1:
            return prefill_group(self.input_len)
        return f"mixed B={self.batch}"

    def doc(self) -> dict[str, object]:
        """The row's reference in ``coefficients.json``: its file and line (the measured values stay in
        the data: the project ships no copy of it)."""
        return {"source": self.source, "line": self.line}


def read_csv(path: Path) -> list[tuple[int, dict[str, str]]]:
    """(line, row) of a published CSV, header names and values stripped, blank lines skipped."""
    # Published files have blank lines, padded header names and short rows (missing -> "").
    with path.open(newline="", encoding="utf-8") as f:
        reader = csv.DictReader(f)
        return [(reader.line_num, {k.strip(): (v or "").strip() for k, v in r.items() if k}) for r in reader]


def max_num_batched_tokens(model: str) -> int:
    """vLLM 0.5's default prefill budget per step for the model key ``model``."""
    return max(MODELS[model].max_position_embeddings, 2048)


def _row(line: int, r: dict[str, str], source: str, io: tuple[str, str], latency: str, n: str) -> BenchRow:
    return BenchRow(r["Hardware"], int(r.get(n) or 1), r["Model"], int(r["Batch Size"]), int(r[io[0]]),
                    int(r[io[1]]), float(r[latency]), source, line)


def load_rows(data_dir: Path) -> list[BenchRow]:
    """Every vLLM row of ``ALL_RESULTS`` and ``TTFT_RESULTS`` on ``HARDWARE``, models of ``MODEL_NAMES``.

    Raises:
        FileNotFoundError: a data file is missing.
    """
    io = ("Input Output Length", "Input Output Length")
    wanted = (set(HARDWARE.values()), set(MODEL_NAMES.values()))

    def keep(r: dict[str, str]) -> bool:
        return r["Framework"] == FRAMEWORK and r["Hardware"] in wanted[0] and r["Model"] in wanted[1]

    rows = [_row(i, r, ALL_RESULTS, io, "Latency", "Num of Hardware")
            for i, r in read_csv(data_dir / ALL_RESULTS) if keep(r)]
    rows += [_row(i, r, TTFT_RESULTS, ("Input Length", "Output Length"), "Latency", "")
             for i, r in read_csv(data_dir / TTFT_RESULTS) if keep(r)]
    return rows


def load_replicate_rows(data_dir: Path) -> list[BenchRow]:
    """Independent re-runs in ``REPLICATE_RESULTS`` (fp16 weights and KV; one A100 or H100).

    Exact duplicate lines of the published file are dropped (the first is kept).

    Raises:
        FileNotFoundError: the data file is missing.
    """
    io = ("Input Output Length", "Input Output Length")
    rows: dict[tuple[object, ...], BenchRow] = {}
    for i, r in read_csv(data_dir / REPLICATE_RESULTS):
        if r["Framework"] == FRAMEWORK and r["kv_cache_dtype"] == REPLICATE_DTYPES:
            row = _row(i, r, REPLICATE_RESULTS, io, "latency", "Num of Hardware")
            rows.setdefault((row.hardware, row.num_hardware, row.model, row.batch, row.input_len,
                             row.latency_s), row)
    return list(rows.values())


def rows_for(rows: list[BenchRow], model: str, gpu: str, tp: int) -> list[BenchRow]:
    """The rows of (model key, GPU key, tensor-parallel degree), in file order."""
    return [r for r in rows if r.model == MODEL_NAMES[model] and r.hardware == HARDWARE[gpu]
            and r.num_hardware == tp]


def preemption(model: str, gpu: str, tp: int, row: BenchRow) -> str | None:
    """Why vLLM must have preempted sequences in ``row`` (its KV demand exceeds the pool), or None.

    The pool is ``GPU_MEMORY_UTILIZATION`` of the replica's memory less the weights (activations
    ignored: the rule errs towards keeping rows). A preempted run recomputes evicted sequences, which
    step time does not model.
    """
    spec, card = MODELS[model], GPUS[gpu]
    demand = row.batch * (row.input_len + row.output_len) * spec.kv_bytes_per_token
    pool = GPU_MEMORY_UTILIZATION * card.memory_bytes * tp - spec.weight_bytes
    if demand <= pool:
        return None
    return (f"KV demand {row.batch} x {row.input_len + row.output_len} tokens x {spec.kv_bytes_per_token} B "
            f"= {demand / 1e9:.1f} GB exceeds the {pool / 1e9:.1f} GB KV pool of {tp} x {card.name} "
            f"({GPU_MEMORY_UTILIZATION:g} x memory - {spec.weight_bytes / 1e9:.1f} GB weights): vLLM preempts")


def predict_latency(profile: PerformanceProfile, row: BenchRow) -> float:
    """Seconds the benchmark run ``row`` takes under ``profile`` (steps as in the module doc)."""
    per_step = max(1, max_num_batched_tokens(profile.model) // row.input_len)
    full_steps, last_prompts = divmod(row.batch, per_step)
    pairs = prefill_pairs(0, row.input_len)  # each prompt's own, in whichever step it is
    prefill = full_steps * profile.step_time(per_step * row.input_len, 0, 0, per_step * pairs)
    prefill += profile.step_time(last_prompts * row.input_len, 0, 0, last_prompts * pairs)
    steps = row.output_len - 1
    # Context of decode step j (1..steps) is B * (L + j): the prompt plus j generated tokens.
    ctx_tokens = row.batch * (steps * row.input_len + steps * (steps + 1) // 2)
    decode = steps * profile.step_time(0, row.batch, 0) + profile.seconds_per_ctx_token * ctx_tokens
    return prefill + decode
