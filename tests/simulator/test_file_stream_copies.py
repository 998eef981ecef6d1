"""A trace file streamed with ``--rate-scale > 1`` (``file_stream._copies``, issue 33): the copies of the
whole path (``shaping.shape``), made as columns, field for field and bit for bit.

References: the whole path (``build_workload``) on hand-made and shipped files; and the arrivals of
two tiny Azure files by hand from ``shaping``'s documented rule (the original, then copy k's units
shifted by ``uniform(-5, 5)`` drawn in plan order from ``default_rng((seed, SHAPE_STREAM))``, a time
below 0 reflected, the copies laid end to end and stably sorted).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import pickle
from pathlib import Path

import numpy as np
import pytest

from autoscaler.config.loading import load_config
from autoscaler.errors import TraceError
from autoscaler.report import summarize
from autoscaler.simulate import run_simulation
from autoscaler.workload.build import build_any, build_stream, build_workload
from autoscaler.workload.classes import SHAPE_STREAM
from autoscaler.workload.stream import WorkloadStream, columns

ROOT = Path(__file__).resolve().parents[2]
AZURE = ROOT.parent / "shared" / "data" / "azure-llm-2023" / "AzureLLMInferenceTrace_conv.csv"


def write_azure(path: Path, seconds: list[float]) -> Path:
    rows = [f"2023-11-16 18:{int(40 + s // 60):02d}:{s % 60:09.6f},{100 + i},{10 + i}" for i, s in enumerate(seconds)]
    path.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n" + "\n".join(rows) + "\n")
    return path


def made(stream: WorkloadStream) -> list:
    return [r for c in stream.chunks() for r in c]


def assert_same_as_whole(trace: Path, chunk: int, **kw) -> WorkloadStream:
    """The streamed copies are ``build_workload``'s: every field of every request, the meta, and the
    per-request columns, arrivals as the same float64 bytes."""
    whole = build_workload(trace, **kw)
    stream = build_stream(trace, chunk_requests=chunk, **kw)
    assert [dataclasses.astuple(r) for r in made(stream)] == [dataclasses.astuple(r) for r in whole.requests]
    assert stream.meta == whole.meta and stream.meta["rate_scale"] == kw["rate_scale"]
    a, b = columns(stream), columns(whole)
    assert a.arrival_s.tobytes() == b.arrival_s.tobytes()
    for f in dataclasses.fields(a):
        assert np.array_equal(getattr(a, f.name), getattr(b, f.name)), f.name
    return stream


def test_copied_arrivals_by_hand(tmp_path: Path) -> None:
    seconds = [0.0, 1.0, 2.5, 30.0]
    trace = write_azure(tmp_path / "a.csv", seconds)
    # x2, seed 7: copy 1 draws one shift per request (Azure rows are units of their own)
    shift = np.random.default_rng((7, SHAPE_STREAM)).uniform(-5.0, 5.0, 4)
    want = sorted(seconds + [abs(t + float(s)) for t, s in zip(seconds, shift, strict=True)])
    got = build_stream(trace, rate_scale=2.0, seed=7).arrival_s
    assert got.tobytes() == np.array(want).tobytes()
    assert got.tobytes() == columns(build_workload(trace, rate_scale=2.0, seed=7)).arrival_s.tobytes()
    # x2.5, seed 3: copy 1's shifts, then copy 2's keep draws (< 0.5) and shifts, in that order
    rng = np.random.default_rng((3, SHAPE_STREAM))
    s1 = rng.uniform(-5.0, 5.0, 4)
    keep2 = rng.random(4) < 0.5
    s2 = rng.uniform(-5.0, 5.0, 4)
    want = sorted(seconds + [abs(t + float(s)) for t, s in zip(seconds, s1, strict=True)]
                  + [abs(t + float(s)) for t, s, k in zip(seconds, s2, keep2, strict=True) if k])
    assert build_stream(trace, rate_scale=2.5, seed=3).arrival_s.tolist() == want


@pytest.mark.parametrize("kw", [{"rate_scale": 5.0}, {"rate_scale": 3.7, "seed": 4, "time_scale": 0.25},
                                {"rate_scale": 1.5, "span": (3.0, 50.0), "batch_fraction": 0.5, "seed": 2}])
def test_copied_mooncake_file_streams_as_it_loads(tmp_path: Path, kw: dict) -> None:
    # 1,000 rows 50 ms apart (a 5-s jitter reorders copies over ~200 rows; x5 passes a 4,096-request
    # block of the hash reader): 200 conversations of 5
    # turns, each turn's ids its conversation's so far plus one; id 0 (in every row) is the only
    # shared id, so copies move every other id and link their own turns into workflows
    rows = []
    for i in range(1000):
        conv, turn = i % 200, i // 200
        ids = [0, *(conv * 100 + j for j in range(1, turn + 2))]
        rows.append(json.dumps({"timestamp": 50 * i, "input_length": 512 * len(ids), "output_length": 1 + i % 9,
                                "hash_ids": ids}))
    trace = tmp_path / "m.jsonl"
    trace.write_text("\n".join(rows) + "\n")
    stream = assert_same_as_whole(trace, 7, **kw)
    reqs = made(stream)
    stride = 199 * 100 + 5 + 1  # the largest id + 1
    assert all(r.hash_ids[0] == 0 for r in reqs)
    assert any(h >= stride for r in reqs for h in r.hash_ids[1:])
    assert max(r.step for r in reqs) == 4  # a copied conversation keeps its five turns
    assert made(pickle.loads(pickle.dumps(stream))) == reqs  # a worker process gets it whole (spawn pickles)


def test_copied_stream_keeps_the_whole_paths_errors(tmp_path: Path) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"timestamp": 0, "input_length": 3, "output_length": 1, "hash_ids": [1]}\n{"timestamp": 5\n')
    with pytest.raises(TraceError) as whole:
        build_workload(bad, rate_scale=3.0)
    with pytest.raises(TraceError) as streamed:
        build_any(bad, rate_scale=3.0)
    assert str(streamed.value) == str(whole.value) and "line 2: invalid JSON" in str(whole.value)
    with pytest.raises(ValueError, match="at most 20,000,000 are simulated") as too_many:
        build_any(write_azure(tmp_path / "a.csv", [0.0, 1.0]), rate_scale=1.2e7)
    with pytest.raises(ValueError) as too_many_whole:
        build_workload(write_azure(tmp_path / "a.csv", [0.0, 1.0]), rate_scale=1.2e7)
    assert str(too_many.value) == str(too_many_whole.value)


def test_copied_shipped_trace_run_is_the_whole_run() -> None:
    # 30 s of Azure conv x20 under the PID on the example fleet: the same results, bit for bit
    cfg = load_config(ROOT / "examples" / "fleet.yaml")
    kw = {"span": (0.0, 30.0), "rate_scale": 20.0, "seed": 1}
    stream = assert_same_as_whole(AZURE, 1000, **kw)
    digests = []
    for wl in (stream, build_workload(AZURE, **kw)):
        res = summarize(run_simulation(cfg, wl, "pid", keep_requests=False))
        del res["wall_s"], res["simulated_requests_per_s"]
        digests.append(hashlib.sha256(json.dumps(res, sort_keys=True).encode()).hexdigest())
    assert digests[0] == digests[1] and stream.count > 1000
