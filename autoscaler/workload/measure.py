"""Measure, from the real traces, every constant of the synthetic workload (``synthetic.py``).

Usage: ``python -m autoscaler.workload.measure --data /work/shared/data``

Prints one ``NAME = value`` line per figure; the names marked ``used`` are the constants written in
``synthetic.py`` (a test re-runs ``measure`` and checks they agree), the rest are reference figures.

Sources (copies under ``shared/data``, see each SOURCE.md):
    * Azure LLM inference trace 2023, ``AzureLLMInferenceTrace_conv.csv`` — AzurePublicDataset, file
      commit 790921015d50dd6aae7f7e47f39ba0e235ad6b08.
    * Mooncake ``conversation_trace.jsonl`` — kvcache-ai/Mooncake, file commit
      3cca71daccf2a7afb8fe3f0295358f70e3a69fdb.
    * ServeGen ``language/m-large/chunk-*-trace.csv`` — alibaba/ServeGen commit
      f891d1189eb32b3868dfc443800c4150548c282a, and ``DERIVED_aggregate_rate_per_window.csv`` (the
      per-window sum of those files over clients, computed by the data collectors).
"""

from __future__ import annotations

import argparse
import csv
import math
from collections import Counter
from pathlib import Path

import numpy as np

from autoscaler.workload.azure import load_azure
from autoscaler.workload.classes import group_workflows
from autoscaler.workload.mooncake import load_mooncake

DEFAULT_DATA = Path(__file__).resolve().parents[3] / "shared" / "data"
SERVEGEN_MODEL = "language/m-large"  # m-mid has windows with rate 0 (outages), unusable in log space
DAY_S = 86400.0
APP_MIN_SHARE = 0.01  # a ServeGen client with >= 1 % of the total mean rate counts as an "application"

# (name, used by synthetic.py, description)
FIGURES: list[tuple[str, bool, str]] = [
    ("AZURE_CONV_REQUESTS", False, "requests in the Azure conv trace"),
    ("AZURE_CONV_RATE_RPS", True, "mean arrival rate, requests/s (requests / first-to-last span)"),
    ("INTERARRIVAL_CV", True, "coefficient of variation of Azure conv inter-arrival times"),
    ("COUNT_CV_1S", False, "CV of Azure conv arrivals per 1 s bin"),
    ("COUNT_CV_10S", False, "CV of Azure conv arrivals per 10 s bin"),
    ("INPUT_MEDIAN_TOKENS", True, "Azure conv ContextTokens median"),
    ("INPUT_MEAN_TOKENS", True, "Azure conv ContextTokens mean"),
    ("INPUT_P99_TOKENS", False, "Azure conv ContextTokens p99"),
    ("INPUT_MAX_TOKENS", True, "Azure conv ContextTokens max"),
    ("OUTPUT_MEDIAN_TOKENS", True, "Azure conv GeneratedTokens median"),
    ("OUTPUT_MEAN_TOKENS", True, "Azure conv GeneratedTokens mean"),
    ("OUTPUT_P99_TOKENS", False, "Azure conv GeneratedTokens p99"),
    ("OUTPUT_MAX_TOKENS", True, "Azure conv GeneratedTokens max"),
    ("DIURNAL_LOG_AMPLITUDE", True, "ServeGen m-large: amplitude of the 24 h harmonic of log(rate/mean)"),
    ("RATE_LOG_STD", True, "ServeGen m-large: std of log(rate/mean) after removing the 24 h harmonic"),
    ("RATE_LAG1_CORR", True, "ServeGen m-large: lag-1 (600 s) autocorrelation of that residual"),
    ("N_APPS", True, "ServeGen m-large clients with >= 1 % of the total mean rate"),
    ("APP_ZIPF_EXPONENT", True, "ServeGen m-large: -slope of log(mean rate) vs log(rank) over those"),
    ("MOONCAKE_REQUESTS", False, "requests in the Mooncake conversation trace"),
    ("SYSTEM_PROMPT_BLOCKS", True, "Mooncake: leading hash blocks shared by every request (512 tokens each)"),
    ("BLOCK_REUSE_FRACTION", False, "Mooncake: fraction of hash-id occurrences seen earlier in the file"),
    ("MOONCAKE_WORKFLOWS", False, "Mooncake: workflows found by classes.group_workflows"),
    ("MOONCAKE_MEAN_STEPS", False, "Mooncake: mean steps per workflow"),
    ("SINGLE_TURN_FRACTION", True, "Mooncake: fraction of workflows with one step"),
    ("MULTI_TURN_MEAN_TURNS", True, "Mooncake: mean steps of workflows with >= 2 steps"),
    ("TURN_GAP_MEDIAN_S", True, "Mooncake: median seconds between consecutive steps of a workflow"),
    ("TURN_GAP_MEAN_S", True, "Mooncake: mean seconds between consecutive steps of a workflow"),
]


def block_reuse_fraction(hash_lists: list[tuple[int, ...]]) -> float:
    """Fraction of hash-id occurrences already seen in an earlier list (infinite-cache block reuse)."""
    seen: set[int] = set()
    total = hits = 0
    for hashes in hash_lists:
        for h in hashes:
            total += 1
            hits += h in seen
            seen.add(h)
    return hits / total if total else 0.0


def _cv(x: np.ndarray) -> float:
    return float(x.std() / x.mean())


