"""Fit the performance profiles to measured runs and write ``coefficients.json``.

Usage::

    python -m models.profiles.fit --data ../shared/data --keep models/profiles/coefficients.json \
        --out models/profiles/coefficients.json

A profile is keyed by (model, GPU, tensor-parallel degree) and describes one whole replica. Its rows
come from one source (``COMBOS``):

- LLM-Inference-Bench (``models.profiles.bench``): vLLM offline batches, whole-run latencies. Held
  out: every ``All_results.csv`` row of length 512. Not used: rows whose KV demand exceeds the
  replica's KV pool (``bench.preemption``: vLLM preempts and recomputes, which step time does not
  model).
- Splitwise (``models.profiles.splitwise``): prefill and mean decode-step times of Llama-2-70B.
  Held out: the sweep's points at P = 1024, B = 8 and T = 1024, and the prefills of P = 8192
  (``splitwise.MAX_FIT_PREFILL_TOKENS``). Not used: ``splitwise.exclusion``.

The four coefficients of ``PerformanceProfile`` (five where the attention term is fitted, one more
in the roofline form) are fitted by ``scipy.optimize.least_squares`` on log(predicted / measured)
within physical bounds: the step overhead (the roofline form: its weight-read time) is at least the
time to read the weights one token needs at the replica's peak bandwidth, the prefill cost per
token at least its matmul FLOPs at the replica's peak tensor throughput, the per-sequence cost
non-negative, the bandwidth efficiency in [0.3, 1], and the
attention term at least the architecture's FLOP ratio.

**Prefill prior.** With input = output, an LLM-Inference-Bench run's prefill tokens B·L and decode
steps B·(L-1) are nearly collinear, so its whole-run latencies pin only their sum. Only the
single-GPU Llama-3-8B, Llama-2-7B and Mistral-7B combos have TTFT rows (``Fig_21``: output length 1,
the prefill alone) that separate them; those are fitted with all four coefficients free. Every other
LLM-Inference-Bench combo has its prefill slope pinned to the FLOP bound at the prefill efficiency
those TTFT fits measured on the same GPU (``PREFILL_EFFICIENCY_FROM``; the mean over the models of
FLOP bound / fitted slope), divided over its TP GPUs:
``prefill_flops_per_token / (tp x peak_dense_bf16_flops x efficiency)``: the same GPU and vLLM build
measured directly, where the FLOP bound at peak would be optimistic and Vidur's kernel profile does
not cover every model and GPU. Splitwise separates prefill from decode itself and needs no prior.

**Attention.** Every predicted prefill includes its prompts' attention pairs, each costing
``attention_tokens_per_pair`` prompt tokens. Where the fit rows include prefills of prompts longer
than ``profile.SHORT_PREFILL_TOKENS`` (Splitwise's P = 4096 lines), that coefficient is fitted with
the other four, bounded below by the architecture's FLOP ratio
(``specs.ModelSpec.attention_tokens_per_pair``: attention cannot cost fewer FLOPs than it does, and
runs at most at the matmuls' efficiency); the P = 8192 prefills are held out as its check. Every
other profile (LLM-Inference-Bench: prompts of at most 2048 tokens, where attention is a few percent
of a prefill and cannot be told from the slope) keeps the FLOP ratio, and its entry says it
extrapolates (``attention`` in ``coefficients.json``). Per-row-group errors (``group_errors``: short
and long prefills, decode by batch, whole runs by batch) are in each entry.

**Step forms.** Every combo is fitted in both step forms of ``PerformanceProfile`` (``fit_form``):
the linear one (overhead at least the datasheet weight-read time) and the roofline one (a fitted
``weight_read_s``, at least that time, overlapping the prompt's matmuls: a step takes the larger).
Each combo ships the form ``choose_form`` picks from the two fits' held-out errors, the same rule
for every combo; its entry keeps both fits (``forms``). ``--keep FILE`` keeps a shipped document's
coefficients where the refit agrees with them within ``KEEP_RTOL`` (``keep``).

**A100 40 GB, not 80 GB.** LLM-Inference-Bench's A100 rows were measured on 40 GB cards (ALCF Polaris),
so they feed ``a100-40gb`` profiles: the KV pool the rows imply decides it. ``llama-3-8b/a100-80gb``
(the name before this was known, used by fleet files) stays loadable as a stand-in (``STAND_INS``).

**Not shipped.** Every combo of ``COMBOS`` whose held-out error exceeds ``MAX_HELD_OUT_MAPE`` is
refused by the fit (``shipped``); the document's ``not_shipped`` lists them with their error, and
``NOT_SHIPPED`` the combos measured but not fitted at all.

The figures behind these choices (prefill efficiencies, the attention term's effect, the rows that
show a 40 GB KV pool, the cross-check against Splitwise, the combos not shipped and why) are in
``docs/simulator.md#how-the-fit-was-checked``.
"""

from __future__ import annotations

import argparse
import datetime
import hashlib
import json
import math
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Protocol

import numpy as np
from scipy.optimize import least_squares

from autoscaler.errors import ProfileError
from autoscaler.files import write_text
from models.profiles import bench, splitwise
from models.profiles.jsonfile import read_object
from models.profiles.profile import (
    SHORT_PREFILL_TOKENS,
    PerformanceProfile,
    group_order,
    prefill_group,
    profile_name,
)
from models.profiles.specs import GPUS, MODELS

