"""Performance profiles: wall time of one vLLM engine iteration, per model x GPU x tensor-parallel degree.

The fitted coefficients ship in ``coefficients.json`` beside this module (package data), written by
``python -m models.profiles.fit``; physical constants come from ``models.profiles.specs``. Nothing
here reads the benchmark data.
"""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass, replace
from functools import cache
from importlib import resources
from typing import Any

from autoscaler.errors import ProfileError
from models.profiles.specs import GPUS, MODELS

COEFFICIENTS_FILE = "coefficients.json"
"""Name of the package-data file holding the fitted coefficients."""


def profile_name(model: str, gpu: str, tensor_parallel: int = 1) -> str:
    """``"<model>/<gpu>"`` at tensor parallel 1, ``"<model>/<gpu>/tp<N>"`` at N."""
    return f"{model}/{gpu}" if tensor_parallel == 1 else f"{model}/{gpu}/tp{tensor_parallel}"


@dataclass(frozen=True)
class PerformanceProfile:
    """Step-time model of one vLLM engine (continuous batching) serving one model on one replica
    (one GPU, or ``tensor_parallel`` GPUs together).

    One iteration that prefills ``p`` prompt tokens forming ``q`` attention (query, key) pairs and
    decodes one token for each of ``n`` sequences whose KV contexts total ``c`` tokens takes, in seconds,

        t = step_overhead_s + prefill_s_per_token * (p + attention_tokens_per_pair * q)
            + decode_s_per_seq * n + seconds_per_ctx_token * c                       (linear form)

    when ``p > 0`` or ``n > 0``, and 0 when the engine is idle. A profile with ``weight_read_s > 0``
    has the **roofline form** instead (``step_form``): the weight reads and the prompt tokens' matmuls
    overlap, so a step takes the larger of the two, not their sum,

        t = step_overhead_s + max(weight_read_s, prefill_s_per_token * p)
            + prefill_s_per_token * attention_tokens_per_pair * q + decode_s_per_seq * n
            + seconds_per_ctx_token * c                                              (roofline form)

    (a short prefill is hidden under the weight reads, as the measured prefills of 128-512 tokens
    are; past ``weight_read_s / prefill_s_per_token`` tokens, the knee, it grows linearly). In the
    linear form ``step_overhead_s`` includes the weight reads; in the roofline form it is only the
    scheduling/launch part, and a decode step's fixed cost is ``fixed_step_s`` in both.

    ``step_overhead_s`` is the per-step cost (in the linear form: reading all weights once, plus
    scheduling/launch overhead), ``prefill_s_per_token`` the
    compute cost of a prompt token's matmuls, ``attention_tokens_per_pair`` the cost of one
    attention pair in units of a prompt token's (attention is quadratic in prompt length: a chunk
    of ``c`` tokens starting at position ``s`` forms ``c s + c (c + 1) / 2`` pairs, so a chunk late
    in a long prompt costs more per token): fitted where the profile's rows have long prefills
    (Splitwise's 4096-token ones), else the FLOP ratio of the architecture
    (``specs.ModelSpec.attention_tokens_per_pair``), which is also the fit's lower bound;
    ``decode_s_per_seq`` the per-sequence decode cost (sampling,
    bookkeeping, the sequence's row of the matmuls), and the context term is the time to stream the
    KV cache: ``kv_bytes_per_token / (bandwidth_efficiency * mem_bandwidth_bytes_per_s)`` per
    token, so it is grounded in memory bandwidth for contexts longer than any measured one.

    Attributes:
        name: profile name, ``"<model>/<gpu>"`` at tensor parallel 1, ``"<model>/<gpu>/tp<N>"`` at N,
            e.g. ``"llama-3-8b/h100-sxm"``, ``"llama-3-70b/h100-sxm/tp4"``.
        model: model key (``models.profiles.specs.MODELS``).
        gpu: GPU key (``models.profiles.specs.GPUS``).
        kv_bytes_per_token: KV-cache bytes per context token (131072 for Llama-3-8B bf16).
        mem_bandwidth_bytes_per_s: datasheet peak HBM bandwidth of the whole replica, bytes/s
            (``tensor_parallel`` x one GPU's: each GPU streams its shard of the weights and KV).
        step_overhead_s: fitted fixed cost of a non-idle step, seconds.
        prefill_s_per_token: fitted cost per prefilled prompt token, seconds/token.
        decode_s_per_seq: fitted cost per decoded sequence, seconds/sequence.
        bandwidth_efficiency: fitted fraction of peak bandwidth achieved reading the KV cache,
            in (0, 1].
        tensor_parallel: GPUs of one replica (vLLM ``--tensor-parallel-size``).
        attention_tokens_per_pair: prefill-token equivalents of one attention pair (fitted, or
            derived from the model's architecture; 0 leaves attention out).
        weight_read_s: roofline form only: fitted seconds to read the replica's weights once (at
            least ``specs.ModelSpec.active_weight_bytes`` / ``mem_bandwidth_bytes_per_s``); 0 (the
            default) selects the linear form.
    """

    name: str
    model: str
    gpu: str
    kv_bytes_per_token: int
    mem_bandwidth_bytes_per_s: float
    step_overhead_s: float
    prefill_s_per_token: float
    decode_s_per_seq: float
    bandwidth_efficiency: float
    tensor_parallel: int = 1
    attention_tokens_per_pair: float = 0.0
    weight_read_s: float = 0.0

    @property
    def step_form(self) -> str:
        """``"roofline"`` where ``weight_read_s > 0``, else ``"linear"`` (class doc)."""
        return "roofline" if self.weight_read_s > 0 else "linear"

    @property
    def fixed_step_s(self) -> float:
        """Seconds of a step that are there whatever it computes: a decode step's cost at no sequence
        and no context (``step_overhead_s``, plus ``weight_read_s`` in the roofline form). The
        capacity model's ``t0``: it prices prefill tokens at ``prefill_s_per_token`` on top, which
        in the roofline form overstates a step whose prefill is under the knee (at most by
        ``weight_read_s``), a conservative bound."""
        return self.step_overhead_s + self.weight_read_s

    @property
    def seconds_per_ctx_token(self) -> float:
        """Seconds one decode step spends per KV-context token: KV bytes / effective bandwidth."""
        return self.kv_bytes_per_token / (self.bandwidth_efficiency * self.mem_bandwidth_bytes_per_s)

    def slowed(self, factor: float) -> PerformanceProfile:
        """This profile with every step ``factor`` times as long (a GPU slower than its measurements:
        throttled clocks, a noisy neighbour), for the simulator's ``slowdown`` fault.

        Raises:
            ValueError: ``factor`` not a finite number > 0.
        """
        if not 0 < factor < float("inf"):
            raise ValueError(f"slowdown factor must be a finite number > 0, got {factor}")
        return replace(self, step_overhead_s=self.step_overhead_s * factor,
                       prefill_s_per_token=self.prefill_s_per_token * factor,
                       decode_s_per_seq=self.decode_s_per_seq * factor,
                       bandwidth_efficiency=self.bandwidth_efficiency / factor,
                       weight_read_s=self.weight_read_s * factor)

    def prefill_equivalent(self, tokens: Any, start: Any = 0) -> Any:
        """Prefill-token equivalents of prefilling ``tokens`` prompt tokens after ``start`` already in
        the KV cache (a chunk, or cache hits): ``tokens + attention_tokens_per_pair *
        prefill_pairs(start, tokens)``. Numbers or numpy arrays (element-wise)."""
        return tokens + self.attention_tokens_per_pair * prefill_pairs(start, tokens)

    def step_time(self, prefill_tokens: int, decode_seqs: int, decode_ctx_tokens: int,
                  prefill_attention_pairs: float = 0) -> float:
        """Seconds for one engine iteration.

        Args:
            prefill_tokens: prompt tokens prefilled this step (sum over the scheduled chunks).
            decode_seqs: sequences that decode one token this step.
            decode_ctx_tokens: total KV-context tokens of those sequences.
            prefill_attention_pairs: attention (query, key) pairs those prompt tokens form (sum of
                ``prefill_pairs`` over the chunks); 0 leaves attention out.

        Returns:
            Wall time in seconds (the class doc's linear or roofline form, by ``step_form``); exactly
            ``step_time(p, n, 0, q) + seconds_per_ctx_token * c``, and 0.0 for an idle step (no
            prefill and no decode).

        Raises:
            ValueError: a count is negative, context tokens are given without decode sequences, or
                attention pairs without prefill tokens.
        """
        if prefill_tokens < 0 or decode_seqs < 0 or decode_ctx_tokens < 0 or prefill_attention_pairs < 0:
            raise ValueError(
                f"step_time counts must be >= 0, got prefill_tokens={prefill_tokens}, "
                f"decode_seqs={decode_seqs}, decode_ctx_tokens={decode_ctx_tokens}, "
                f"prefill_attention_pairs={prefill_attention_pairs}"
            )
        if decode_seqs == 0 and decode_ctx_tokens > 0:
            raise ValueError(f"decode_ctx_tokens={decode_ctx_tokens} given with decode_seqs=0")
        if prefill_tokens == 0 and prefill_attention_pairs > 0:
            raise ValueError(f"prefill_attention_pairs={prefill_attention_pairs} given with prefill_tokens=0")
        if prefill_tokens == 0 and decode_seqs == 0:
            return 0.0
        if self.weight_read_s > 0:
            base = (
                self.step_overhead_s
                + max(self.weight_read_s, self.prefill_s_per_token * prefill_tokens)
                + self.prefill_s_per_token * self.attention_tokens_per_pair * prefill_attention_pairs
                + self.decode_s_per_seq * decode_seqs
            )
            return base + self.seconds_per_ctx_token * decode_ctx_tokens
        base = (
            self.step_overhead_s
            + self.prefill_s_per_token * (prefill_tokens + self.attention_tokens_per_pair * prefill_attention_pairs)
            + self.decode_s_per_seq * decode_seqs
        )
        return base + self.seconds_per_ctx_token * decode_ctx_tokens


