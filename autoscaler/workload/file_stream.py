"""A trace file (Azure 2023 CSV, Mooncake JSONL) as a ``WorkloadStream``: read lazily, the same requests (issue 33).

``build_workload`` loads every row of a trace file as a ``Request`` and then groups workflows, crops
to the span, assigns classes and shapes the rate, each step a new list. ``file_stream`` makes the
same workload, field for field, as a ``workload.stream.WorkloadStream``: the file is read a line at a
time (``_common.iter_lines``, the rows checked by the loaders' own ``azure_rows``/``mooncake_rows``,
so a malformed line raises the same one-line error naming the file and line), and what is kept is
columns: arrival (float64), prompt and output tokens (int32), class and priority (uint8), workflow,
step and unit (int64) and, for Mooncake, the row's place in the file (int64): 43 bytes a request.
A Mooncake request's hash ids are read from the file again as the run reaches its chunk.

Each step is the whole path's rule applied to the columns (the sources are the functions named):

* arrivals: seconds from the earliest row (``load_azure``, ``load_mooncake``); spread over at most
  ``_common.MAX_SPAN_S`` (``check_span``: the same first-earliest and first-latest rows named);
* workflows: ``classes.workflow_steps`` over the whole file, the shared ids counted first
  (``classes.shared_of``), as ``group_workflows``; the trie it keeps lives while the file is read;
* span: ``build.crop``; classes and priorities: ``classes.assign_classes``' draws, one per unit;
* rate: ``shaping.shape``: thinning by unit for ``rate_scale < 1``, and any ``time_scale``; for
  ``rate_scale > 1`` the copies (``shaping.copy_plan``) with the same draws in the same order, each
  extra copy's arrivals ``|t * time_scale + shift[unit]|``, merged by a stable sort on arrival over
  the copies laid end to end (the order ``Workload``'s stable sort gives the whole path's list);
  workflow ids of copy k ``id + k * stride``; hash ids of copy k ``id + k * (max id + 1)`` except the
  shared ones (``classes.shared_ids`` of the span's requests, counted in a pass over the file),
  applied request by request as the run reads them (``_copied_hashes``).

Not streamed (``file_stream`` returns None, the caller builds the whole workload): rows out of arrival
order (``Workload`` sorts them; no shipped file has any).

Memory: the build holds the columns of every row of the file (~40 bytes a row) and, for Mooncake,
the shared-id counts, then the workflow trie (each grows with the file's hash ids); the run holds the
columns of the kept requests and the ``Request`` objects of the chunks at hand. A copied
(``rate_scale > 1``) stream holds those columns for every copy's request (~54 bytes a request with a
Mooncake file's row and copy numbers) and, while it runs, the hash ids of the file rows whose copies
are not all made yet: rows within about 2 x ``shaping.JITTER_S`` of the run's time.
"""

from __future__ import annotations

import json
import os
from array import array
from collections import Counter
from collections.abc import Callable, Iterator
from functools import partial
from itertools import chain
from pathlib import Path

import numpy as np

from autoscaler.errors import TraceError
from autoscaler.workload._common import MAX_SPAN_S, _lines, check_span, iter_lines, show, trace_error
from autoscaler.workload.azure import azure_rows
from autoscaler.workload.classes import (
    CLASS_STREAM,
    CRITICAL_FRACTION,
    PRIORITY_STREAM,
    SHAPE_STREAM,
    SHARED_MIN_FRACTION,
    shared_of,
    workflow_steps,
)
from autoscaler.workload.mooncake import BLOCK_TOKENS, mooncake_rows
from autoscaler.workload.shaping import JITTER_S, MAX_REQUESTS, copy_plan
from autoscaler.workload.stream import CHUNK_REQUESTS, WorkloadStream
from autoscaler.workload.types import CRITICAL, SHEDDABLE, STANDARD

_Hashes = Callable[[], Iterator[tuple[int, ...]]] | None
"""A new iterator over every request's hash ids in order (``WorkloadStream.hashes``); None: none."""


def _units(workflow: np.ndarray) -> np.ndarray:
    """``classes.unit_index`` of requests with these workflow ids (-1: none), in order (int64)."""
    seen: dict[tuple[str, int], int] = {}
    out = np.empty(len(workflow), dtype=np.int64)
    for i, wf in enumerate(workflow.tolist()):
        key = ("w", wf) if wf >= 0 else ("r", i)
        out[i] = seen.setdefault(key, len(seen))
    return out