BENCH_REPO = "github.com/argonne-lcf/LLM-Inference-Bench"
BENCH_COMMIT = "4211f5d4e9bc0145ed541b6d372d5d8223b44235"
"""Repository HEAD the files were copied at (``All_results.csv`` last changed in ae7e7a41)."""
SPLITWISE_REPO = "github.com/Mutinifni/splitwise-sim"
SPLITWISE_COMMIT = "8f99e7dc9b407f4ce2488d03dd44c0b8b946dab0"
VIDUR_REPO = "github.com/microsoft/vidur"
VIDUR_COMMIT = "7d47513363ec447a741ac5e47241580b47724fbf"
VIDUR_A100_MLP = "vidur-profiling/profiling/compute/a100/meta-llama/Meta-Llama-3-8B/mlp.csv"
"""Path relative to the ``--data`` directory."""

LIB = "llm-inference-bench"
SPLITWISE = "splitwise"
MAX_HELD_OUT_MAPE = 0.10
"""A combo whose held-out error exceeds this is not shipped."""
MIN_BANDWIDTH_EFFICIENCY = 0.3
"""Lower bound of the fitted KV-read bandwidth efficiency (upper bound 1: peak bandwidth)."""
LINEAR = "linear"
ROOFLINE = "roofline"
STEP_FORMS = (LINEAR, ROOFLINE)
"""The step-time forms fitted (``PerformanceProfile``'s class doc)."""
FORM_MARGIN = 0.01
"""How much lower (absolute, 1 percentage point) the roofline's worst per-group held-out error must be
for a combo to ship in that form (``choose_form``): a smaller gain is below the spread of the rows'
repeated runs (the five runs of each unbatched 8192-token Splitwise prefill: coefficient of variation
0.2-4.6 % by hardware and TP), not worth moving the figures built on the linear form. The
LLM-Inference-Bench combos' two forms agree within 0.2 points, so they stay linear."""
MIN_ROOFLINE_OVERHEAD_S = 1e-4
"""Least step overhead of the roofline form beyond the weight reads, seconds (a profile file's
overhead must be > 0; 0.1 ms is below any measured vLLM step's scheduling and launch cost)."""


@dataclass(frozen=True)
class Combo:
    """One profile to fit: (model, GPU, tensor-parallel degree) and the source of its rows.

    Attributes:
        model: model key (``specs.MODELS``).
        gpu: GPU key (``specs.GPUS``).
        tp: tensor-parallel degree (GPUs per replica).
        source: ``LIB`` or ``SPLITWISE``.
    """

    model: str
    gpu: str
    tp: int
    source: str

    @property
    def name(self) -> str:
        """The profile's name (``profile.profile_name``)."""
        return profile_name(self.model, self.gpu, self.tp)


def _lib(model: str, gpu: str, *tps: int) -> list[Combo]:
    return [Combo(model, gpu, tp, LIB) for tp in tps]


COMBOS: tuple[Combo, ...] = (
    *_lib("llama-3-8b", "a100-40gb", 1, 2), *_lib("llama-3-8b", "h100-sxm", 1, 2, 4),
    *_lib("llama-3-8b", "gh200", 1),
    *_lib("llama-2-7b", "a100-40gb", 1, 2, 4), *_lib("llama-2-7b", "h100-sxm", 1, 2, 4),
    *_lib("llama-2-7b", "gh200", 1),
    *_lib("mistral-7b", "a100-40gb", 1, 2, 4), *_lib("mistral-7b", "h100-sxm", 1, 2, 4),
    *_lib("qwen2-7b", "a100-40gb", 2), *_lib("qwen2-7b", "h100-sxm", 1, 2, 4), *_lib("qwen2-7b", "gh200", 1),
    *_lib("llama-3-70b", "h100-sxm", 4), *_lib("qwen2-72b", "h100-sxm", 4), *_lib("llama-2-70b", "h100-sxm", 4),
    *_lib("llama-2-70b", "a100-40gb", 4), *_lib("mixtral-8x7b", "a100-40gb", 4),
    *(Combo("llama-2-70b", "a100-80gb", tp, SPLITWISE) for tp in (2, 4, 8)),
    *(Combo("llama-2-70b", "h100-sxm", tp, SPLITWISE) for tp in (2, 8)),
)
"""Every combo fitted and, if its held-out error is within ``MAX_HELD_OUT_MAPE``, shipped."""

NOT_SHIPPED: dict[tuple[str, str, int, str], str] = {
    ("qwen2-7b", "a100-40gb", 1, LIB): "no rows",
    ("qwen2-7b", "a100-40gb", 4, LIB): "1 row",
    ("llama-2-70b", "h100-sxm", 4, SPLITWISE): (
        "one profile per key, and LLM-Inference-Bench's 20 vLLM rows (the "
        "benchmark of llama-3-70b and qwen2-72b on h100-sxm/tp4) ship; they run 0.55-0.68 x the "
        "Splitwise-fitted prediction (a newer vLLM), so Splitwise's TP 2 and TP 8 profiles err slow"
    ),
}
"""(model, GPU, TP, source) measured there but not fitted from it -> why."""