def prefill_pairs(start: Any, tokens: Any) -> Any:
    """Causal attention (query, key) pairs of prefilling ``tokens`` prompt tokens after ``start``
    tokens already in the KV cache: the token at position i (1-based) attends to i keys, so
    ``tokens * start + tokens * (tokens + 1) / 2``. Numbers or numpy arrays (element-wise)."""
    return tokens * start + tokens * (tokens + 1) / 2


SHORT_PREFILL_TOKENS = 2048
"""A measured prefill of prompts of at most this many tokens is in the ``"prefill <= 2048"`` row
group, a longer one in ``"prefill > 2048"`` (LLM-Inference-Bench's rows stop at 2048; the
simulator's default prefill chunk is 2048 tokens)."""


def prefill_group(prompt_tokens: int) -> str:
    """Row group of a measured prefill of prompts of ``prompt_tokens`` tokens (``SHORT_PREFILL_TOKENS``)."""
    return f"prefill {'<=' if prompt_tokens <= SHORT_PREFILL_TOKENS else '>'} {SHORT_PREFILL_TOKENS}"


def group_order(group: str) -> tuple[int, str, int]:
    """Sort key of row groups: prefills first, then decode and mixed, each by batch."""
    kind, _, batch = group.partition(" B=")
    return (0, group, 0) if group.startswith("prefill") else (1, kind, int(batch))


