"""Per-request arrivals generated from a ServeGen client folder (alibaba/ServeGen ``data/<category>/<model>``).

ServeGen publishes no requests: each ``chunk-<client>-trace.csv`` gives, per 600 s window, one
client's mean rate (req/s), the CV of its inter-arrival times and the distribution fitted to them
(``Gamma`` or ``Weibull`` with two parameters, shape first). This module turns the windows that
overlap a span into requests, deterministically for a seed:

* Arrivals: per client and window, a renewal process with the fitted distribution's *shape* (the
  burstiness) and its scale set so that the mean gap is ``1 / (rate x rate_scale)`` (the window rate
  is the measurement; the fitted scales do not reproduce it for Weibull rows). Each window starts
  the process in equilibrium (``_first_arrival``); arrivals past the window end are dropped.
  ``rate_scale`` multiplies every client's rate, so the aggregate keeps its shape.
* Lengths, tokens: the ``dataset.json`` files that carry ServeGen's length distributions are not in
  the copied data (``SOURCE.md``). Given ``lengths`` (the (input, output) pairs of another trace),
  each request draws one pair with replacement, keeping their correlation; otherwise input and output
  are the lognormals of the embedded default workload (``synthetic``: Azure conv's median and mean,
  clipped to its maxima).
* Prefix sharing, 512-token blocks: each client is one application whose system prompt fills the
  first ``synthetic.SYSTEM_PROMPT_BLOCKS`` complete blocks of each of its requests (as in the
  embedded default); every other block is unique. Each request is its own workflow.

Arrival times are seconds from the span's start. Classes are assigned by the caller.
"""

from __future__ import annotations

import math
import re
from pathlib import Path

import numpy as np

from autoscaler.workload import synthetic as syn
from autoscaler.workload._common import read_lines, show, trace_error
from autoscaler.workload.classes import CLASS_STREAM, CRITICAL_FRACTION, PRIORITY_STREAM
from autoscaler.workload.shaping import MAX_REQUESTS
from autoscaler.workload.stream import CHUNK_REQUESTS, WorkloadStream
from autoscaler.workload.types import (
    BATCH,
    CRITICAL,
    INTERACTIVE,
    REQUEST_CLASSES,
    SHEDDABLE,
    STANDARD,
    Request,
    Workload,
)

WINDOW_S = 600.0  # ServeGen's window length (SOURCE.md)
CHUNK = re.compile(r"chunk-(\d+)-trace\.csv")
DISTRIBUTIONS = ("Gamma", "Weibull")
MIN_WEIBULL_SHAPE = 0.01  # Gamma(1 + 1/k) overflows a float below ~0.006


def is_servegen_dir(path: Path) -> bool:
    """True for a folder holding at least one ``chunk-<n>-trace.csv``."""
    return path.is_dir() and any(CHUNK.fullmatch(p.name) for p in path.iterdir())


def _windows(path: Path, start_s: float, end_s: float) -> list[tuple[float, float, str, float]]:
    """The rows of one client's trace that overlap [start_s, end_s): (window start, rate, dist, shape).

    Raises:
        TraceError: a row that does not have 6 fields, a non-numeric or negative number, or an unknown
            distribution on a row with a positive rate (file and line named).
    """
    p, lines = read_lines(path)
    rows = []
    for n, line in lines:
        fields = line.split(",")
        if len(fields) != 6:
            raise trace_error(p, n, f"expected 6 comma-separated fields, got {len(fields)}: {show(line, 60)}")
        try:
            t, rate, shape = float(fields[0]), float(fields[1]), float(fields[4])
        except ValueError:
            raise trace_error(p, n, f"non-numeric window start, rate or shape in {show(line, 60)}") from None
        if not (math.isfinite(t) and math.isfinite(rate) and rate >= 0):
            raise trace_error(p, n, f"window start and rate must be finite, rate >= 0: {show(line, 60)}")
        if t + WINDOW_S <= start_s or t >= end_s or rate == 0:
            continue
        dist = fields[3]
        if dist not in DISTRIBUTIONS or not (math.isfinite(shape) and shape > 0):
            raise trace_error(p, n, f"rate {rate:g} needs a distribution in {list(DISTRIBUTIONS)} with a "
                                    f"shape > 0, got {show(dist)} shape {show(fields[4])}")
        if dist == "Weibull" and shape < MIN_WEIBULL_SHAPE:
            raise trace_error(p, n, f"Weibull shape {shape:g} is below {MIN_WEIBULL_SHAPE} (its mean overflows; "
                                    "ServeGen's smallest is 0.15)")
        rows.append((t, rate, dist, shape))
    return rows


