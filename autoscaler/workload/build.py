"""The workload of a run: a trace (or the embedded synthetic day) with classes, workflows and rate shaping."""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path

import numpy as np

from autoscaler.errors import TraceError
from autoscaler.workload._common import MAX_SPAN_S
from autoscaler.workload.classes import assign_classes, group_workflows
from autoscaler.workload.file_stream import file_stream
from autoscaler.workload.loader import load_trace
from autoscaler.workload.servegen import is_servegen_dir, load_servegen, servegen_stream
from autoscaler.workload.shaping import shape
from autoscaler.workload.stream import CHUNK_REQUESTS, AnyWorkload, WorkloadStream
from autoscaler.workload.synthetic import synthetic_workload
from autoscaler.workload.types import Workload

# The embedded default workload's mean rate, about 18 x Azure conv's measured 5.53 req/s, so that the
# example fleet scales over ~4-10 replicas (``models.capacity``).
EMBEDDED_RATE_RPS = 100.0
# ... and its rate curve runs at the speed of a real day (one hour of it, from the daily trough), not
# a day compressed into the hour: 24x faster swings than real traffic would make every reactive
# policy with 90-300 s replica starts look worse than it is.
EMBEDDED_DAY_S = 86400.0
DEFAULT_BATCH_FRACTION = 0.2  # share of trace requests (workflows) in the batch class, an assumption
SERVEGEN_DEFAULT_SPAN = (0.0, 86400.0)  # a ServeGen folder without a span: its first day


def parse_span(text: str) -> tuple[float, float]:
    """``START:END`` in seconds -> (start, end).

    Raises:
        ValueError: not two numbers, not finite, start < 0 or end <= start.
    """
    parts = text.split(":")
    if "_" in text:  # float() reads 1_0 as 10: a typo here
        parts = []
    try:
        start, end = (float(x) for x in parts) if len(parts) == 2 else (math.nan, math.nan)
    except ValueError:
        start = end = math.nan
    if not (math.isfinite(start) and math.isfinite(end) and 0 <= start < end):
        raise ValueError(f"--span {text!r}: expected START:END in seconds with 0 <= START < END")
    return start, end


def check_shaping(rate_scale: float, time_scale: float, batch_fraction: float) -> None:
    """Check the shaping options before any trace is read or request drawn (``--rate-scale 0`` used to
    be refused only after the whole trace was loaded, 11-18 s on the shared traces).

    Raises:
        ValueError: ``rate_scale`` or ``time_scale`` not a finite number > 0, or ``batch_fraction``
            outside [0, 1] (NaN included); the message names the command-line option.
    """
    for option, value in (("--rate-scale", rate_scale), ("--time-scale", time_scale)):
        if not (math.isfinite(value) and value > 0):
            raise ValueError(f"{option} must be a finite number > 0, got {value:g}")
    if not 0 <= batch_fraction <= 1:  # False for NaN too
        raise ValueError(f"--batch-fraction must be in [0, 1], got {batch_fraction:g}")


def crop(wl: Workload, start_s: float, end_s: float) -> Workload:
    """The requests arriving in [start_s, end_s) seconds after the first one, times from ``start_s``.

    Raises:
        ValueError: no request in the span.
    """
    t0 = wl.requests[0].arrival_s if wl.requests else 0.0
    kept = [replace(r, arrival_s=r.arrival_s - t0 - start_s) for r in wl.requests
            if start_s <= r.arrival_s - t0 < end_s]
    if not kept:
        raise ValueError(f"no request in --span {start_s:g}:{end_s:g} (the trace lasts {wl.duration_s:.0f} s)")
    return Workload(kept, block_tokens=wl.block_tokens, source=wl.source, meta={**wl.meta, "span_start_s": start_s})