STAND_INS: dict[str, tuple[str, str]] = {
    "llama-3-8b/a100-80gb": (
        "llama-3-8b/a100-40gb",
        "stand-in: the llama-3-8b/a100-40gb step times on the A100 80GB datasheet (the rows were "
        "measured on 40 GB cards; conservative for an 80 GB card's faster memory)",
    ),
}
"""Shipped name -> (the fitted profile whose step times it carries, why)."""

PREFILL_EFFICIENCY_FROM: dict[str, tuple[str, ...]] = {
    "a100-40gb": ("llama-3-8b/a100-40gb", "llama-2-7b/a100-40gb", "mistral-7b/a100-40gb"),
    "h100-sxm": ("llama-3-8b/h100-sxm", "llama-2-7b/h100-sxm", "mistral-7b/h100-sxm"),
    "gh200": ("llama-3-8b/gh200", "llama-2-7b/gh200"),
}
"""GPU -> the TTFT-fitted profiles whose prefill efficiency pins the prefill prior on that GPU (the
single-GPU combos with ``Fig_21`` rows; it has no All_results rows of Mistral on GH200)."""


class Row(Protocol):
    """A measured row of any source: what it measured and what a profile predicts for it."""

    @property
    def source(self) -> str: ...

    @property
    def line(self) -> int: ...

    @property
    def measured(self) -> tuple[float, ...]: ...

    @property
    def held_out(self) -> bool: ...

    def predict(self, profile: PerformanceProfile) -> tuple[float, ...]: ...

    @property
    def group(self) -> str: ...

    def doc(self) -> dict[str, object]: ...


@dataclass(frozen=True)
class ProfileFit:
    """Result of fitting one combo.

    Attributes:
        combo: what was fitted.
        profile: the fitted profile.
        fit_rows: rows the coefficients were fitted to.
        held_out_rows: rows kept out of the fit.
        excluded_rows: (row, why) for rows not used at all.
        fit_mape: mean |predicted / measured - 1| over ``fit_rows``.
        held_out_mape: the same over ``held_out_rows``.
        prefill_prior: how the prefill slope was pinned, or None when it was fitted.
        attention_fitted: whether ``attention_tokens_per_pair`` was fitted (else the FLOP ratio).
        alternative: the fit of the same combo in the other step form (``fit_all``), or None.
    """

    combo: Combo
    profile: PerformanceProfile
    fit_rows: tuple[Row, ...]
    held_out_rows: tuple[Row, ...]
    excluded_rows: tuple[tuple[Row, str], ...]
    fit_mape: float
    held_out_mape: float
    prefill_prior: str | None
    attention_fitted: bool = False
    alternative: ProfileFit | None = None


@dataclass(frozen=True)
class Data:
    """Every row of every source, read once."""

    bench: list[bench.BenchRow]
    splitwise: list[splitwise.SplitwiseRow]

    @classmethod
    def load(cls, data_dir: Path) -> Data:
        """Read the sources under ``data_dir``.

        Raises:
            FileNotFoundError: a data file is missing.
        """
        return cls(bench.load_rows(data_dir), splitwise.load_rows(data_dir))


def combo_rows(combo: Combo, data: Data) -> list[tuple[Row, str | None]]:
    """(row, why it is not used or None) for every row of ``combo``'s source measuring it."""
    if combo.source == LIB:
        rows = bench.rows_for(data.bench, combo.model, combo.gpu, combo.tp)
        return [(r, bench.preemption(combo.model, combo.gpu, combo.tp, r)) for r in rows]
    return [(r, splitwise.exclusion(r)) for r in splitwise.rows_for(data.splitwise, combo.model, combo.gpu, combo.tp)]


def split_rows(combo: Combo, data: Data) -> tuple[list[Row], list[Row], list[tuple[Row, str]]]:
    """``combo``'s rows as (fit, held-out, (excluded, why))."""
    fit: list[Row] = []
    held_out: list[Row] = []
    excluded: list[tuple[Row, str]] = []
    for r, why in combo_rows(combo, data):
        if why is not None:
            excluded.append((r, why))
        else:
            (held_out if r.held_out else fit).append(r)
    return fit, held_out, excluded


def mape(profile: PerformanceProfile, rows: Sequence[Row]) -> float:
    """Mean absolute relative error of ``profile``'s predictions over every measured value of ``rows``."""
    errors = [abs(p / m - 1.0) for r in rows for p, m in zip(r.predict(profile), r.measured, strict=True)]
    return float(np.mean(errors))


def group_errors(profile: PerformanceProfile, rows: Sequence[Row]) -> dict[str, dict[str, float]]:
    """``{group: {"rows": n, "mape": e}}`` of ``rows`` by ``Row.group``, in ``profile.group_order``."""
    errors: dict[str, list[float]] = {}
    for r in rows:
        errors.setdefault(r.group, []).extend(abs(p / m - 1.0) for p, m in zip(r.predict(profile), r.measured,
                                                                               strict=True))
    return {g: {"rows": len(errors[g]), "mape": float(np.mean(errors[g]))} for g in sorted(errors, key=group_order)}


def long_prefills(rows: Sequence[Row]) -> bool:
    """Whether any of ``rows`` is a prefill of prompts longer than ``SHORT_PREFILL_TOKENS`` (what
    pins the attention term)."""
    return any(r.group == prefill_group(SHORT_PREFILL_TOKENS + 1) for r in rows)


