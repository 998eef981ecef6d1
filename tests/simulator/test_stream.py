"""A streamed workload (``autoscaler.workload.stream``, issue 33: a 14-day replay in bounded memory).

The reference is the same workload made whole: ``servegen_stream`` must make the requests
``assign_classes(load_servegen(...))`` makes, field for field, and a run fed the stream (its requests
made a chunk at a time as arrivals reach them) must give the same bits as the run fed the whole
``Workload``: per-request outcomes, results, and under a PID loop every tick's decision. The stream
is read at most one chunk ahead of the last arrival.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest
from support.overload import overloaded_run, same_outcomes

from autoscaler.report import summarize, timeline_rows
from autoscaler.simulate import SimulationRun, run_simulation
from autoscaler.simulator.engine import COMPLETED, FAILED, REJECTED, SHED
from autoscaler.simulator.fleet import FleetSimulator
from autoscaler.workload.build import build_stream, build_workload
from autoscaler.workload.classes import assign_classes
from autoscaler.workload.servegen import load_servegen, servegen_stream
from autoscaler.workload.stream import WorkloadStream
from autoscaler.workload.types import BATCH, INTERACTIVE

LENGTHS = np.array([(300, 40), (1500, 200), (9000, 60), (40, 900), (2600, 5)])


def write_client(folder: Path, client: int, rows: list[tuple[float, float, str, float]]) -> None:
    """``chunk-<client>-trace.csv``: (window start, rate, distribution, shape) rows, cv and scale filled in."""
    lines = [f"{t:g},{r:g},1.0,{d},{k:g},1.0" if r > 0 else f"{t:g},0,0,,0,0" for t, r, d, k in rows]
    (folder / f"chunk-{client}-trace.csv").write_text("\n".join(lines) + "\n")


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    """Two clients (ids 0 and 3) over two windows: bursty Gamma, then Weibull; the rate rises 10x."""
    write_client(tmp_path, 0, [(0, 4.0, "Gamma", 0.5), (600, 40.0, "Gamma", 0.5)])
    write_client(tmp_path, 3, [(0, 1.0, "Weibull", 0.7), (600, 2.0, "Weibull", 0.7)])
    return tmp_path


def fields(reqs: list) -> list[tuple]:
    return [dataclasses.astuple(r) for r in reqs]


@pytest.mark.parametrize("lengths", [None, LENGTHS])
def test_stream_makes_the_requests_of_the_whole_workload(folder: Path, lengths: np.ndarray | None) -> None:
    whole = assign_classes(load_servegen(folder, 300, 900, rate_scale=0.5, seed=7, lengths=lengths),
                           batch_fraction=0.3, seed=7)
    stream = servegen_stream(folder, 300, 900, rate_scale=0.5, seed=7, lengths=lengths, batch_fraction=0.3,
                             chunk_requests=100)
    chunks = list(stream.chunks())
    assert len(whole.requests) == stream.count > 1000 and stream.produced == stream.count
    assert [len(c) for c in chunks[:-1]] == [100] * (len(chunks) - 1) and 1 <= len(chunks[-1]) <= 100
    made = [r for c in chunks for r in c]
    assert fields(made) == fields(whole.requests)
    assert fields(stream.materialise().requests) == fields(whole.requests)
    assert [r.rid for r in made] == list(range(stream.count))
    # the classes drawn are the ones assign_classes draws: both kinds present, a batch one sheddable
    assert {r.request_class for r in made} == {BATCH, INTERACTIVE}
    assert all((r.priority == 0) == (r.request_class == BATCH) for r in made)
    assert stream.last_arrival_s == whole.requests[-1].arrival_s
    assert stream.nbytes() == 22 * stream.count  # float64 + 3 x int32 + 2 x uint8 a request


def test_stream_refuses_bad_columns() -> None:
    a = np.array([1.0, 0.5])
    ones = np.ones(2, dtype=np.int32)
    with pytest.raises(ValueError, match="arrival times not sorted"):
        WorkloadStream(a, ones, ones, ones.astype(np.uint8), ones.astype(np.uint8), ones, 2, 8)
    with pytest.raises(ValueError, match="columns of different lengths"):
        WorkloadStream(np.sort(a), ones[:1], ones, ones.astype(np.uint8), ones.astype(np.uint8), ones, 2, 8)


def stream_and_whole(folder: Path, chunk: int) -> tuple[WorkloadStream, WorkloadStream]:
    """The same stream twice (one to run as a stream, one to make whole): a run reads its own."""
    def make() -> WorkloadStream:
        return servegen_stream(folder, 400, 700, rate_scale=0.1, seed=3, lengths=LENGTHS, chunk_requests=chunk)
    return make(), make()


def simulate(make_fleet, workload, t_end: float = 10_000.0) -> FleetSimulator:
    """One replica, overloaded (``overloaded_run``, as ``test_lean_requests``), lean requests."""
    return overloaded_run(make_fleet, workload, keep=False, t_end=t_end)


def test_streamed_run_is_the_whole_workloads_run(make_fleet, folder: Path) -> None:
    stream, twin = stream_and_whole(folder, 7)
    streamed, whole = simulate(make_fleet, stream), simulate(make_fleet, twin.materialise())
    assert streamed.done and whole.done and streamed.request_count == whole.request_count > 200
    status = list(whole.outcome_arrays()[0])
    # the run exercises completions, failures (timeouts, the crash), sheds, rejections and retries
    assert {COMPLETED, FAILED, SHED, REJECTED} <= set(status) and whole.retries > 0
    same_outcomes(streamed, whole)
    assert streamed.retries == whole.retries and streamed.last_end_s() == whole.last_end_s()
    ra = summarize(SimulationRun(streamed, [], "hand", 100.0, 1.0))
    rb = summarize(SimulationRun(whole, [], "hand", 100.0, 1.0))
    assert ra == rb


def test_streamed_run_stopped_midway_fails_the_unsent_alike(make_fleet, folder: Path) -> None:
    stream, twin = stream_and_whole(folder, 7)
    streamed, whole = simulate(make_fleet, stream, t_end=12.0), simulate(make_fleet, twin.materialise(), t_end=12.0)
    assert streamed.arrived < streamed.request_count
    assert streamed.fail_open() == whole.fail_open() > 0
    same_outcomes(streamed, whole)
    assert stream.produced == stream.count  # fail_open made the rest


def test_stream_is_read_at_most_one_chunk_ahead(make_fleet, folder: Path) -> None:
    chunk = 16
    stream, _ = stream_and_whole(folder, chunk)
    cfg = make_fleet(2)
    sim = FleetSimulator(cfg, stream, keep_requests=False)
    assert stream.produced == chunk and sim.arrived == 0  # the first chunk, to know the first arrival
    ahead = []
    for t in np.arange(0.0, stream.last_arrival_s + 1.0, 0.25):
        sim.run_until(float(t))
        ahead.append(stream.produced - sim.arrived)  # requests made, not yet arrived
        assert 0 <= ahead[-1] <= chunk
    assert sim.arrived == stream.produced == stream.count > 10 * chunk
    assert max(ahead) == chunk and min(ahead) == 0
    with pytest.raises(ValueError, match="keep_requests=False"):
        FleetSimulator(cfg, stream_and_whole(folder, chunk)[0], keep_requests=True)


def test_streamed_run_under_the_pid_is_the_whole_workloads_run(make_fleet, folder: Path) -> None:
    # the rate rises 10x at 600 s: the PID scales one replica up to several and the ticks decide alike
    def make() -> WorkloadStream:
        return servegen_stream(folder, 300, 900, seed=1, chunk_requests=64)
    cfg = make_fleet(1, min_replicas=1, max_replicas=8)
    stream = make()
    a = run_simulation(cfg, stream, "pid", keep_requests=False)
    b = run_simulation(cfg, make().materialise(), "pid", keep_requests=False)
    applied = [[tuple(st.applied.items()) for st in t.services.values()] for t in a.ticks]
    assert applied == [[tuple(st.applied.items()) for st in t.services.values()] for t in b.ticks]
    assert [t.time_s for t in a.ticks] == [t.time_s for t in b.ticks] and len(a.ticks) > 30
    assert max(n for row in applied for ((_, n),) in row) >= 3 and a.sim.scale_events > 0
    same_outcomes(a.sim, b.sim)
    ra, rb = summarize(a), summarize(b)
    for r in (ra, rb):
        del r["wall_s"], r["simulated_requests_per_s"]
    assert ra == rb and a.end_s == b.end_s
    assert timeline_rows(a) == timeline_rows(b)
    assert stream.produced == stream.count > 10_000


def test_build_stream_is_build_workload(folder: Path, tmp_path_factory: pytest.TempPathFactory) -> None:
    lengths = tmp_path_factory.mktemp("lengths") / "pairs.jsonl"
    lengths.write_text("".join(f'{{"timestamp": {i}, "input_length": {a}, "output_length": {b}, "hash_ids": []}}\n'
                               for i, (a, b) in enumerate(LENGTHS)))
    for given in (None, lengths):
        whole = build_workload(folder, None, 0.5, 1.0, 5, 0.25, (200.0, 800.0), given)
        stream = build_stream(folder, 0.5, 5, 0.25, (200.0, 800.0), given, chunk_requests=50)
        assert fields([r for c in stream.chunks() for r in c]) == fields(whole.requests)
        assert stream.source == whole.source and stream.meta == whole.meta
    copied = build_stream(lengths, 2.0)  # a trace file streams copied too (test_file_stream_copies.py)
    assert fields([r for c in copied.chunks() for r in c]) == fields(build_workload(lengths, None, 2.0).requests)