def build_workload(
    trace: Path | None,
    trace_format: str | None = None,
    rate_scale: float = 1.0,
    time_scale: float = 1.0,
    seed: int = 0,
    batch_fraction: float = DEFAULT_BATCH_FRACTION,
    span: tuple[float, float] | None = None,
    lengths_from: Path | None = None,
) -> Workload:
    """Load (or synthesise) the workload, assign classes and workflows, and shape its rate.

    Args:
        trace: an Azure CSV, a Mooncake JSONL or a ServeGen model folder (``workload.servegen``);
            None for the embedded synthetic workload.
        trace_format: ``azure`` | ``mooncake`` | ``servegen`` (a ServeGen folder); None detects it.
        rate_scale: thin (< 1) or superpose jittered copies (> 1); for a ServeGen folder, multiplies
            every client's rate before the arrivals are drawn.
        time_scale: multiply arrival times.
        seed: for class assignment, shaping and the synthetic workload.
        batch_fraction: share of workflows in the batch class.
        span: (start, end) seconds: the requests of a file trace (or the embedded workload) arriving in
            that span after its first request, or the span of the ServeGen time axis to generate
            (default: its first day); arrival times then count from the span's start.
        lengths_from: a trace file whose (input, output) token pairs a ServeGen folder's requests
            draw from (``workload.servegen``); only with a ServeGen folder.

    Raises:
        TraceError: a malformed trace, or a folder that is not a ServeGen one.
        ValueError: bad shaping arguments (``check_shaping``, before anything is read), a
            ``time_scale`` stretching the workload beyond ``MAX_SPAN_S``, no request left after
            shaping, or ``lengths_from`` without a ServeGen folder.
    """
    check_shaping(rate_scale, time_scale, batch_fraction)
    servegen = trace is not None and is_servegen_dir(trace)
    if trace is not None and trace.is_dir() and not servegen:
        raise TraceError(f"{trace}: a folder, but not a ServeGen one (no chunk-<n>-trace.csv in it); "
                         "--trace takes a trace file or a ServeGen model folder")
    if trace_format == "servegen" and not servegen:
        raise ValueError(f"--trace-format servegen: {trace} is not a ServeGen model folder (no chunk-<n>-trace.csv "
                         "in a folder)" if trace is not None else "--trace-format servegen needs --trace FOLDER")
    if servegen and trace_format not in (None, "servegen"):
        raise ValueError(f"--trace-format {trace_format}: {trace} is a ServeGen folder (--trace-format servegen, "
                         "or leave it out)")
    if lengths_from is not None and not servegen:
        raise ValueError("--lengths-from needs --trace to be a ServeGen folder")
    if trace is None:
        wl = synthetic_workload(seed=seed, mean_rate_rps=EMBEDDED_RATE_RPS, day_s=EMBEDDED_DAY_S,
                                batch_fraction=batch_fraction)
        if span is not None:
            wl = crop(wl, *span)
    elif servegen:
        pairs = None
        if lengths_from is not None:
            pairs = np.array([(r.input_tokens, r.output_tokens) for r in load_trace(lengths_from).requests])
        wl = load_servegen(trace, *(span or SERVEGEN_DEFAULT_SPAN), rate_scale=rate_scale, seed=seed, lengths=pairs)
        wl = assign_classes(wl, batch_fraction=batch_fraction, seed=seed)
    else:
        wl = group_workflows(load_trace(trace, trace_format))
        if span is not None:
            wl = crop(wl, *span)
        wl = assign_classes(wl, batch_fraction=batch_fraction, seed=seed)
    thin_or_copy = 1.0 if servegen else rate_scale  # a ServeGen folder's clients were scaled above
    if thin_or_copy != 1.0 or time_scale != 1.0:
        wl = shape(wl, time_scale=time_scale, rate_scale=thin_or_copy, seed=seed)
    if wl.duration_s > MAX_SPAN_S:  # a file trace is checked row by row; --time-scale may still stretch it
        raise ValueError(f"--time-scale {time_scale:g} stretches the workload to {wl.duration_s:.3g} s; at most "
                         f"{MAX_SPAN_S:.3g} s (ten years) is simulated")
    if not wl.requests:
        where = "the trace" if trace is not None else "the synthetic workload"
        raise ValueError(f"no requests left in {where} after --rate-scale {rate_scale:g}")
    return wl


def build_stream(
    trace: Path,
    rate_scale: float = 1.0,
    seed: int = 0,
    batch_fraction: float = DEFAULT_BATCH_FRACTION,
    span: tuple[float, float] | None = None,
    lengths_from: Path | None = None,
    chunk_requests: int = CHUNK_REQUESTS,
    trace_format: str | None = None,
    time_scale: float = 1.0,
) -> WorkloadStream:
    """The workload ``build_workload(trace, trace_format, rate_scale, time_scale, seed, batch_fraction,
    span, lengths_from)`` builds, as a ``WorkloadStream`` (``workload.stream``): the same requests, field
    for field, kept as columns and made ``chunk_requests`` at a time as a run reaches them. A ServeGen
    folder streams with any arguments but ``time_scale``; a trace file (``workload.file_stream``, read a
    line at a time) with any ``rate_scale`` and ``time_scale`` (copies for ``rate_scale > 1`` made as
    columns) when its rows are in arrival order.

    Raises:
        TraceError: a malformed trace (the message ``build_workload`` gives).
        ValueError: as ``build_workload``; or a trace file that does not stream (rows out of order).
    """
    wl = build_any(trace, trace_format, rate_scale, time_scale, seed, batch_fraction, span, lengths_from,
                   chunk_requests)
    if not isinstance(wl, WorkloadStream):
        raise ValueError(f"{trace}: does not stream (its rows are not in arrival order); build it whole "
                         "(build_workload)")
    return wl


def build_any(
    trace: Path | None,
    trace_format: str | None = None,
    rate_scale: float = 1.0,
    time_scale: float = 1.0,
    seed: int = 0,
    batch_fraction: float = DEFAULT_BATCH_FRACTION,
    span: tuple[float, float] | None = None,
    lengths_from: Path | None = None,
    chunk_requests: int = CHUNK_REQUESTS,
) -> AnyWorkload:
    """``build_workload``'s workload (same arguments), streamed where it streams bit for bit
    (``build_stream``'s cases), else whole: the embedded workload, a ServeGen folder with
    ``time_scale != 1``, a trace file with rows out of order.

    Raises:
        TraceError, ValueError: as ``build_workload``.
    """
    check_shaping(rate_scale, time_scale, batch_fraction)
    if trace is not None and is_servegen_dir(trace):
        if time_scale != 1.0 or trace_format not in (None, "servegen"):
            return build_workload(trace, trace_format, rate_scale, time_scale, seed, batch_fraction, span,
                                  lengths_from)
        pairs = None
        if lengths_from is not None:
            pairs = np.array([(r.input_tokens, r.output_tokens) for r in load_trace(lengths_from).requests])
        return servegen_stream(trace, *(span or SERVEGEN_DEFAULT_SPAN), rate_scale=rate_scale, seed=seed,
                               lengths=pairs, batch_fraction=batch_fraction, chunk_requests=chunk_requests)
    if trace is None or trace.is_dir() or trace_format == "servegen" or lengths_from is not None:
        return build_workload(trace, trace_format, rate_scale, time_scale, seed, batch_fraction, span,
                              lengths_from)  # refuses what it refuses, or the embedded workload
    stream = file_stream(trace, trace_format, rate_scale, time_scale, seed, batch_fraction, span, chunk_requests)
    if stream is None:
        return build_workload(trace, trace_format, rate_scale, time_scale, seed, batch_fraction, span,
                              lengths_from)
    return stream