def make_profile(combo: Combo, params: Sequence[float] | np.ndarray) -> PerformanceProfile:
    """The profile of ``combo`` with coefficients (overhead, prefill, decode, efficiency[, attention[,
    weight read]]); without the fifth, attention is the architecture's FLOP ratio; without the sixth
    (or with it 0), the profile has the linear form, else the roofline form."""
    model, gpu = MODELS[combo.model], GPUS[combo.gpu]
    attention = float(params[4]) if len(params) > 4 else model.attention_tokens_per_pair
    weight_read_s = float(params[5]) if len(params) > 5 else 0.0
    step_overhead_s, prefill_s_per_token, decode_s_per_seq, bandwidth_efficiency = map(float, params[:4])
    return PerformanceProfile(
        name=combo.name, model=model.key, gpu=gpu.key, kv_bytes_per_token=model.kv_bytes_per_token,
        mem_bandwidth_bytes_per_s=combo.tp * gpu.mem_bandwidth_bytes_per_s, step_overhead_s=step_overhead_s,
        prefill_s_per_token=prefill_s_per_token, decode_s_per_seq=decode_s_per_seq,
        bandwidth_efficiency=bandwidth_efficiency, tensor_parallel=combo.tp,
        attention_tokens_per_pair=attention, weight_read_s=weight_read_s,
    )


def bounds(combo: Combo) -> tuple[float, float]:
    """(least step overhead, least prefill seconds per token) the datasheets allow ``combo``."""
    model, gpu = MODELS[combo.model], GPUS[combo.gpu]
    return (model.active_weight_bytes / (combo.tp * gpu.mem_bandwidth_bytes_per_s),
            model.prefill_flops_per_token / (combo.tp * gpu.peak_dense_bf16_flops))


def fit_combo(combo: Combo, data: Data, prefill_s_per_token: float | None = None,
              prefill_prior: str | None = None, form: str = LINEAR) -> ProfileFit:
    """Fit ``combo`` (least squares on log ratio) in the step form ``form`` (``STEP_FORMS``); the
    prefill slope is fixed if given, the attention term free (at least the FLOP ratio) if the fit rows
    have long prefills (``long_prefills``).

    Linear form: the overhead is at least the datasheet weight-read time (it includes the reads).
    Roofline form: the weight-read time is fitted, at least the datasheet's, and the overhead (the
    rest of a step) is at least ``MIN_ROOFLINE_OVERHEAD_S``.

    Raises:
        ValueError: fewer fit values than free coefficients, or an unknown ``form``.
    """
    if form not in STEP_FORMS:
        raise ValueError(f"form must be one of {', '.join(STEP_FORMS)}, got {form!r}")
    fit, held_out, excluded = split_rows(combo, data)
    keep = [0, 2, 3] if prefill_s_per_token is not None else [0, 1, 2, 3]
    attention = long_prefills(fit)
    if attention:
        keep.append(4)
    roofline = form == ROOFLINE
    if roofline:
        keep.append(5)
    if sum(len(r.measured) for r in fit) < len(keep):
        raise ValueError(f"{combo.name}: {len(fit)} fit rows, need at least {len(keep)}")
    weights_s, flops_s = bounds(combo)
    flop_ratio = MODELS[combo.model].attention_tokens_per_pair
    least_overhead = MIN_ROOFLINE_OVERHEAD_S if roofline else weights_s
    lower = np.array([least_overhead, flops_s, 0.0, MIN_BANDWIDTH_EFFICIENCY, flop_ratio, weights_s])
    upper = np.array([np.inf, np.inf, np.inf, 1.0, np.inf, np.inf])
    scale = np.array([weights_s, flops_s, 1e-5, 1.0, flop_ratio, weights_s])
    start = np.array([(0.5 if roofline else 1.5) * weights_s, 1.5 * flops_s, 5e-5, 0.7, 2.0 * flop_ratio,
                      1.2 * weights_s])

    def params(x: np.ndarray) -> np.ndarray:
        # The free entries are overwritten; attention stays the FLOP ratio unless free, the weight
        # read 0 (the linear form) unless free.
        full = np.array([0.0, prefill_s_per_token or 0.0, 0.0, 0.0, flop_ratio, 0.0])
        full[keep] = x
        return full

    def residuals(x: np.ndarray) -> list[float]:
        p = make_profile(combo, params(x))
        return [math.log(q / m) for r in fit for q, m in zip(r.predict(p), r.measured, strict=True)]

    result = least_squares(residuals, start[keep], bounds=(lower[keep], upper[keep]), x_scale=scale[keep],
                           xtol=1e-12, ftol=1e-12, gtol=1e-12)
    profile = make_profile(combo, params(result.x))
    return ProfileFit(combo, profile, tuple(fit), tuple(held_out), tuple(excluded), mape(profile, fit),
                      mape(profile, held_out), prefill_prior, attention)


def _has_ttft(combo: Combo, data: Data) -> bool:
    return combo.source == LIB and any(r.source == bench.TTFT_RESULTS for r, why in combo_rows(combo, data)
                                       if why is None)


def prefill_efficiency(fits: dict[str, ProfileFit], gpu: str) -> float:
    """Mean FLOP bound / fitted prefill slope of ``PREFILL_EFFICIENCY_FROM[gpu]``'s fits."""
    ratios = [bounds(fits[n].combo)[1] / fits[n].profile.prefill_s_per_token for n in PREFILL_EFFICIENCY_FROM[gpu]]
    return float(np.mean(ratios))


