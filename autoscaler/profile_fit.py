"""``autoscaler profile fit``: a profile from an operator's own measurements, written as a profile file.

Two sources, each giving rows of busy engine time (``models.profiles.measured``):

- result files of vLLM's serving benchmark against one replica (``models.profiles.vllm_bench``: one
  row per reconstructed engine step); several files (a sweep over request rates or concurrencies)
  are fitted together;
- a Prometheus range of live pods (``autoscaler.adapters.prometheus_profile``: one row per pod
  per busy window).

The file written is what a fleet file's ``profile: ./my-model-h100.json`` names
(``models.profiles.profile_file``); it records where it was fitted from and the fit's errors.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

import numpy as np

from autoscaler.errors import ProfileError
from autoscaler.urls import redact
from models.profiles import measured, vllm_bench
from models.profiles.measured import MeasuredFit, Rows
from models.profiles.profile_file import load_profile_file
from models.profiles.specs import GPUS, MODELS


@dataclass(frozen=True)
class FitResult:
    """What ``profile fit`` measured and wrote.

    Attributes:
        fit: the coefficients and errors.
        document: the profile file's content.
        out: where it was written.
    """

    fit: MeasuredFit
    document: dict[str, Any]
    out: Path


MAX_TENSOR_PARALLEL = 64
"""Most GPUs one replica spans here (vLLM's tensor parallel runs within a node or two)."""


def check_target(model: str, gpu: str, tensor_parallel: int, out: Path) -> None:
    """Refuse an unknown model or GPU, a TP degree outside [1, ``MAX_TENSOR_PARALLEL``], or an output
    that a fleet file would not read as a profile file or cannot be written, before any data is read.

    Raises:
        ProfileError: one line naming the option and what is known.
    """
    if model not in MODELS:
        raise ProfileError(f"--model: unknown model '{model}'; known: {', '.join(sorted(MODELS))}")
    if gpu not in GPUS:
        raise ProfileError(f"--gpu: unknown GPU '{gpu}'; known: {', '.join(sorted(GPUS))}")
    if not 1 <= tensor_parallel <= MAX_TENSOR_PARALLEL:
        raise ProfileError(f"--tensor-parallel must be in [1, {MAX_TENSOR_PARALLEL}], got {tensor_parallel}")
    parent = next((p for p in (out.parent, *out.parent.parents) if p.exists()), Path("."))
    if out.is_dir() or not parent.is_dir() or not os.access(parent, os.W_OK | os.X_OK):
        raise ProfileError(f"--out {out}: " + ("is a directory" if out.is_dir() else
                                               f"cannot create a file under {parent}"))
    if out.suffix != ".json":
        raise ProfileError(f"--out {out}: a profile file's name ends in .json (a fleet's profile: reads that as a "
                           "file)")


def check_bench_options(paths: Sequence[Path], out: Path, max_num_batched_tokens: int, tolerance_s: float) -> None:
    """Refuse a file given twice, ``--out`` naming an input, a step budget < 1 or a tolerance outside
    [0, 1) s, before any data is read.

    Raises:
        ProfileError: one line naming the option.
    """
    seen: set[Path] = set()
    for p in paths:
        real = p.resolve()
        if real in seen:
            raise ProfileError(f"--bench {p}: given twice (its steps would count twice)")
        seen.add(real)
    if out.resolve() in seen:
        raise ProfileError(f"--out {out}: is one of the --bench files, which it would overwrite")
    if max_num_batched_tokens < 1:
        raise ProfileError(f"--max-num-batched-tokens must be >= 1, got {max_num_batched_tokens}")
    if not 0 <= tolerance_s < 1:
        raise ProfileError(f"--tolerance must be in [0, 1) s (tokens of one step arrive within it), got {tolerance_s}")


def check_prometheus_options(start: float, end: float, window_s: float, resolution_s: float) -> None:
    """Refuse a range that does not hold two windows, or a window or resolution that is not a
    positive number (the resolution at most half the window), before connecting.

    Raises:
        ProfileError: one line naming the option.
    """
    if not 0 < window_s < float("inf"):
        raise ProfileError(f"--window must be a positive number of seconds, got {window_s}")
    if not 0 < resolution_s <= window_s / 2:
        raise ProfileError(f"--resolution must be > 0 and at most half of --window, got {resolution_s:g}")
    if not end - start >= 2 * window_s:
        raise ProfileError(f"--start .. --end spans {end - start:g} s; it must hold at least two {window_s:g}-s "
                           "windows")


def bench_rows(paths: Sequence[Path], max_num_batched_tokens: int, tolerance_s: float,
               max_num_seqs: int = vllm_bench.DEFAULT_MAX_NUM_SEQS) -> Rows:
    """The steps of every benchmark result in ``paths``, together.

    Raises:
        ProfileError: a file cannot be read or placed in time (``vllm_bench.load``).
    """
    parts = [vllm_bench.steps(vllm_bench.load(p), max_num_batched_tokens, tolerance_s, max_num_seqs) for p in paths]
    columns = [f.name for f in fields(Rows) if f.name != "unit"]
    return Rows(**{k: np.concatenate([getattr(r, k) for r in parts]) for k in columns}, unit="step")


def fit_and_write(rows: Rows, source: str, provenance: dict[str, object], model: str, gpu: str,
                  tensor_parallel: int, out: Path) -> FitResult:
    """Fit ``rows``, write the profile file ``out`` and read it back as a fleet file would.

    Raises:
        ProfileError: the data cannot pin a coefficient, or the result is not a valid profile.
        OSError: ``out`` cannot be written.
    """
    f = measured.fit(rows, source, MODELS[model].attention_tokens_per_pair)
    doc = measured.profile_document(f, model, gpu, tensor_parallel, provenance, source)
    out.parent.mkdir(parents=True, exist_ok=True)
    # Written beside the target and moved over it once it reads back: a full disk or a crash never
    # leaves a partial file, nor truncates a good one.
    fd, tmp = tempfile.mkstemp(dir=out.parent, prefix=f".{out.name}.", suffix=".json")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(json.dumps(doc, indent=2) + "\n")
        load_profile_file(Path(tmp))
        os.replace(tmp, out)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return FitResult(f, doc, out)


def from_bench(paths: Sequence[Path], model: str, gpu: str, tensor_parallel: int, out: Path,
               max_num_batched_tokens: int = vllm_bench.DEFAULT_MAX_NUM_BATCHED_TOKENS,
               tolerance_s: float = vllm_bench.DEFAULT_TOLERANCE_S,
               max_num_seqs: int = vllm_bench.DEFAULT_MAX_NUM_SEQS) -> FitResult:
    """A profile from benchmark result files (module doc).

    Raises:
        ProfileError: bad options or files, or data that cannot pin a coefficient.
    """
    check_target(model, gpu, tensor_parallel, out)
    check_bench_options(paths, out, max_num_batched_tokens, tolerance_s)
    if max_num_seqs < 1:
        raise ProfileError(f"--max-num-seqs must be >= 1, got {max_num_seqs}")
    rows = bench_rows(paths, max_num_batched_tokens, tolerance_s, max_num_seqs)
    source = ", ".join(str(p) for p in paths)
    provenance = {"kind": "vllm bench serve", "files": [str(p) for p in paths],
                  "max_num_batched_tokens": max_num_batched_tokens, "max_num_seqs": max_num_seqs,
                  "tolerance_s": tolerance_s}
    return fit_and_write(rows, source, provenance, model, gpu, tensor_parallel, out)


def role_selector(selector: str, role: str | None, role_labels: str = "llm-d") -> str:
    """``selector`` narrowed to one prefill/decode pool's pods: with ``role`` (``prefill``, ``decode``),
    the matcher of that role under the labelling convention ``role_labels`` (``autoscaler.promql.ROLE_LABELLINGS``,
    the fleet file's ``prometheus.role_labels``) is added, e.g. ``model_name="m",dynamo_component="backend"``;
    without, ``selector`` as given. A prefill pod's steps and a decode pod's differ in kind, so a pool's
    profile is fitted from its own pods.

    Raises:
        ProfileError: an unknown role or convention.
    """
    from autoscaler.promql import ROLE_LABELLINGS, matchers

    if role_labels not in ROLE_LABELLINGS:
        raise ProfileError(f"--role-labels {role_labels}: one of {', '.join(ROLE_LABELLINGS)}")
    if role is None:
        return selector
    if role not in ("prefill", "decode"):
        raise ProfileError(f"--role {role}: prefill or decode")
    return matchers(selector, ROLE_LABELLINGS[role_labels].is_(role))


def from_prometheus(connect: Callable[[str], Any], url: str, selector: str, start: float, end: float, model: str,
                    gpu: str, tensor_parallel: int, out: Path, window_s: float = 60.0, resolution_s: float = 15.0,
                    pod_label: str = "pod", log: Callable[[str], None] = lambda _: None) -> FitResult:
    """A profile from a Prometheus range of live pods (module doc); ``connect(url)`` gives the client,
    once the options have passed.

    Raises:
        ProfileError: bad options, or data that cannot pin a coefficient.
        PrometheusError: a query failed or matched nothing.
    """
    from autoscaler.adapters.prometheus_profile import busy_windows

    check_target(model, gpu, tensor_parallel, out)
    check_prometheus_options(start, end, window_s, resolution_s)
    client = connect(url)
    url = redact(url)
    rows = busy_windows(client, selector, start, end, window_s, resolution_s, pod_label, log)
    provenance = {"kind": "prometheus", "url": url, "selector": selector, "start": start, "end": end,
                  "window_s": window_s, "resolution_s": resolution_s}
    return fit_and_write(rows, url, provenance, model, gpu, tensor_parallel, out)
