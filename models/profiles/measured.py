"""A profile fitted to an operator's own measurements of one replica: intervals of engine work.

Each row is an interval of wall time in which one engine was busy throughout (one step of a
benchmark's reconstructed timeline, or one Prometheus window of a live pod) with what it did in it:
engine steps ``m``, prompt tokens prefilled ``p``, decode sequence-steps ``n`` (one per sequence per
step), the attention pairs those prompt tokens formed ``q`` and the KV-context tokens those decodes
read ``c`` (summed over sequence-steps). Summing ``PerformanceProfile.step_time`` over the interval's
steps gives, exactly,

    duration_s = step_overhead_s * m + prefill_s_per_token * (p + r q) + decode_s_per_seq * n
                 + seconds_per_ctx_token * c

with ``r`` the model's ``attention_tokens_per_pair`` (from its architecture, not fitted)
so the four coefficients follow from linear least squares (``scipy.optimize.lsq_linear``, each >= 0)
on relative residuals (each row divided by its duration: every interval weighs alike, as the
shipped fits weigh log ratios). ``bandwidth_efficiency`` is ``kv_bytes_per_token /
(seconds_per_ctx_token x replica bandwidth)``, from the model's architecture and the GPU's datasheet.

Rows whose index is ``HOLD_OUT_EVERY - 1`` modulo ``HOLD_OUT_EVERY`` are held out of the fit and
give ``heldout_mape``. A coefficient is *pinned* when its standard error is at most
``MAX_RELATIVE_SE`` of its value; the error is the least-squares one, ``s^2 (X'X)^-1`` on the
relative rows, with ``s`` at least ``NOISE_FLOOR`` (so that exact data with collinear columns, which
leaves no residual, still shows them unpinned). The fit refuses, naming each unpinned coefficient
and the variation the data lacks, rather than write a profile with a term it could not measure.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np
from scipy.optimize import lsq_linear

from autoscaler.errors import ProfileError
from models.profiles.specs import GPUS, MODELS

COEFFICIENTS = ("step_overhead_s", "prefill_s_per_token", "decode_s_per_seq", "seconds_per_ctx_token")
"""The fitted terms, in the column order of ``Rows.design``."""
HOLD_OUT_EVERY = 5
"""Every fifth row is held out."""
MIN_ROWS = 20
"""Fewest rows a fit takes (four coefficients, and held-out rows to check them on)."""
MAX_RELATIVE_SE = 0.05
"""A coefficient is pinned when its standard error is at most this fraction of it (two standard
errors within the 10 % the profiles aim at)."""
OUTLIER_SIGMAS = 6.0
"""A fitted row whose relative residual exceeds this many robust standard deviations (1.4826 x the
median absolute residual) is left out of the refit ..."""
MIN_OUTLIER = 0.25
"""... if it is also more than 25 % off: a step split or merged by delivery jitter, or a pause on the
host, not the GPU's noise (a few percent)."""
NOISE_FLOOR = 0.01
"""Least relative residual scale assumed (1 %: a step's time jitters at least this much on a GPU)."""
MISSING: dict[str, str] = {
    "step_overhead_s": "the number of engine steps hardly varies apart from the token counts",
    "prefill_s_per_token": "the prompt tokens prefilled hardly vary apart from the other terms "
                           "(mix prompt lengths, or requests arriving while others decode)",
    "decode_s_per_seq": "the number of decoding sequences per step hardly varies apart from their "
                        "context (run at more than one concurrency or request rate)",
    "seconds_per_ctx_token": "the decodes' KV context hardly varies apart from their number "
                             "(mix short and long prompts or outputs)",
}
"""Coefficient -> the variation the data lacks when it is not pinned."""
CONFOUNDED: dict[frozenset[str], str] = {
    frozenset({"step_overhead_s", "decode_s_per_seq"}):
        "the number of decoding sequences per step hardly varies (run at more than one concurrency or "
        "request rate)",
    frozenset({"decode_s_per_seq", "seconds_per_ctx_token"}):
        "the mean KV context of a step's decoding sequences hardly varies from step to step, whatever their "
        "number (mix short and long prompts or outputs, e.g. vllm bench serve --random-range-ratio 0.9; many "
        "sequences per step average it out, so add a run at a low rate)",
}
"""Two coefficients whose estimates move together -> the variation the data lacks, which names the
remedy better than ``MISSING`` does: a rate sweep varies the batch, not the context per sequence."""