def fit_form(data: Data, form: str) -> dict[str, ProfileFit]:
    """Fit every combo of ``COMBOS`` in the step form ``form``, TTFT-separated ones first (they set the
    prefill prior, in the same form); by name, in ``COMBOS`` order."""
    fits: dict[str, ProfileFit] = {}
    for combo in COMBOS:
        if combo.source == SPLITWISE or _has_ttft(combo, data):
            fits[combo.name] = fit_combo(combo, data, form=form)
    for combo in COMBOS:
        if combo.name not in fits:
            eff = prefill_efficiency(fits, combo.gpu)
            slope = bounds(combo)[1] / eff
            prior = (f"FLOP bound at the prefill efficiency {eff:.3f} the TTFT rows measured on "
                     f"{combo.gpu} ({', '.join(PREFILL_EFFICIENCY_FROM[combo.gpu])}): "
                     f"prefill_flops_per_token / ({combo.tp} x peak x {eff:.3f})")
            fits[combo.name] = fit_combo(combo, data, slope, prior, form)
    return {c.name: fits[c.name] for c in COMBOS}


def fit_all(data: Data, log: Callable[[str], None] = lambda _: None) -> dict[str, ProfileFit]:
    """Fit every combo of ``COMBOS`` in both step forms and keep, per combo, the form ``choose_form``
    picks (the other one is the fit's ``alternative``); by name.

    Every combo is returned, shipped or not (``shipped`` decides).
    """
    linear, roofline = fit_form(data, LINEAR), fit_form(data, ROOFLINE)
    fits: dict[str, ProfileFit] = {}
    for name, lin in linear.items():
        roof = roofline[name]
        chosen, other = (roof, lin) if choose_form(lin, roof) == ROOFLINE else (lin, roof)
        fits[name] = replace(chosen, alternative=other)
    for name, f in fits.items():
        if not shipped(f):
            log(f"not shipped: {name}: held-out MAPE {f.held_out_mape:.1%} > {MAX_HELD_OUT_MAPE:.0%}")
    return fits


def worst_group_error(f: ProfileFit) -> float:
    """The largest per-group held-out error of ``f`` (``group_errors``), or its held-out error where it
    has no held-out rows (then nan)."""
    groups = group_errors(f.profile, f.held_out_rows)
    return max((g["mape"] for g in groups.values()), default=float("nan"))


def choose_form(linear: ProfileFit, roofline: ProfileFit) -> str:
    """The step form a combo ships with: the roofline where it lowers the worst per-group held-out
    error (``worst_group_error``) by at least ``FORM_MARGIN`` and does not raise the held-out error
    over all rows; else the linear form (the incumbent, which every other simulated figure rests on).
    The same rule for every combo."""
    better = worst_group_error(roofline) <= worst_group_error(linear) - FORM_MARGIN
    return ROOFLINE if better and roofline.held_out_mape <= linear.held_out_mape else LINEAR


def shipped(f: ProfileFit) -> bool:
    """Whether the fit is good enough to ship: held-out rows exist and err at most ``MAX_HELD_OUT_MAPE``."""
    return bool(f.held_out_rows) and f.held_out_mape <= MAX_HELD_OUT_MAPE


def stand_in(name: str, of: PerformanceProfile) -> PerformanceProfile:
    """``of``'s step times under the name ``name`` (``"<model>/<gpu>[/tp<N>]"``), stated on that
    GPU's datasheet bandwidth: the efficiency is rescaled so that seconds per context token agree."""
    gpu = name.split("/")[1]
    bw = of.tensor_parallel * GPUS[gpu].mem_bandwidth_bytes_per_s
    return replace(of, name=name, gpu=gpu, mem_bandwidth_bytes_per_s=bw,
                   bandwidth_efficiency=of.bandwidth_efficiency * of.mem_bandwidth_bytes_per_s / bw)


def vidur_prefill_s_per_token(data_dir: Path) -> float:
    """Marginal A100 (80 GB) prefill seconds per token of Llama-3-8B's non-attention ops, from Vidur.

    Sums the median per-layer op times (ms) of ``VIDUR_A100_MLP`` at TP 1 (embedding excluded:
    it runs once per model, not per layer), takes the slope between 4096 and 8192 tokens (8192 =
    the benchmark's prefill step) and multiplies by the layer count. Repeated profiling rows at the
    same token count are averaged. Attention is not in the file, nor in the fitted slope (the
    profiles carry it as their own term). Prefill is compute-bound, so the 40 GB and 80 GB A100
    (the same 312 TFLOPS) should agree.
    """
    per_layer_ms: dict[int, list[float]] = {}
    for _, r in bench.read_csv(data_dir / VIDUR_A100_MLP):
        if r["num_tensor_parallel_workers"] == "1":
            ops = [k for k in r if k.endswith(".median") and not k.startswith("time_stats.emb.")]
            per_layer_ms.setdefault(int(r["num_tokens"]), []).append(sum(float(r[k]) for k in ops))
    lo, hi = 4096, 8192
    slope_ms = (float(np.mean(per_layer_ms[hi])) - float(np.mean(per_layer_ms[lo]))) / (hi - lo)
    return slope_ms * 1e-3 * MODELS["llama-3-8b"].num_layers


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _selection(combo: Combo) -> dict[str, object]:
    """Which rows of the source files feed ``combo`` (the ``source_rows`` entry)."""
    if combo.source == LIB:
        return {
            "files": [bench.ALL_RESULTS, bench.TTFT_RESULTS],
            "Framework": bench.FRAMEWORK, "Model": bench.MODEL_NAMES[combo.model],
            "Hardware": bench.HARDWARE[combo.gpu], "Num of Hardware": combo.tp,
            "held_out": f"{bench.ALL_RESULTS} rows with Input Output Length == {bench.HELD_OUT_LENGTH}",
            "excluded": "KV demand B x 2L x kv_bytes_per_token over the KV pool (vLLM preempts)",
        }
    held = ", ".join(f"{k} == {v}" for k, v in splitwise.HELD_OUT.items())
    return {
        "files": [splitwise.PERF_MODEL],
        "model": splitwise.MODEL_NAMES[combo.model], "hardware": splitwise.HARDWARE[combo.gpu],
        "tensor_parallel": combo.tp,
        "rows": "each line: its prompt_time (prefill) and its token_time (mean decode step)",
        "held_out": f"lines with {held} (other than the base point); prefills of prompt_size > "
                    f"{splitwise.MAX_FIT_PREFILL_TOKENS}",
        "excluded": "batched prefills; TP 2 at B = 64",
    }