def file_stream(
    trace: Path,
    trace_format: str | None = None,
    rate_scale: float = 1.0,
    time_scale: float = 1.0,
    seed: int = 0,
    batch_fraction: float = 0.2,
    span: tuple[float, float] | None = None,
    chunk_requests: int = CHUNK_REQUESTS,
) -> WorkloadStream | None:
    """``build_workload(trace, trace_format, rate_scale, time_scale, seed, batch_fraction, span)`` of a
    trace file as a ``WorkloadStream`` (module docstring), or None where it does not stream (rows out
    of order). Shaping arguments are the caller's to check (``build.check_shaping``).

    Raises:
        TraceError: a malformed trace (the whole path's message), an unknown format.
        ValueError: as ``build_workload``: no request in the span, too many requests, too long a span.
    """
    if trace_format not in (None, "azure", "mooncake"):
        raise trace_error(Path(trace), None, f"unknown trace format {trace_format!r} (expected one of "
                                             "['azure', 'mooncake'])")
    read = _read(trace, trace_format)
    if read is None:
        return None
    p, stamp, fmt, stamps, ins, outs, shared, clamped = read
    mooncake = fmt == "mooncake"
    origin = stamps[0]
    arrival = (stamps - origin) / 1000.0 if mooncake else stamps - origin
    workflow, step = _workflows(p, stamp, shared, len(stamps))
    kept = np.arange(len(stamps), dtype=np.int64)
    meta: dict[str, float | str] = {"format": fmt, "clamped_zero_output": clamped}
    if span is not None:
        start, end = span
        rel = arrival - arrival[0]
        inside = (start <= rel) & (rel < end)
        if not inside.any():
            raise ValueError(f"no request in --span {start:g}:{end:g} (the trace lasts "
                             f"{arrival[-1] - arrival[0]:.0f} s)")
        kept, arrival = kept[inside], rel[inside] - start
        meta["span_start_s"] = start
    workflow, step = workflow[kept], step[kept]
    unit = _units(workflow)
    n_units = int(unit.max()) + 1 if len(unit) else 0
    is_batch = np.random.default_rng((seed, CLASS_STREAM)).random(n_units) < batch_fraction
    is_critical = np.random.default_rng((seed, PRIORITY_STREAM)).random(n_units) < CRITICAL_FRACTION
    cls = is_batch[unit].astype(np.uint8)  # REQUEST_CLASSES: interactive 0, batch 1
    priority = np.where(is_batch[unit], SHEDDABLE, np.where(is_critical[unit], CRITICAL, STANDARD)).astype(np.uint8)
    hashes_of: _Hashes = None
    if rate_scale != 1.0 or time_scale != 1.0:
        if len(kept) * rate_scale > MAX_REQUESTS:
            raise ValueError(f"rate_scale {rate_scale:g} would make ~{len(kept) * rate_scale:,.0f} requests from "
                             f"{len(kept):,}; at most {MAX_REQUESTS:,} are simulated in one run")
        if rate_scale < 1:
            keep = (np.random.default_rng((seed, SHAPE_STREAM)).random(n_units) < rate_scale)[unit]
            kept, arrival, workflow, step, cls, priority = (x[keep] for x in (kept, arrival, workflow, step, cls,
                                                                               priority))
            unit = _units(workflow)
        if rate_scale > 1:
            copied = _copies(p, stamp if mooncake else None, kept, arrival * time_scale, workflow, unit, n_units,
                             rate_scale, seed)
            arrival, src, workflow, hashes_of = copied
            kept, step, cls, priority = kept[src], step[src], cls[src], priority[src]
            unit = _units(workflow)
        else:
            arrival = arrival * time_scale
        meta.update({"time_scale": time_scale, "rate_scale": rate_scale, "shape_seed": seed})
    if len(arrival) and arrival[-1] - arrival[0] > MAX_SPAN_S:
        raise ValueError(f"--time-scale {time_scale:g} stretches the workload to {arrival[-1] - arrival[0]:.3g} s; "
                         f"at most {MAX_SPAN_S:.3g} s (ten years) is simulated")
    if not len(arrival):
        raise ValueError(f"no requests left in the trace after --rate-scale {rate_scale:g}")
    if mooncake and rate_scale <= 1:
        hashes_of = partial(_hashes, p, stamp, kept)  # a partial, not a closure: it pickles (a worker process)
    n = len(arrival)
    return WorkloadStream(arrival, ins[kept].astype(np.int32), outs[kept].astype(np.int32), cls, priority,
                          np.broadcast_to(np.int32(0), (n,)), 0, 0, BLOCK_TOKENS if mooncake else 512, str(p), meta,
                          chunk_requests, workflow=workflow, step=step, unit=unit, hashes=hashes_of)