@dataclass(frozen=True)
class Rows:
    """Intervals of busy engine time, one per row (arrays of one length).

    Attributes:
        duration_s: wall time of each interval, seconds (> 0).
        steps: engine steps in it.
        prefill_tokens: prompt tokens prefilled in it.
        decode_seqs: decode sequence-steps in it.
        ctx_tokens: KV-context tokens read by those decodes, summed over sequence-steps.
        prefill_pairs: attention (query, key) pairs the prefilled tokens formed.
        unit: what a row is (``"step"``, ``"window"``), for messages.
    """

    duration_s: np.ndarray
    steps: np.ndarray
    prefill_tokens: np.ndarray
    decode_seqs: np.ndarray
    ctx_tokens: np.ndarray
    prefill_pairs: np.ndarray
    unit: str

    def design(self, attention_tokens_per_pair: float) -> np.ndarray:
        """(rows, 4): the columns multiplying ``COEFFICIENTS``, the prefill one in prefill-token
        equivalents (tokens + ``attention_tokens_per_pair`` x pairs)."""
        prefill = self.prefill_tokens + attention_tokens_per_pair * self.prefill_pairs
        return np.column_stack([self.steps, prefill, self.decode_seqs, self.ctx_tokens]).astype(float)

    def __len__(self) -> int:
        return len(self.duration_s)


@dataclass(frozen=True)
class MeasuredFit:
    """A fit's coefficients and errors.

    Attributes:
        coefficients: ``COEFFICIENTS`` -> value (s, s/token, s/sequence, s/context token).
        relative_se: ``COEFFICIENTS`` -> standard error / value.
        rows_fitted, rows_held_out: row counts.
        fit_mape, heldout_mape: mean |predicted / measured - 1| of the interval durations.
        unit: what a row is.
    """

    coefficients: dict[str, float]
    relative_se: dict[str, float]
    rows_fitted: int
    rows_held_out: int
    fit_mape: float
    heldout_mape: float
    unit: str


def _mape(x: np.ndarray, y: np.ndarray, theta: np.ndarray) -> float:
    return float(np.mean(np.abs(x @ theta / y - 1.0)))


def _lacks(name: str, corr: np.ndarray) -> str:
    """What the data lacks to pin ``name``: after the coefficient whose estimate its own follows most
    closely (``corr``: the estimates' correlations, in ``COEFFICIENTS`` order)."""
    i = COEFFICIENTS.index(name)
    others = [j for j in range(len(COEFFICIENTS)) if j != i]
    partner = COEFFICIENTS[max(others, key=lambda j: abs(corr[i, j]))]
    return CONFOUNDED.get(frozenset({name, partner}), MISSING[name])


def _solve(a: np.ndarray) -> np.ndarray:
    """Non-negative least squares of ``a theta = 1`` (rows of the design over their durations), columns
    scaled to a unit maximum for the solver."""
    scale = np.where(a.max(axis=0) > 0, a.max(axis=0), 1.0)
    return np.asarray(lsq_linear(a / scale, np.ones(len(a)), bounds=(0.0, np.inf), method="bvls").x / scale)


def fit(rows: Rows, source: str, attention_tokens_per_pair: float) -> MeasuredFit:
    """Fit the four coefficients to ``rows`` (held-out rows left out), checking each is pinned.

    Args:
        rows: the measured intervals.
        source: what they were read from, for messages (a file, a Prometheus URL).
        attention_tokens_per_pair: the model's (``specs.ModelSpec``; 0 leaves attention out).

    Raises:
        ProfileError: fewer than ``MIN_ROWS`` usable rows, or a coefficient not pinned (one line
            naming each, its relative standard error and what the data lacks).
    """
    x, y = rows.design(attention_tokens_per_pair), rows.duration_s.astype(float)
    ok = np.isfinite(y) & (y > 0) & np.all(np.isfinite(x) & (x >= 0), axis=1)
    x, y = x[ok], y[ok]
    if len(y) < MIN_ROWS:
        raise ProfileError(f"{source}: {len(y)} usable {rows.unit}s of busy engine time, need at least {MIN_ROWS}")
    held = np.arange(len(y)) % HOLD_OUT_EVERY == HOLD_OUT_EVERY - 1
    xf, yf = x[~held], y[~held]
    theta = _solve(xf / yf[:, None])
    resid = xf @ theta / yf - 1.0
    outlying = np.abs(resid) > max(OUTLIER_SIGMAS * 1.4826 * float(np.median(np.abs(resid))), MIN_OUTLIER)
    if outlying.any():  # refit without them: one split step would otherwise inflate every standard error
        xf, yf = xf[~outlying], yf[~outlying]
        theta = _solve(xf / yf[:, None])
    a = xf / yf[:, None]
    scale = np.where(a.max(axis=0) > 0, a.max(axis=0), 1.0)
    resid = a @ theta - 1.0
    s2 = max(float(np.mean(resid**2)) * len(yf) / max(len(yf) - 4, 1), NOISE_FLOOR**2)
    # (X'X)^-1 from the SVD of the column-scaled design, a singular direction kept (as a huge
    # variance) where a pseudo-inverse would drop it and hide exact collinearity.
    _, sv, vt = np.linalg.svd(a / scale, full_matrices=False)
    inv_sq = 1.0 / np.maximum(sv, 1e-12 * sv.max()) ** 2
    se = np.sqrt(s2 * (vt.T**2 @ inv_sq)) / scale
    cov = (vt.T * inv_sq) @ vt  # of the scaled coefficients, up to s2
    corr = cov / np.sqrt(np.outer(np.diag(cov), np.diag(cov)))
    rse = {name: (float(se[i] / theta[i]) if theta[i] > 0 else float("inf")) for i, name in enumerate(COEFFICIENTS)}
    empty = {name: not np.any(x[:, i] > 0) for i, name in enumerate(COEFFICIENTS)}
    bad = [name for name in COEFFICIENTS if empty[name] or rse[name] > MAX_RELATIVE_SE]
    if bad:
        lacks: dict[str, list[str]] = {}  # what the data lacks -> the coefficients it leaves unpinned
        for name in bad:
            if empty[name]:
                lacks[f"no {rows.unit} has any"] = [*lacks.get(f"no {rows.unit} has any", []), name]
            else:
                lacks.setdefault(_lacks(name, corr), []).append(f"{name} (standard error {rse[name]:.0%} of it)")
        why = "; ".join(f"{', '.join(names)}: {text}" for text, names in lacks.items())
        raise ProfileError(f"{source}: cannot pin {', '.join(bad)} from {len(y)} {rows.unit}s: {why}")
    return MeasuredFit(coefficients=dict(zip(COEFFICIENTS, map(float, theta), strict=True)), relative_se=rse,
                       rows_fitted=len(yf), rows_held_out=int(held.sum()), fit_mape=_mape(xf, yf, theta),
                       heldout_mape=_mape(x[held], y[held], theta), unit=rows.unit)