def _attention(f: ProfileFit, p: PerformanceProfile) -> dict[str, object]:
    """The ``attention`` entry: where ``attention_tokens_per_pair`` came from and how far it reaches."""
    flop_ratio = MODELS[p.model].attention_tokens_per_pair
    if f.attention_fitted:
        note = (f"fitted with the other coefficients on prefills of up to {splitwise.MAX_FIT_PREFILL_TOKENS} "
                "tokens, at least the FLOP ratio; checked on the held-out longer prefills (held-out group "
                f"'{prefill_group(SHORT_PREFILL_TOKENS + 1)}')")
    else:
        note = (f"the FLOP ratio, not fitted: no fit row prefills more than {SHORT_PREFILL_TOKENS} tokens, so "
                "the rows cannot tell attention from the prefill slope; longer prompts are extrapolated")
    return {"fitted": f.attention_fitted, "flop_ratio": flop_ratio, "x_flop_ratio": p.attention_tokens_per_pair
            / flop_ratio, "note": note}


def _coefficients(p: PerformanceProfile) -> dict[str, float]:
    """The ``coefficients`` entry of ``p`` (``weight_read_s`` only in the roofline form)."""
    c = {"step_overhead_s": p.step_overhead_s, "prefill_s_per_token": p.prefill_s_per_token,
         "decode_s_per_seq": p.decode_s_per_seq, "bandwidth_efficiency": p.bandwidth_efficiency,
         "attention_tokens_per_pair": p.attention_tokens_per_pair}
    return c | ({"weight_read_s": p.weight_read_s} if p.step_form == ROOFLINE else {})


def _forms(f: ProfileFit, as_shipped: Callable[[PerformanceProfile], PerformanceProfile]) -> dict[str, object]:
    """The ``forms`` entry: each step form's coefficients and errors, the rule that chose, and the choice."""
    out: dict[str, object] = {}
    for g in sorted([f, *([f.alternative] if f.alternative else [])], key=lambda x: x.profile.step_form):
        p = as_shipped(g.profile)
        out[p.step_form] = {"coefficients": _coefficients(p), "fit_mape": mape(p, g.fit_rows),
                            "heldout_mape": mape(p, g.held_out_rows),
                            "heldout_groups": group_errors(p, g.held_out_rows)}
    out["chosen"] = f.profile.step_form
    out["rule"] = (f"roofline if its worst per-group held-out error is at least {FORM_MARGIN:.0%} (absolute) lower "
                   "than the linear form's and its held-out error over all rows no higher; else linear")
    return out


def _entry(f: ProfileFit, p: PerformanceProfile, stand_in_of: tuple[str, str] | None = None) -> dict[str, object]:
    gpu = GPUS[p.gpu]
    entry: dict[str, object] = {
        "model": p.model, "gpu": p.gpu, "tensor_parallel": p.tensor_parallel,
        "architecture": {k: v for k, v in asdict(MODELS[p.model]).items() if k not in ("key", "source")},
        "step_form": p.step_form,
        "coefficients": _coefficients(p),
        "attention": _attention(f, p),
        "kv_bytes_per_token": p.kv_bytes_per_token, "mem_bandwidth_bytes_per_s": p.mem_bandwidth_bytes_per_s,
        "gpu_source": gpu.source, "model_source": MODELS[p.model].source,
        "source": f.combo.source, "measured_gpu": f.combo.gpu, "source_rows": _selection(f.combo),
        "rows_fitted": len(f.fit_rows), "rows_held_out": len(f.held_out_rows),
        "fit_mape": mape(p, f.fit_rows), "heldout_mape": mape(p, f.held_out_rows),
        "prefill_prior": f.prefill_prior,
        "heldout_groups": group_errors(p, f.held_out_rows), "fit_groups": group_errors(p, f.fit_rows),
        "held_out_rows": [r.doc() for r in f.held_out_rows],
        "excluded_rows": [{**r.doc(), "reason": why} for r, why in f.excluded_rows],
        "forms": _forms(f, (lambda q: q) if stand_in_of is None else (lambda q: stand_in(p.name, q))),
    }
    if stand_in_of is not None:
        entry["stand_in"] = {"profile": stand_in_of[0], "why": stand_in_of[1]}
    return entry