def _gaps(dist: str, shape: float, mean_gap: float, n: int, rng: np.random.Generator) -> np.ndarray:
    """``n`` inter-arrival gaps of ``dist`` with this shape, scaled to mean ``mean_gap`` seconds."""
    if dist == "Gamma":
        return rng.gamma(shape, mean_gap / shape, n)
    return rng.weibull(shape, n) * (mean_gap / math.gamma(1.0 + 1.0 / shape))


def _first_arrival(dist: str, shape: float, mean_gap: float, rng: np.random.Generator) -> float:
    """Seconds from a window's start to its first arrival, as in a renewal process already running.

    The gap that straddles an arbitrary instant is length-biased (density x f(x) / mean), and the
    instant falls uniformly inside it. Length-biased Gamma(k, s) is Gamma(k + 1, s); for Weibull(k, s),
    (X / s)^k is Gamma(1 + 1/k, 1)-distributed. Starting at a uniform fraction of an ordinary gap
    instead would overcount bursty clients (4% on ServeGen m-large's day 1).
    """
    if dist == "Gamma":
        straddling = rng.gamma(shape + 1.0, mean_gap / shape)
    else:
        straddling = rng.gamma(1.0 + 1.0 / shape) ** (1.0 / shape) * (mean_gap / math.gamma(1.0 + 1.0 / shape))
    return float(rng.uniform() * straddling)