@cache
def _document() -> dict[str, Any]:
    text = resources.files("models.profiles").joinpath(COEFFICIENTS_FILE).read_text(encoding="utf-8")
    doc: dict[str, Any] = json.loads(text)
    return doc


@cache
def _profiles() -> dict[str, PerformanceProfile]:
    profiles: dict[str, PerformanceProfile] = {}
    for name, entry in _document()["profiles"].items():
        model, gpu, tp = MODELS[entry["model"]], GPUS[entry["gpu"]], entry["tensor_parallel"]
        coefficients = {"attention_tokens_per_pair": model.attention_tokens_per_pair, **entry["coefficients"]}
        profiles[name] = PerformanceProfile(
            name=name,
            model=model.key,
            gpu=gpu.key,
            kv_bytes_per_token=model.kv_bytes_per_token,
            mem_bandwidth_bytes_per_s=tp * gpu.mem_bandwidth_bytes_per_s,
            tensor_parallel=tp,
            **coefficients,
        )
    return profiles


def shipped_entries() -> dict[str, dict[str, Any]]:
    """The shipped profiles' entries of ``coefficients.json`` (coefficients, source rows, errors), by name
    (a copy: the caller may change it)."""
    return copy.deepcopy(_document()["profiles"])


LISTING_FIELDS = ("name", "model", "gpu", "tensor_parallel", "rows_fitted", "rows_held_out", "heldout_mape")
"""Keys of each ``listing()`` item (``autoscaler profiles list --json``: an interface others rely on)."""