KEEP_RTOL = 1e-6
"""Largest relative difference between a refit coefficient and the kept document's for ``keep`` to
keep the latter (the tolerance ``tests/unit/test_profiles.py`` reproduces shipped coefficients to)."""


def keep(fits: dict[str, ProfileFit], document: dict[str, object]) -> dict[str, ProfileFit]:
    """``fits`` with each fit whose form and coefficients agree with ``document``'s entry (a shipped
    ``coefficients.json``) within ``KEEP_RTOL`` carrying that entry's coefficients exactly (its errors
    recomputed), in both forms; other fits unchanged.

    A refit on another machine moves coefficients by ~1e-8 (scipy/BLAS numerics), and the simulated
    figures built on them (README's, pinned by a test) can move with it; keeping the shipped values
    keeps a refit from churning profiles the data did not change.
    """
    entries = document.get("profiles", {})
    assert isinstance(entries, dict)
    out: dict[str, ProfileFit] = {}
    for name, f in fits.items():
        entry = entries.get(name, {})
        forms = entry.get("forms", {"linear": {"coefficients": entry.get("coefficients", {})}})
        kept = [_kept(g, forms.get(g.profile.step_form, {}).get("coefficients", {}))
                for g in (f, f.alternative) if g is not None]
        out[name] = replace(kept[0], alternative=kept[1] if len(kept) > 1 else None)
    return out


def read_kept(path: Path) -> dict[str, object]:
    """The document ``--keep`` names: a ``coefficients.json`` whose ``profiles`` map each name to an
    entry whose ``coefficients`` (and ``forms``' linear and roofline ``coefficients``) are numbers.

    Raises:
        ProfileError: the file is unreadable, not JSON, or not of that shape; one line naming it and the key.
    """
    doc = read_object(path, "coefficients document")
    profiles = doc.get("profiles")
    if not isinstance(profiles, dict):
        raise ProfileError(f"{path}: profiles: a mapping of profile name -> entry is expected")
    for name, entry in profiles.items():
        if not isinstance(entry, dict):
            raise ProfileError(f"{path}: profiles.{name}: an entry is a mapping")
        forms = entry.get("forms", {})
        if not isinstance(forms, dict):
            raise ProfileError(f"{path}: profiles.{name}.forms: a mapping of step form -> fit is expected")
        where = [("coefficients", entry.get("coefficients", {}))]
        where += [(f"forms.{k}.coefficients", v.get("coefficients", {}) if isinstance(v, dict) else v)
                  for k, v in forms.items() if k in STEP_FORMS]  # beside them: chosen, rule
        for key, c in where:
            if not isinstance(c, dict):
                raise ProfileError(f"{path}: profiles.{name}.{key}: a mapping of coefficient -> number is expected")
            for k, v in c.items():
                if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v):
                    raise ProfileError(f"{path}: profiles.{name}.{key}.{k}: a finite number is expected, got {v!r}")
    return doc


def _kept(f: ProfileFit, coefficients: dict[str, float]) -> ProfileFit:
    """``f`` with ``coefficients`` (and errors recomputed) if they agree with its own (``keep``)."""
    mine = _coefficients(f.profile)
    if set(mine) != set(coefficients) or not all(
            math.isclose(mine[k], coefficients[k], rel_tol=KEEP_RTOL) for k in mine):
        return f
    p = make_profile(f.combo, [coefficients[k] for k in (
        "step_overhead_s", "prefill_s_per_token", "decode_s_per_seq", "bandwidth_efficiency",
        "attention_tokens_per_pair")] + [coefficients.get("weight_read_s", 0.0)])
    return replace(f, profile=p, fit_mape=mape(p, f.fit_rows), held_out_mape=mape(p, f.held_out_rows))


