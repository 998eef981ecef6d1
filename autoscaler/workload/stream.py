"""A workload held as compact per-request columns, its ``Request`` objects made chunk by chunk (issue 33).

A ``Workload`` holds every request as a ``Request`` object with its tuple of prefix-hash ids from the
start: ~1.46 KB a request on ServeGen m-large with Mooncake's lengths (docs/benchmarks.md), 22 GiB for
a 14-day replay. A ``WorkloadStream`` holds what the requests are made from, ~22 bytes a request
(arrival time float64, prompt and output tokens and client int32, class and priority uint8), and
``chunks()`` makes their ``Request`` objects in arrival order, ``chunk_requests`` at a time, as the
simulator reaches them (``autoscaler.simulator.fleet.FleetSimulator``): a request's object lives from
its chunk's making until it ends.

The requests it makes are the ones ``materialise()`` gives in one list, field for field, so a run fed
the stream and one fed the materialised workload are the same run (``tests/simulator/test_stream.py``).

What the requests are, the ServeGen rule (``workload.servegen``, the only producer so far): request
``i`` (its ``rid``) is its own workflow (``workflow_id = i``, ``step = 0``); its prefix-hash ids are
its client's first ``min(system_blocks, input_tokens // block_tokens)`` system-prompt ids
(``client * system_blocks + k``), then one fresh id per remaining block of its prompt, counting up
from ``first_fresh_id`` across the requests in arrival order.

``columns`` gives the per-request arrays results read (``autoscaler.report``) for either kind.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import numpy as np

from autoscaler.workload.classes import unit_index
from autoscaler.workload.types import REQUEST_CLASSES, Request, Workload

CHUNK_REQUESTS = 4096
"""Requests a chunk holds by default: ~4 MB of objects at ServeGen m-large's ~1 KB a request, and a
few seconds of its arrivals at x0.06 (~13 req/s): small against a run, large enough that fetching a
chunk costs nothing measurable."""


@dataclass
class WorkloadStream:
    """Requests as columns in arrival order, made into ``Request`` objects a chunk at a time (module docstring).

    Attributes:
        arrival_s: arrival times, seconds from the start of the workload, sorted ascending (float64, n).
        input_tokens, output_tokens: prompt and output lengths, tokens (int32, n; >= 1).
        request_class: index in ``REQUEST_CLASSES`` (uint8, n).
        priority: index in ``types.PRIORITIES`` (uint8, n).
        client: the client (application) whose system prompt opens the request (int32, n; >= 0).
        system_blocks: complete blocks of a client's system prompt.
        first_fresh_id: the first hash id not a system prompt's (> every ``client * system_blocks + k``).
        block_tokens: tokens per prefix-hash block.
        source: human-readable origin (the trace folder).
        meta: as ``Workload.meta``.
        chunk_requests: requests per chunk (>= 1).
        produced: requests ``chunks()`` has made so far (all its iterators together).
        workflow, step: a trace file's requests (``workload.file_stream``): each request's workflow
            id and step (int64, n; -1: none); with them ``client`` is unused and the requests are
            made by the file rule (module docstring).
        unit: each request's unit (its workflow or itself), numbered by first appearance (int64, n;
            ``classes.unit_index``); None: every request its own.
        hashes: a trace file's: a new iterator over every request's hash ids in order (read from the
            file as it goes); None: no hash ids.

    Raises:
        ValueError: columns of different lengths, arrivals not sorted, or ``chunk_requests`` < 1.
    """

    arrival_s: np.ndarray
    input_tokens: np.ndarray
    output_tokens: np.ndarray
    request_class: np.ndarray
    priority: np.ndarray
    client: np.ndarray
    system_blocks: int
    first_fresh_id: int
    block_tokens: int = 512
    source: str = ""
    meta: dict[str, float | str] = field(default_factory=dict)
    chunk_requests: int = CHUNK_REQUESTS
    produced: int = 0
    workflow: np.ndarray | None = None
    step: np.ndarray | None = None
    unit: np.ndarray | None = None
    hashes: Callable[[], Iterator[tuple[int, ...]]] | None = None

    def __post_init__(self) -> None:
        n = len(self.arrival_s)
        cols = (self.input_tokens, self.output_tokens, self.request_class, self.priority, self.client)
        if any(len(c) != n for c in cols):
            raise ValueError(f"workload stream {self.source}: columns of different lengths "
                             f"{[n, *(len(c) for c in cols)]}")
        if n > 1 and bool(np.any(np.diff(self.arrival_s) < 0)):
            raise ValueError(f"workload stream {self.source}: arrival times not sorted")
        if self.chunk_requests < 1:
            raise ValueError(f"chunk_requests must be >= 1, got {self.chunk_requests}")

    @property
    def count(self) -> int:
        """Requests in the workload."""
        return len(self.arrival_s)

    @property
    def last_arrival_s(self) -> float:
        """Arrival time of the last request, seconds (0 for an empty workload)."""
        return float(self.arrival_s[-1]) if self.count else 0.0

    @property
    def duration_s(self) -> float:
        """Seconds from the first to the last arrival (0 for an empty workload)."""
        return float(self.arrival_s[-1] - self.arrival_s[0]) if self.count else 0.0

    def nbytes(self) -> int:
        """Bytes the columns hold."""
        return sum(c.nbytes for c in (self.arrival_s, self.input_tokens, self.output_tokens, self.request_class,
                                      self.priority, self.client))

    def chunks(self) -> Iterator[list[Request]]:
        """The requests in arrival order, ``chunk_requests`` at a time (the last chunk may hold fewer),
        each made when the iterator reaches it; ``rid`` is the request's index in the workload."""
        next_hash = self.first_fresh_id
        hashes = self.hashes() if self.hashes is not None else None
        for lo in range(0, self.count, self.chunk_requests):
            hi = min(lo + self.chunk_requests, self.count)
            if self.workflow is not None:
                out = self._make_file(lo, hi, hashes)
            else:
                out, next_hash = self._make(lo, hi, next_hash)
            self.produced += len(out)
            yield out

    def materialise(self) -> Workload:
        """Every request at once, as a ``Workload`` (the same requests ``chunks`` makes)."""
        if self.workflow is not None:
            reqs = self._make_file(0, self.count, self.hashes() if self.hashes is not None else None)
        else:
            reqs, _ = self._make(0, self.count, self.first_fresh_id)
        return Workload(reqs, block_tokens=self.block_tokens, source=self.source, meta=dict(self.meta))

    def _make_file(self, lo: int, hi: int, hashes: Iterator[tuple[int, ...]] | None) -> list[Request]:
        """A trace file's requests ``lo..hi-1``, their hash ids the next ``hi - lo`` of ``hashes``."""
        assert self.workflow is not None and self.step is not None
        classes = REQUEST_CLASSES
        rows = zip(self.arrival_s[lo:hi].tolist(), self.input_tokens[lo:hi].tolist(),
                   self.output_tokens[lo:hi].tolist(), self.request_class[lo:hi].tolist(),
                   self.priority[lo:hi].tolist(), self.workflow[lo:hi].tolist(), self.step[lo:hi].tolist(),
                   strict=True)
        out = []
        for rid, (a, n_in, n_out, cls, prio, wf, step) in enumerate(rows, lo):
            ids = next(hashes) if hashes is not None else ()
            out.append(Request(a, n_in, n_out, classes[cls], prio, ids, None if wf < 0 else wf,
                               None if step < 0 else step, rid))
        return out

    def _make(self, lo: int, hi: int, next_hash: int) -> tuple[list[Request], int]:
        """Requests ``lo..hi-1`` given the first fresh hash id of request ``lo``; and that of ``hi``."""
        block, system_blocks, classes = self.block_tokens, self.system_blocks, REQUEST_CLASSES
        out = []
        rows = zip(self.arrival_s[lo:hi].tolist(), self.input_tokens[lo:hi].tolist(),
                   self.output_tokens[lo:hi].tolist(), self.request_class[lo:hi].tolist(),
                   self.priority[lo:hi].tolist(), self.client[lo:hi].tolist(), strict=True)
        for rid, (a, n_in, n_out, cls, prio, c) in enumerate(rows, lo):
            blocks, system = -(-n_in // block), min(system_blocks, n_in // block)
            own = blocks - system
            hash_ids = tuple(c * system_blocks + k for k in range(system)) + tuple(range(next_hash, next_hash + own))
            next_hash += own
            out.append(Request(a, n_in, n_out, classes[cls], prio, hash_ids, rid, 0, rid))
        return out, next_hash


AnyWorkload = Workload | WorkloadStream
"""What the simulator replays: every request up front, or made as it goes."""


@dataclass
class Columns:
    """Per-request arrays of a workload, in arrival order (index = ``rid``).

    Attributes:
        arrival_s: arrival times, seconds (float64).
        input_tokens, output_tokens: lengths, tokens (int64).
        request_class: class names (object).
        priority: priority levels (int64).
        task: the request's unit, its workflow or itself, numbered by first appearance (int64;
            ``classes.unit_index``).
    """

    arrival_s: np.ndarray
    input_tokens: np.ndarray
    output_tokens: np.ndarray
    request_class: np.ndarray
    priority: np.ndarray
    task: np.ndarray


def columns(workload: AnyWorkload) -> Columns:
    """The per-request arrays of ``workload`` (a stream's without making its requests)."""
    if isinstance(workload, WorkloadStream):
        return Columns(workload.arrival_s.astype(float), workload.input_tokens.astype(np.int64),
                       workload.output_tokens.astype(np.int64),
                       np.array(REQUEST_CLASSES, dtype=object)[workload.request_class],
                       workload.priority.astype(np.int64),
                       np.arange(workload.count, dtype=np.int64) if workload.unit is None else workload.unit)
    reqs = workload.requests
    return Columns(np.array([r.arrival_s for r in reqs], dtype=float),
                   np.array([r.input_tokens for r in reqs], dtype=np.int64),
                   np.array([r.output_tokens for r in reqs], dtype=np.int64),
                   np.array([r.request_class for r in reqs], dtype=object),
                   np.array([r.priority for r in reqs], dtype=np.int64), unit_index(reqs))


def arrival_times(workload: AnyWorkload) -> np.ndarray:
    """Arrival times of ``workload``'s requests, seconds, in arrival order (float64; a stream's own
    column, not a copy, where it is float64 already: read it, never write it)."""
    if isinstance(workload, WorkloadStream):
        return np.asarray(workload.arrival_s, dtype=float)
    return np.array([r.arrival_s for r in workload.requests], dtype=float)


def count(workload: AnyWorkload) -> int:
    """Requests in ``workload``."""
    return workload.count if isinstance(workload, WorkloadStream) else len(workload.requests)