def servegen_columns(path: str | Path, start_s: float, end_s: float, rate_scale: float = 1.0, seed: int = 0,
                     lengths: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The requests ``load_servegen`` makes, as columns: arrival times (seconds from ``start_s``,
    float64, sorted), client (int32), input and output tokens (int32); arguments and errors as its.
    Only the columns are kept past each step, so the peak is a few tens of bytes a request."""
    p = Path(path)
    if not (math.isfinite(start_s) and math.isfinite(end_s) and end_s > start_s):
        raise ValueError(f"the span needs start < end, got {start_s:g}..{end_s:g}")
    if not (math.isfinite(rate_scale) and rate_scale > 0):
        raise ValueError(f"--rate-scale must be a finite number > 0, got {rate_scale}")
    if lengths is not None and (np.ndim(lengths) != 2 or len(lengths) == 0 or np.shape(lengths)[1] != 2):
        raise ValueError("lengths must be a non-empty list of (input, output) token pairs")
    if not is_servegen_dir(p):
        raise trace_error(p, None, "not a ServeGen folder (no chunk-<n>-trace.csv in it)")
    chunks = sorted((int(m.group(1)), f) for f in p.iterdir() if (m := CHUNK.fullmatch(f.name)))
    rows = [(client, _windows(f, start_s, end_s)) for client, f in chunks]
    expected = sum(rate * rate_scale * (min(t + WINDOW_S, end_s) - max(t, start_s))
                   for _, windows in rows for t, rate, _, _ in windows)
    if expected > MAX_REQUESTS:
        raise ValueError(f"{p}: the span {start_s:g}..{end_s:g} s at rate x{rate_scale:g} holds ~{expected:,.0f} "
                         f"requests; at most {MAX_REQUESTS:,} are simulated in one run (a smaller --rate-scale "
                         "or --span)")
    rng = np.random.default_rng(seed)
    times: list[np.ndarray] = []
    clients: list[np.ndarray] = []
    for client, windows in rows:
        for t, rate, dist, shape in windows:
            mean_gap = 1.0 / (rate * rate_scale)
            n = int(WINDOW_S / mean_gap * 1.5 + 10 * math.sqrt(WINDOW_S / mean_gap) + 10)
            gaps = _gaps(dist, shape, mean_gap, n, rng)
            arr = t + _first_arrival(dist, shape, mean_gap, rng) + np.concatenate([[0.0], np.cumsum(gaps[1:])])
            while arr[-1] < t + WINDOW_S:
                arr = np.concatenate([arr, arr[-1] + np.cumsum(_gaps(dist, shape, mean_gap, n, rng))])
            arr = arr[(arr < t + WINDOW_S) & (arr >= start_s) & (arr < end_s)]
            times.append(arr)
            clients.append(np.full(len(arr), client, dtype=np.int32))
    if not times or not sum(len(a) for a in times):
        raise trace_error(p, None, f"no request in the span {start_s:g}..{end_s:g} s")
    arrivals = np.concatenate(times)
    del times
    order = np.argsort(arrivals, kind="stable")
    arrivals = arrivals[order] - start_s
    owner = np.concatenate(clients)[order]
    del clients, order

    if lengths is not None:
        pick = rng.integers(0, len(lengths), len(arrivals))
        pairs = np.asarray(lengths, dtype=int)
        ins, outs = pairs[pick, 0].astype(np.int32), pairs[pick, 1].astype(np.int32)
    else:
        in_mu, in_sigma = syn.lognormal_params(syn.INPUT_MEDIAN_TOKENS, syn.INPUT_MEAN_TOKENS)
        out_mu, out_sigma = syn.lognormal_params(syn.OUTPUT_MEDIAN_TOKENS, syn.OUTPUT_MEAN_TOKENS)
        ins = np.clip(np.rint(rng.lognormal(in_mu, in_sigma, len(arrivals))), 1,
                      syn.INPUT_MAX_TOKENS).astype(np.int32)
        outs = np.clip(np.rint(rng.lognormal(out_mu, out_sigma, len(arrivals))), 1,
                       syn.OUTPUT_MAX_TOKENS).astype(np.int32)
    return arrivals, owner, ins, outs


def servegen_stream(path: str | Path, start_s: float, end_s: float, rate_scale: float = 1.0, seed: int = 0,
                    lengths: np.ndarray | None = None, batch_fraction: float = 0.2,
                    critical_fraction: float = CRITICAL_FRACTION,
                    chunk_requests: int = CHUNK_REQUESTS) -> WorkloadStream:
    """The requests of ``assign_classes(load_servegen(...), batch_fraction, seed, critical_fraction)``
    as a ``WorkloadStream`` (``workload.stream``): the same requests, field for field, made a chunk at a
    time. Arguments and errors as ``load_servegen``'s and ``assign_classes``'s."""
    for name, x in (("batch_fraction", batch_fraction), ("critical_fraction", critical_fraction)):
        if not 0.0 <= x <= 1.0:
            raise ValueError(f"{name} must be in [0, 1], got {x}")
    arrivals, owner, ins, outs = servegen_columns(path, start_s, end_s, rate_scale, seed, lengths)
    n = len(arrivals)
    # assign_classes' draws: every request is its own workflow, so its unit is its index
    is_batch = np.random.default_rng((seed, CLASS_STREAM)).random(n) < batch_fraction
    is_critical = np.random.default_rng((seed, PRIORITY_STREAM)).random(n) < critical_fraction
    cls = np.where(is_batch, REQUEST_CLASSES.index(BATCH), REQUEST_CLASSES.index(INTERACTIVE)).astype(np.uint8)
    priority = np.where(is_batch, SHEDDABLE, np.where(is_critical, CRITICAL, STANDARD)).astype(np.uint8)
    del is_batch, is_critical
    system_blocks = syn.SYSTEM_PROMPT_BLOCKS
    meta: dict[str, float | str] = {"seed": seed, "start_s": start_s, "end_s": end_s, "rate_scale": rate_scale}
    return WorkloadStream(arrivals, ins, outs, cls, priority, owner, system_blocks,
                          (int(owner.max()) + 1) * system_blocks, syn.BLOCK_TOKENS, str(Path(path)), meta,
                          chunk_requests)


def load_servegen(path: str | Path, start_s: float, end_s: float, rate_scale: float = 1.0,
                  seed: int = 0, lengths: np.ndarray | None = None) -> Workload:
    """Requests of every client in ``path`` arriving in [start_s, end_s) of the ServeGen time axis.

    Args:
        path: a ServeGen model folder (``chunk-<n>-trace.csv`` files).
        start_s, end_s: the span, seconds from the start of the release (ServeGen day d is
            [86400 d, 86400 (d + 1))).
        rate_scale: multiplies every client's rate (> 0).
        seed: the same folder, span, scale and seed always give the same workload.
        lengths: (input, output) token pairs to draw from, shape (n, 2), n >= 1; None = the lognormals.

    Returns:
        a ``Workload`` (``block_tokens`` 512, arrivals from 0 = ``start_s``), ``source`` = the folder.

    Raises:
        TraceError: no chunk file in the folder, a malformed row, or no request in the span.
        ValueError: an empty span, a rate scale that is not a finite number > 0, or empty ``lengths``.
    """
    arrivals, owner, ins, outs = servegen_columns(path, start_s, end_s, rate_scale, seed, lengths)
    block, system_blocks = syn.BLOCK_TOKENS, syn.SYSTEM_PROMPT_BLOCKS
    next_hash = (int(owner.max()) + 1) * system_blocks  # ids below are the clients' system prompts
    requests = []
    for i, (a, c, n_in, n_out) in enumerate(zip(arrivals.tolist(), owner.tolist(), ins.tolist(), outs.tolist(),
                                                 strict=True)):
        blocks, system = -(-n_in // block), min(system_blocks, n_in // block)
        own = blocks - system
        hash_ids = tuple(c * system_blocks + k for k in range(system)) + tuple(range(next_hash, next_hash + own))
        next_hash += own
        requests.append(Request(arrival_s=a, input_tokens=n_in, output_tokens=n_out, hash_ids=hash_ids,
                                workflow_id=i, step=0))
    meta: dict[str, float | str] = {"seed": seed, "start_s": start_s, "end_s": end_s, "rate_scale": rate_scale}
    return Workload(requests, block_tokens=block, source=str(Path(path)), meta=meta)