def listing() -> list[dict[str, Any]]:
    """One item per shipped profile, sorted by name, with exactly the keys of ``LISTING_FIELDS``."""
    return [{"name": name, **{k: entry[k] for k in LISTING_FIELDS[1:]}}
            for name, entry in sorted(shipped_entries().items())]


GROUP_FIELDS = ("name", "group", "rows_held_out", "heldout_mape", "rows_fitted", "fit_mape", "step_form",
                "linear_heldout_mape", "roofline_heldout_mape")
"""Keys of each ``group_listing()`` item (``autoscaler profiles list --groups --json``)."""


def group_listing() -> list[dict[str, Any]]:
    """One item per shipped profile (sorted by name) and row group (held-out or fitted, in the entry's
    order: ``group_order``), with exactly the keys of ``GROUP_FIELDS``; a
    group without held-out (fitted) rows has ``rows_held_out`` (``rows_fitted``) 0 and its error None.
    ``heldout_mape`` is the shipped form's (``step_form``); ``linear_heldout_mape`` and
    ``roofline_heldout_mape`` each form's fit's (the entry's ``forms``), None without held-out rows."""
    items: list[dict[str, Any]] = []
    for name, entry in sorted(shipped_entries().items()):
        held, fitted = entry["heldout_groups"], entry["fit_groups"]
        forms = entry["forms"]
        for group in sorted({*held, *fitted}, key=group_order):
            h, f = held.get(group), fitted.get(group)
            by_form = {form: forms[form]["heldout_groups"].get(group) for form in ("linear", "roofline")}
            items.append({"name": name, "group": group,
                          "rows_held_out": h["rows"] if h else 0, "heldout_mape": h["mape"] if h else None,
                          "rows_fitted": f["rows"] if f else 0, "fit_mape": f["mape"] if f else None,
                          "step_form": entry["step_form"],
                          **{f"{form}_heldout_mape": e["mape"] if e else None for form, e in by_form.items()}})
    return items


def list_profiles() -> list[str]:
    """Names of the shipped profiles, sorted."""
    return sorted(_profiles())


def shipped_profile(name: str) -> PerformanceProfile:
    """The shipped profile called ``name``.

    Raises:
        ProfileError: ``name`` is not a shipped profile; the message lists the known ones.
    """
    try:
        return _profiles()[name]
    except KeyError:
        raise ProfileError(
            f"unknown performance profile '{name}'; known: {', '.join(list_profiles())}"
        ) from None