def build_document(fits: dict[str, ProfileFit], data_dir: Path, vidur_s_per_token: float) -> dict[str, object]:
    """The ``coefficients.json`` content: the shipped profiles with provenance and errors, the stand-ins,
    what was not shipped and why, and the cross-checks."""
    profiles = {name: _entry(f, f.profile) for name, f in fits.items() if shipped(f)}
    for name, (of, why) in STAND_INS.items():
        profiles[name] = _entry(fits[of], stand_in(name, fits[of].profile), (of, why))
    replicates: dict[str, object] = {}
    reruns = bench.load_replicate_rows(data_dir)
    for name, f in fits.items():
        c = f.combo
        rows = [r for r in bench.rows_for(reruns, c.model, c.gpu, c.tp) if bench.preemption(c.model, c.gpu, c.tp, r)
                is None] if c.source == LIB and shipped(f) else []
        if rows:
            replicates[name] = {"rows": len(rows), "mape": mape(f.profile, rows)}
    not_shipped = {f"{profile_name(m, g, tp)} ({src})": why for (m, g, tp, src), why in NOT_SHIPPED.items()}
    not_shipped |= {f"{name} ({f.combo.source})": f"held-out MAPE {f.held_out_mape:.1%} > {MAX_HELD_OUT_MAPE:.0%}"
                    for name, f in fits.items() if not shipped(f)}
    files = [bench.ALL_RESULTS, bench.TTFT_RESULTS, bench.REPLICATE_RESULTS, splitwise.PERF_MODEL, VIDUR_A100_MLP]
    return {
        "fitted_on": datetime.date.today().isoformat(),
        "fitted_by": "python -m models.profiles.fit",
        "model_form": (
            "linear: step_time = step_overhead_s + prefill_s_per_token*(p + attention_tokens_per_pair*q)"
            " + decode_s_per_seq*n + c*kv_bytes_per_token/(bandwidth_efficiency*mem_bandwidth_bytes_per_s);"
            " roofline: step_time = step_overhead_s + max(weight_read_s, prefill_s_per_token*p)"
            " + prefill_s_per_token*attention_tokens_per_pair*q + decode_s_per_seq*n + (the same KV-read term);"
            " 0 when idle; q = attention pairs of the prefilled tokens (c*s + c*(c+1)/2 for a chunk of c"
            " tokens at position s); attention_tokens_per_pair fitted where the rows have prefills over"
            f" {SHORT_PREFILL_TOKENS} tokens (at least the architecture's FLOP ratio), else that ratio"
            " (each entry's attention says which); each entry's step_form says which form, its forms"
            " both forms' fits and errors and the rule that chose"
        ),
        "sources": {
            "llm-inference-bench": {"repo": BENCH_REPO, "commit": BENCH_COMMIT},
            "splitwise": {"repo": SPLITWISE_REPO, "commit": SPLITWISE_COMMIT},
            "vidur-profiling": {"repo": VIDUR_REPO, "commit": VIDUR_COMMIT},
            "files_sha256": {name: _sha256(data_dir / name) for name in files},
        },
        "max_heldout_mape": MAX_HELD_OUT_MAPE,
        "cross_checks": {
            "vidur_a100_prefill_s_per_token": vidur_s_per_token,
            "fitted_a100_40gb_prefill_s_per_token": fits["llama-3-8b/a100-40gb"].profile.prefill_s_per_token,
            "note": "Vidur: marginal non-attention op time per token, 4096->8192 tokens, x32 layers",
            "replicate_mape": replicates,
            "replicate_note": f"{bench.REPLICATE_RESULTS}: independent fp16 re-runs, never fitted "
                              "(preempting ones left out)",
        },
        "not_shipped": dict(sorted(not_shipped.items())),
        "profiles": dict(sorted(profiles.items())),
    }


def main(argv: Sequence[str] | None = None) -> None:
    """Fit, print coefficients and errors per profile, and write the JSON document."""
    parser = argparse.ArgumentParser(
        prog="python -m models.profiles.fit", description="Fit performance profiles, write coefficients.json."
    )
    parser.add_argument("--data", type=Path, required=True, help="shared data directory")
    parser.add_argument("--out", type=Path, required=True, help="coefficients.json to write")
    parser.add_argument("--keep", type=Path, help=(
        "a shipped coefficients.json: refitted coefficients within a relative 1e-6 of its entry's (same "
        "form) keep its values exactly (fit.keep)"))
    args = parser.parse_args(argv)
    try:  # before the fit: a bad --keep is one line, not a traceback after the work
        kept = None if args.keep is None else read_kept(args.keep)
    except ProfileError as exc:
        parser.error(f"--keep: {exc}")
    fits = fit_all(Data.load(args.data), log=print)
    if kept is not None:
        fits = keep(fits, kept)
    vidur = vidur_prefill_s_per_token(args.data)
    for name, f in fits.items():
        p = f.profile
        print(
            f"{name}: {p.step_form} step_overhead={p.step_overhead_s * 1e3:.3f} ms "
            + (f"weight_read={p.weight_read_s * 1e3:.3f} ms " if p.step_form == ROOFLINE else "")
            + f"prefill={p.prefill_s_per_token * 1e6:.2f} us/token "
            f"decode={p.decode_s_per_seq * 1e6:.2f} us/seq eta={p.bandwidth_efficiency:.3f} | "
            f"fit MAPE {f.fit_mape:.2%} ({len(f.fit_rows)} rows), held-out MAPE {f.held_out_mape:.2%} "
            f"({len(f.held_out_rows)} rows), {len(f.excluded_rows)} excluded"
            + ("" if f.prefill_prior is None else " [prefill prior]")
            + (f" attention x{p.attention_tokens_per_pair / MODELS[p.model].attention_tokens_per_pair:.2f} FLOP ratio"
               if f.attention_fitted else "")
        )
        for g in sorted([f, *([f.alternative] if f.alternative else [])], key=lambda x: x.profile.step_form):
            form = g.profile.step_form
            print(f"    {form:8s}{' (chosen)' if g is f else '         '} held-out {g.held_out_mape:.1%}, by group: "
                  + ", ".join(f"{k} {e['mape']:.1%} ({e['rows']})"
                              for k, e in group_errors(g.profile, g.held_out_rows).items()))
    print(f"A100 prefill: Vidur non-attention ops {vidur * 1e6:.2f} us/token, "
          f"fitted {fits['llama-3-8b/a100-40gb'].profile.prefill_s_per_token * 1e6:.2f} us/token")
    doc = build_document(fits, args.data, vidur)
    # atomically: --out is the shipped coefficients.json, which an interrupted write would truncate
    try:
        write_text(args.out, json.dumps(doc, indent=2) + "\n")
    except OSError as exc:
        parser.exit(2, f"error: {exc}\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