def measure_azure(data: Path) -> dict[str, float]:
    """Rate, burstiness and length figures of the Azure conv trace."""
    w = load_azure(data / "azure-llm-2023" / "AzureLLMInferenceTrace_conv.csv")
    t = np.array([r.arrival_s for r in w.requests])
    inp = np.array([r.input_tokens for r in w.requests])
    out = np.array([r.output_tokens for r in w.requests])
    return {
        "AZURE_CONV_REQUESTS": len(t),
        "AZURE_CONV_RATE_RPS": len(t) / w.duration_s,
        "INTERARRIVAL_CV": _cv(np.diff(t)),
        "COUNT_CV_1S": _cv(np.bincount((t // 1).astype(int))),
        "COUNT_CV_10S": _cv(np.bincount((t // 10).astype(int))),
        "INPUT_MEDIAN_TOKENS": float(np.median(inp)),
        "INPUT_MEAN_TOKENS": float(inp.mean()),
        "INPUT_P99_TOKENS": float(np.percentile(inp, 99)),
        "INPUT_MAX_TOKENS": int(inp.max()),
        "OUTPUT_MEDIAN_TOKENS": float(np.median(out)),
        "OUTPUT_MEAN_TOKENS": float(out.mean()),
        "OUTPUT_P99_TOKENS": float(np.percentile(out, 99)),
        "OUTPUT_MAX_TOKENS": int(out.max()),
    }


def measure_servegen(data: Path) -> dict[str, float]:
    """Rate-curve shape (diurnal harmonic, log-rate noise) and application mix from ServeGen m-large."""
    with (data / "servegen" / "DERIVED_aggregate_rate_per_window.csv").open() as f:
        rows = [r for r in csv.DictReader(f) if r["category_model"] == SERVEGEN_MODEL]
    t = np.array([float(r["window_start_s"]) for r in rows])
    rate = np.array([float(r["sum_rate_rps"]) for r in rows])
    x = np.log(rate / rate.mean())
    phase = 2 * np.pi * t / DAY_S
    design = np.column_stack([np.ones_like(t), np.cos(phase), np.sin(phase)])
    coef = np.linalg.lstsq(design, x, rcond=None)[0]
    resid = x - design @ coef

    client_means = []
    for path in sorted((data / "servegen" / SERVEGEN_MODEL).glob("chunk-*-trace.csv")):
        with path.open() as f:
            client_means.append(np.mean([float(row[1]) for row in csv.reader(f)]))
    means = np.sort(np.array(client_means))[::-1]
    apps = means[means / means.sum() >= APP_MIN_SHARE]
    slope = np.polyfit(np.log(np.arange(1, len(apps) + 1)), np.log(apps), 1)[0]
    return {
        "DIURNAL_LOG_AMPLITUDE": float(math.hypot(coef[1], coef[2])),
        "RATE_LOG_STD": float(resid.std()),
        "RATE_LAG1_CORR": float(np.corrcoef(resid[:-1], resid[1:])[0, 1]),
        "N_APPS": len(apps),
        "APP_ZIPF_EXPONENT": float(-slope),
    }


def measure_mooncake(data: Path) -> dict[str, float]:
    """Prefix sharing and conversation structure of the Mooncake conversation trace."""
    w = group_workflows(load_mooncake(data / "mooncake" / "conversation_trace.jsonl"))
    hashes = [r.hash_ids for r in w.requests]
    common = 0
    while all(len(h) > common and h[common] == hashes[0][common] for h in hashes):
        common += 1
    sizes = np.array(list(Counter(r.workflow_id for r in w.requests).values()))
    last_arrival: dict[int | None, float] = {}
    gaps = []
    for r in w.requests:  # sorted by arrival, so consecutive steps of a workflow come in order
        if r.workflow_id in last_arrival:
            gaps.append(r.arrival_s - last_arrival[r.workflow_id])
        last_arrival[r.workflow_id] = r.arrival_s
    return {
        "MOONCAKE_REQUESTS": len(w.requests),
        "SYSTEM_PROMPT_BLOCKS": common,
        "BLOCK_REUSE_FRACTION": block_reuse_fraction(hashes),
        "MOONCAKE_WORKFLOWS": len(sizes),
        "MOONCAKE_MEAN_STEPS": float(sizes.mean()),
        "SINGLE_TURN_FRACTION": float((sizes == 1).mean()),
        "MULTI_TURN_MEAN_TURNS": float(sizes[sizes > 1].mean()),
        "TURN_GAP_MEDIAN_S": float(np.median(gaps)),
        "TURN_GAP_MEAN_S": float(np.mean(gaps)),
    }


def measure(data: Path = DEFAULT_DATA) -> dict[str, float]:
    """All figures of ``FIGURES``, measured from the shared data folder ``data``."""
    return {**measure_azure(data), **measure_servegen(data), **measure_mooncake(data)}


def main(argv: list[str] | None = None) -> None:
    """Print every figure as ``NAME = value  # [used|ref] description``."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA, help="the shared/data folder")
    args = parser.parse_args(argv)
    figures = measure(args.data)
    for name, used, text in FIGURES:
        value = figures[name]
        shown = str(value) if isinstance(value, int) else f"{value:.6g}"
        print(f"{name} = {shown}  # {'used' if used else 'ref '} {text}")


if __name__ == "__main__":
    main()