MIN_BANDWIDTH_EFFICIENCY = 0.05
"""Least fraction of datasheet bandwidth a fitted context term may imply (the shipped fits find
0.3-1): below it the model, GPU or TP degree given is wrong."""


def profile_document(f: MeasuredFit, model: str, gpu: str, tensor_parallel: int, source: dict[str, object],
                     where: str = "") -> dict:
    """The profile file (``models.profiles.profile_file``) of fit ``f`` for ``model`` on ``tensor_parallel``
    x ``gpu``, with ``source`` (what it was fitted from) recorded beside it; ``where`` (the data's
    name) leads any error message.

    Raises:
        ProfileError: an unknown model or GPU (the message lists the known ones), or a context term
            implying more than the replica's datasheet bandwidth, or less than
            ``MIN_BANDWIDTH_EFFICIENCY`` of it (the model, GPU or TP is wrong).
    """
    if model not in MODELS:
        raise ProfileError(f"unknown model '{model}'; known: {', '.join(sorted(MODELS))}")
    if gpu not in GPUS:
        raise ProfileError(f"unknown GPU '{gpu}'; known: {', '.join(sorted(GPUS))}")
    spec = MODELS[model]
    bandwidth = tensor_parallel * GPUS[gpu].mem_bandwidth_bytes_per_s
    efficiency = spec.kv_bytes_per_token / (f.coefficients["seconds_per_ctx_token"] * bandwidth)
    if not MIN_BANDWIDTH_EFFICIENCY <= efficiency <= 1.0:
        raise ProfileError(
            f"{where + ': ' if where else ''}the fitted KV-read time ({f.coefficients['seconds_per_ctx_token']:.3g} s "
            f"per context token) means {efficiency:.3g} x the peak bandwidth of {tensor_parallel} x {gpu} for "
            f"{model}'s {spec.kv_bytes_per_token} KV bytes per token (plausible: {MIN_BANDWIDTH_EFFICIENCY:g} to 1): "
            "is the model, GPU or tensor parallel degree wrong?")
    return {
        "model": model, "gpu": gpu, "tensor_parallel": tensor_parallel,
        "architecture": {k: v for k, v in asdict(spec).items() if k not in ("key", "source")},
        "coefficients": {"step_overhead_s": f.coefficients["step_overhead_s"],
                         "prefill_s_per_token": f.coefficients["prefill_s_per_token"],
                         "decode_s_per_seq": f.coefficients["decode_s_per_seq"],
                         "bandwidth_efficiency": efficiency},
        "kv_bytes_per_token": spec.kv_bytes_per_token, "mem_bandwidth_bytes_per_s": bandwidth,
        "rows_fitted": f.rows_fitted, "rows_held_out": f.rows_held_out, "row_unit": f.unit,
        "fit_mape": f.fit_mape, "heldout_mape": f.heldout_mape,
        # bandwidth_efficiency is 1 / (seconds_per_ctx_token x bandwidth): the same relative error, to first order
        "relative_standard_error": {**{k: f.relative_se[k] for k in COEFFICIENTS[:3]},
                                    "bandwidth_efficiency": f.relative_se["seconds_per_ctx_token"]},
        "fitted_by": "autoscaler profile fit", "fitted_from": source,
    }