def _copies(p: Path, stamp: os.stat_result | None, rows: np.ndarray, arrival: np.ndarray, workflow: np.ndarray,
            unit: np.ndarray, n_units: int, rate_scale: float,
            seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, _Hashes]:
    """``shaping.shape``'s copies (``rate_scale > 1``) of the span's requests, as columns.

    Args:
        p, stamp: the file and its stat; ``stamp`` None: no hash ids (an Azure file).
        rows: each span request's data row in the file (0-based, ascending; int64, n).
        arrival: the span's arrivals already multiplied by ``time_scale``, seconds (float64, n).
        workflow, unit: the span's workflow ids (-1: none) and units (int64, n); ``n_units`` units.

    Returns:
        (arrivals sorted, each request's span index, its workflow id (-1: none),
        a new iterator over its hash ids in that order (None without hash ids)), the copies' requests
        in ``Workload``'s order (module docstring).
    """
    rng = np.random.default_rng((seed, SHAPE_STREAM))
    parts: list[tuple[np.ndarray, np.ndarray]] = []
    for k, keep_p in copy_plan(rate_scale):
        keep = rng.random(n_units) < keep_p if keep_p < 1 else np.ones(n_units, dtype=bool)
        shift = rng.uniform(-JITTER_S, JITTER_S, n_units) if k > 0 else np.zeros(n_units)
        idx = np.flatnonzero(keep[unit])
        parts.append((idx, arrival[idx] if k == 0 else np.abs(arrival[idx] + shift[unit[idx]])))
    copy = np.concatenate([np.full(len(idx), k, dtype=np.int32) for k, (idx, _) in enumerate(parts)])
    times = np.concatenate([t for _, t in parts])
    order = np.argsort(times, kind="stable")  # the whole path's stable sort of the copies end to end
    src = np.concatenate([idx for idx, _ in parts])[order]
    copy, times = copy[order], times[order]
    del parts
    wf = workflow[src]
    wf_stride = int(workflow.max()) + 1 if len(workflow) and workflow.max() >= 0 else 0
    wf = np.where(wf >= 0, wf + copy.astype(np.int64) * wf_stride, -1)
    if stamp is None:
        return times, src, wf, None
    counts: Counter[int] = Counter()
    top = -1
    for ids in _hashes(p, stamp, rows):
        counts.update(set(ids))
        if ids:
            top = max(top, max(ids))
    shared = shared_of(counts, len(rows), SHARED_MIN_FRACTION)
    del counts
    id_stride = top + 1
    return times, src, wf, partial(_copied_hashes, p, stamp, rows, src, copy, shared, id_stride)


def _copied_hashes(p: Path, stamp: os.stat_result, rows: np.ndarray, src: np.ndarray, copy: np.ndarray,
                   shared: set[int], id_stride: int) -> Iterator[tuple[int, ...]]:
    """The hash ids of each copied request (span index ``src``, copy ``copy``) in order: its row's,
    each id not in ``shared`` moved by ``copy * id_stride``. The file is read forward once; a row's
    ids are kept from their reading until its last copy is made."""
    left = np.bincount(src, minlength=len(rows)).tolist()  # copies of each span row still to make
    held: dict[int, tuple[int, ...]] = {}
    read = iter(_hashes(p, stamp, rows))
    n_read = 0
    for lo in range(0, len(src), CHUNK_REQUESTS):  # a block's numbers as Python ints at a time, not the run's
        for s, k in zip(src[lo:lo + CHUNK_REQUESTS].tolist(), copy[lo:lo + CHUNK_REQUESTS].tolist(), strict=True):
            while n_read <= s:
                ids = next(read)
                if left[n_read]:
                    held[n_read] = ids
                n_read += 1
            ids = held[s]
            left[s] -= 1
            if not left[s]:
                del held[s]
            yield ids if k == 0 else tuple(h if h in shared else h + k * id_stride for h in ids)


def _workflows(p: Path, stamp: os.stat_result, shared: set[int] | None, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Workflow id and step of each of the ``n`` rows of Mooncake file ``p`` (int64; -1: none, and all
    -1 without hash ids: ``shared`` None), ``group_workflows``' rule, the file read again; ``shared``
    as ``_read``'s."""
    workflow = np.full(n, -1, dtype=np.int64)
    step = np.full(n, -1, dtype=np.int64)
    if shared is not None:
        hash_rows = ((i, h) for (_, _, i, _, _, h) in mooncake_rows(p, _same_lines(p, stamp)))
        for k, (wf, st) in enumerate(workflow_steps(hash_rows, shared, BLOCK_TOKENS)):
            if wf is not None:
                workflow[k], step[k] = wf, st if st is not None else -1
    return workflow, step


_Read = tuple[Path, os.stat_result, str, np.ndarray, np.ndarray, np.ndarray, set[int] | None, int]


def _read(trace: Path, trace_format: str | None) -> _Read | None:
    """The first pass over a trace file: (path, its stat, format, timestamps (float64, the file's
    unit), prompt and output tokens (int64), the shared hash ids (``classes.shared_of``; None: no
    row has any), outputs clamped); None when its rows are not in arrival order. The id counts live
    only here. Raises the whole path's ``TraceError``."""
    p, lines = iter_lines(trace)
    first = next(lines)
    fmt = trace_format or _detect(p, first)
    lines = chain([first], lines)
    stamp = os.stat(p)
    mooncake = fmt == "mooncake"
    times, ins, outs = array("d"), array("q"), array("q")
    counts: Counter[int] = Counter()
    clamped = 0
    lo_t = hi_t = 0.0
    lo_line = hi_line = 0
    ordered = True
    rows = (mooncake_rows(p, lines) if mooncake
            else ((n, t, i, o, c, ()) for n, t, i, o, c in azure_rows(p, lines)))
    for n, t, i, o, c, hashes in rows:
        clamped += c
        t_s = t / 1000.0 if mooncake else t  # check_span's times: seconds
        if not times:
            lo_t = hi_t = t_s
            lo_line = hi_line = n
        elif t_s < lo_t:
            lo_t, lo_line = t_s, n
        elif t_s > hi_t:
            hi_t, hi_line = t_s, n
        if times and t < times[-1]:
            ordered = False
        times.append(t)
        ins.append(i)
        outs.append(o)
        if hashes:
            counts.update(set(hashes))
    check_span(p, [lo_t, hi_t], [lo_line, hi_line])
    if not ordered:
        return None
    return (p, stamp, fmt, np.frombuffer(times, dtype=np.float64), np.frombuffer(ins, dtype=np.int64),
            np.frombuffer(outs, dtype=np.int64),
            shared_of(counts, len(times), SHARED_MIN_FRACTION) if counts else None, clamped)


def _detect(p: Path, first: tuple[int, str]) -> str:
    """``loader.detect_format`` from the file's first non-blank line (its number, its text)."""
    n, text = first[0], first[1].strip()
    if text.startswith("{"):
        return "mooncake"
    if "," in text:
        return "azure"
    raise trace_error(p, n, f"unrecognised trace format: first line {show(text, 60)} is neither a CSV header nor JSON")


def _same_lines(p: Path, stamp: os.stat_result) -> Iterator[tuple[int, str]]:
    """``p``'s non-blank lines again, once it is checked unchanged since ``stamp`` (size, mtime)."""
    now = os.stat(p)
    if (now.st_size, now.st_mtime_ns) != (stamp.st_size, stamp.st_mtime_ns):
        raise TraceError(f"{p}: changed while the run was reading it (streamed: it is read again as the run goes)")
    return _lines(p)


def _hashes(p: Path, stamp: os.stat_result, rows: np.ndarray) -> Iterator[tuple[int, ...]]:
    """The hash ids of the Mooncake file's data rows ``rows`` (0-based, ascending), read as needed."""
    wanted = iter(rows.tolist())
    nxt = next(wanted, None)
    for k, (_, text) in enumerate(_same_lines(p, stamp)):
        if k == nxt:
            yield tuple(json.loads(text)["hash_ids"])
            nxt = next(wanted, None)
            if nxt is None:
                return
