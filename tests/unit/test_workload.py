"""Tests for autoscaler.workload: trace loaders, errors, shaping, classes, workflows, synthetic default."""

from __future__ import annotations

import dataclasses
import math
from collections import Counter, defaultdict
from pathlib import Path

import numpy as np
import pytest
from support.paths import DATA_DIR

from autoscaler.errors import TraceError
from autoscaler.workload import synthetic
from autoscaler.workload.azure import HEADER, load_azure
from autoscaler.workload.classes import assign_classes, group_workflows
from autoscaler.workload.loader import detect_format, load_trace
from autoscaler.workload.measure import block_reuse_fraction, main, measure
from autoscaler.workload.mooncake import load_mooncake
from autoscaler.workload.shaping import shape
from autoscaler.workload.synthetic import rate_curve, synthetic_workload
from autoscaler.workload.types import BATCH, INTERACTIVE, Request, Workload

DATA = DATA_DIR
AZURE_CONV = DATA / "azure-llm-2023" / "AzureLLMInferenceTrace_conv.csv"
AZURE_CODE = DATA / "azure-llm-2023" / "AzureLLMInferenceTrace_code.csv"
MOONCAKE = DATA / "mooncake" / "conversation_trace.jsonl"
# The shared data is always beside the clone in CI: a missing directory fails (conftest's data_dir).
needs_data = pytest.mark.usefixtures("data_dir")


def binomial_bound(n: int, p: float, sigmas: float = 5.0) -> tuple[float, float]:
    """(low, high) count bound for Binomial(n, p), +-``sigmas`` standard deviations."""
    sd = math.sqrt(n * p * (1 - p))
    return n * p - sigmas * sd, n * p + sigmas * sd


def fields(w: Workload) -> list[tuple]:
    """Every field of every request, for equality checks."""
    return [dataclasses.astuple(r) for r in w.requests]


@pytest.fixture(scope="module")
def azure_conv() -> Workload:
    return load_azure(AZURE_CONV)


@pytest.fixture(scope="module")
def mooncake_grouped() -> Workload:
    return group_workflows(load_mooncake(MOONCAKE))


@pytest.fixture(scope="module")
def synth() -> Workload:
    return synthetic_workload()


# --- loaders on the real files (figures from each SOURCE.md) ----------------------------------------


@needs_data
def test_azure_conv_matches_source_md(azure_conv: Workload) -> None:
    reqs = azure_conv.requests
    assert len(reqs) == 19_366
    assert round(np.mean([r.input_tokens for r in reqs])) == 1155
    assert round(np.mean([r.output_tokens for r in reqs])) == 211
    assert np.median([r.input_tokens for r in reqs]) == 1020
    assert max(r.input_tokens for r in reqs) == 14_050
    assert reqs[0].arrival_s == 0.0
    # 18:15:46.6805900 -> 19:14:08.40 (SOURCE.md: 3,502 s)
    assert azure_conv.duration_s == pytest.approx(3501.72, abs=0.01)
    assert all(r.hash_ids == () and r.workflow_id is None for r in reqs)
    assert azure_conv.meta["clamped_zero_output"] == 0


@needs_data
def test_azure_code_matches_source_md() -> None:
    w = load_trace(AZURE_CODE)
    assert len(w.requests) == 8_819
    assert round(np.mean([r.input_tokens for r in w.requests])) == 2048
    assert round(np.mean([r.output_tokens for r in w.requests])) == 28
    assert round(w.duration_s) == 3436


@needs_data
def test_mooncake_matches_source_md() -> None:
    w = load_trace(MOONCAKE)
    reqs = w.requests
    assert len(reqs) == 12_031
    assert round(np.mean([r.input_tokens for r in reqs])) == 12_035
    assert round(np.mean([r.output_tokens for r in reqs])) == 343
    assert w.block_tokens == 512
    assert w.duration_s == pytest.approx(3536.999)
    assert len({h for r in reqs for h in r.hash_ids}) == 182_790
    assert block_reuse_fraction([r.hash_ids for r in reqs]) == pytest.approx(0.366, abs=0.0005)
    assert min(r.output_tokens for r in reqs) == 1
    assert w.meta["clamped_zero_output"] == 0


@needs_data
def test_detect_format_on_real_files() -> None:
    assert detect_format(AZURE_CONV) == "azure"
    assert detect_format(MOONCAKE) == "mooncake"


def write(tmp_path: Path, name: str, text: str | bytes) -> Path:
    p = tmp_path / name
    if isinstance(text, bytes):
        p.write_bytes(text)
    else:
        p.write_text(text)
    return p


def test_azure_timestamp_seven_digits_and_relative(tmp_path: Path) -> None:
    p = write(
        tmp_path,
        "t.csv",
        f"{HEADER}\n2023-11-16 23:59:59.9999999,10,5\n2023-11-17 00:00:01.0000001,20,0\n",
    )
    w = load_trace(p)
    assert [r.arrival_s for r in w.requests] == pytest.approx([0.0, 1.0000002], abs=1e-9)
    assert w.requests[1].output_tokens == 1  # 0 generated tokens is clamped to 1
    assert w.meta["clamped_zero_output"] == 1


def test_out_of_order_rows_are_sorted_relative_to_earliest(tmp_path: Path) -> None:
    p = write(tmp_path, "o.csv", f"{HEADER}\n2023-11-16 18:00:10.5,1,1\n2023-11-16 18:00:00.5,2,2\n")
    w = load_trace(p)
    assert [(r.arrival_s, r.input_tokens, r.rid) for r in w.requests] == [(0.0, 2, 0), (10.0, 1, 1)]
    q = write(
        tmp_path,
        "o.jsonl",
        '{"timestamp": 3000, "input_length": 5, "output_length": 0, "hash_ids": [1]}\n'
        '{"timestamp": 1000, "input_length": 6, "output_length": 2, "hash_ids": []}\n',
    )
    m = load_trace(q)
    assert [(r.arrival_s, r.input_tokens, r.output_tokens) for r in m.requests] == [(0.0, 6, 2), (2.0, 5, 1)]


def test_blank_lines_crlf_and_bom_are_accepted(tmp_path: Path) -> None:
    text = f"\ufeff\r\n{HEADER}\r\n\r\n2023-11-16 18:00:00.0,3,4\r\n   \r\n2023-11-16 18:00:01.0,5,6\r\n"
    w = load_trace(write(tmp_path, "b.csv", text))
    assert [(r.input_tokens, r.output_tokens) for r in w.requests] == [(3, 4), (5, 6)]


# --- malformed inputs: TraceError naming the file and the 1-based line -------------------------------

ROW = "2023-11-16 18:00:00.1234567,10,5"
GOOD = '{"timestamp": 0, "input_length": 600, "output_length": 5, "hash_ids": [0, 1]}'

AZURE_BAD = [
    ("wrong header", "TIMESTAMP,Context,Generated\n" + ROW, 1, "wrong header"),
    ("header only", f"{HEADER}\n\n", 1, "no requests"),
    ("too few columns", f"{HEADER}\n{ROW}\n2023-11-16 18:00:01.0,10\n", 3, "3 comma-separated"),
    ("too many columns", f"{HEADER}\n{ROW},7\n", 2, "found 4"),
    ("non-numeric input", f"{HEADER}\n{ROW}\n2023-11-16 18:00:01.0,ten,5\n", 3, "ContextTokens is not"),
    ("float output", f"{HEADER}\n2023-11-16 18:00:01.0,10,5.5\n", 2, "GeneratedTokens is not"),
    ("negative output", f"{HEADER}\n2023-11-16 18:00:01.0,10,-5\n", 2, "GeneratedTokens is negative"),
    ("zero input", f"{HEADER}\n2023-11-16 18:00:01.0,0,5\n", 2, "ContextTokens is 0"),
    ("bad timestamp", f"{HEADER}\n16/11/2023 18:00:01,10,5\n", 2, "bad TIMESTAMP"),
    ("bad date", f"{HEADER}\n2023-02-30 18:00:01.0,10,5\n", 2, "bad TIMESTAMP date"),
    ("bad time", f"{HEADER}\n2023-11-16 25:00:01.0,10,5\n", 2, "bad TIMESTAMP time"),
    ("blank lines counted", f"\n\n{HEADER}\n{ROW}\n\n{ROW},1\n", 6, "found 4"),
]


def mc(**raw: str) -> str:
    """A Mooncake line; keyword values are raw JSON text replacing the defaults."""
    values = {"timestamp": "0", "input_length": "5", "output_length": "1", "hash_ids": "[]", **raw}
    return "{" + ", ".join(f'"{k}": {v}' for k, v in values.items()) + "}"


MOONCAKE_BAD = [
    ("invalid json", GOOD + '\n{"timestamp": 0, "input_length": 5,\n', 2, "invalid JSON"),
    ("not an object", GOOD + "\n[1, 2]\n", 2, "expected a JSON object"),
    ("missing key", GOOD + '\n\n{"timestamp": 0, "input_length": 5, "output_length": 1}\n', 3, "'hash_ids'"),
    ("string count", mc(input_length='"5"'), 1, "input_length must be an integer"),
    ("float count", mc(input_length="5.5"), 1, "input_length must be an integer"),
    ("bool count", mc(output_length="true"), 1, "output_length must be an integer"),
    ("negative count", mc(output_length="-1"), 1, "output_length is negative"),
    ("zero input", mc(input_length="0"), 1, "input_length is 0"),
    ("string timestamp", mc(timestamp='"0"'), 1, "timestamp must be a number"),
    ("negative timestamp", mc(timestamp="-1"), 1, "bad timestamp"),
    ("nan timestamp", mc(timestamp="NaN"), 1, "bad timestamp"),
    ("hash_ids not list", mc(hash_ids="7"), 1, "hash_ids must be a list"),
    ("hash id string", mc(hash_ids='["a"]'), 1, "non-negative integers"),
    ("hash id negative", mc(hash_ids="[-3]"), 1, "non-negative integers"),
    ("too many hash ids", mc(hash_ids="[1, 2]"), 1, "2 hash_ids for 5 tokens"),
]


def assert_trace_error(err: pytest.ExceptionInfo[TraceError], path: Path, line: int | None, text: str) -> None:
    """The message is one line naming the file, the line (if any) and containing ``text``."""
    msg = str(err.value)
    assert "\n" not in msg
    assert path.name in msg
    if line is not None:
        assert f": line {line}: " in msg
    assert text in msg


@pytest.mark.parametrize(("case", "text", "line", "fragment"), AZURE_BAD, ids=[c[0] for c in AZURE_BAD])
def test_azure_malformed(tmp_path: Path, case: str, text: str, line: int, fragment: str) -> None:
    p = write(tmp_path, "bad.csv", text)
    for loader in (load_azure, load_trace):
        with pytest.raises(TraceError) as err:
            loader(p)
        assert_trace_error(err, p, line, fragment)


@pytest.mark.parametrize(("case", "text", "line", "fragment"), MOONCAKE_BAD, ids=[c[0] for c in MOONCAKE_BAD])
def test_mooncake_malformed(tmp_path: Path, case: str, text: str, line: int, fragment: str) -> None:
    p = write(tmp_path, "bad.jsonl", text)
    for loader in (load_mooncake, load_trace):
        with pytest.raises(TraceError) as err:
            loader(p)
        assert_trace_error(err, p, line, fragment)


@pytest.mark.parametrize(
    ("text", "line", "fragment"),
    [("", None, "empty file"), ("\n  \n\n", None, "empty file"), (b"ok\n\xff\xfe\n", 2, "not UTF-8")],
)
def test_file_level_errors(tmp_path: Path, text: str | bytes, line: int | None, fragment: str) -> None:
    p = write(tmp_path, "x.trace", text)
    for loader in (load_azure, load_mooncake, load_trace):
        with pytest.raises(TraceError) as err:
            loader(p)
        assert_trace_error(err, p, line, fragment)


def test_missing_file_and_unknown_format(tmp_path: Path) -> None:
    p = tmp_path / "nope.csv"
    with pytest.raises(TraceError) as err:
        load_trace(p)
    assert_trace_error(err, p, None, "file not found")
    q = write(tmp_path, "plain.txt", "hello world\n")
    with pytest.raises(TraceError) as err:
        load_trace(q)
    assert_trace_error(err, q, 1, "unrecognised trace format")
    with pytest.raises(TraceError) as err:
        load_trace(q, fmt="sharegpt")
    assert_trace_error(err, q, None, "unknown trace format 'sharegpt'")


def test_explicit_format_overrides_detection(tmp_path: Path) -> None:
    p = write(tmp_path, "m.txt", GOOD + "\n")
    assert len(load_trace(p, fmt="mooncake").requests) == 1
    with pytest.raises(TraceError) as err:
        load_trace(p, fmt="azure")
    assert_trace_error(err, p, 1, "wrong header")


# --- shaping --------------------------------------------------------------------------------------


@needs_data
def test_time_scale_halves_duration(azure_conv: Workload) -> None:
    w = shape(azure_conv, time_scale=0.5)
    assert len(w.requests) == len(azure_conv.requests)
    assert w.duration_s == pytest.approx(azure_conv.duration_s / 2)
    assert azure_conv.requests[-1].arrival_s == pytest.approx(3501.72, abs=0.01)  # input untouched


@needs_data
def test_rate_scale_half_keeps_about_half(azure_conv: Workload) -> None:
    n = len(azure_conv.requests)
    low, high = binomial_bound(n, 0.5)
    for seed in range(3):
        kept = len(shape(azure_conv, rate_scale=0.5, seed=seed).requests)
        assert low <= kept <= high


@needs_data
def test_rate_scale_two_doubles_and_fraction_adds(azure_conv: Workload) -> None:
    n = len(azure_conv.requests)
    assert len(shape(azure_conv, rate_scale=2.0).requests) == 2 * n
    low, high = binomial_bound(n, 0.5)
    assert 2 * n + low <= len(shape(azure_conv, rate_scale=2.5).requests) <= 2 * n + high


@needs_data
def test_shape_is_deterministic(azure_conv: Workload) -> None:
    a = shape(azure_conv, time_scale=0.7, rate_scale=1.6, seed=4)
    b = shape(azure_conv, time_scale=0.7, rate_scale=1.6, seed=4)
    c = shape(azure_conv, time_scale=0.7, rate_scale=1.6, seed=5)
    assert fields(a) == fields(b)
    assert fields(a) != fields(c)


@needs_data
def test_copies_get_disjoint_hash_ids_and_workflows(mooncake_grouped: Workload) -> None:
    w = shape(mooncake_grouped, rate_scale=3.0, seed=1)
    n_wf = max(r.workflow_id for r in mooncake_grouped.requests) + 1
    ids_by_copy: defaultdict[int, set[int]] = defaultdict(set)
    wf_by_copy: defaultdict[int, set[int]] = defaultdict(set)
    for r in w.requests:
        ids_by_copy[r.workflow_id // n_wf].update(r.hash_ids)
        wf_by_copy[r.workflow_id // n_wf].add(r.workflow_id)
    assert sorted(ids_by_copy) == [0, 1, 2]
    assert all(len(wf_by_copy[k]) == n_wf for k in range(3))
    for a in range(3):
        for b in range(a + 1, 3):
            assert ids_by_copy[a] & ids_by_copy[b] == {0}  # only the every-request system block is shared
    # Steps of every workflow still arrive in order.
    steps: defaultdict[int, list[int]] = defaultdict(list)
    for r in w.requests:
        steps[r.workflow_id].append(r.step)
    assert all(s == sorted(s) for s in steps.values())


def test_copy_jitter_is_bounded() -> None:
    w = Workload([Request(arrival_s=100.0, input_tokens=10, output_tokens=2, hash_ids=(3, 4))])
    out = shape(w, rate_scale=5.0, seed=2, jitter_s=5.0, shared_min_fraction=1.0)
    assert len(out.requests) == 5
    assert all(95.0 <= r.arrival_s <= 105.0 for r in out.requests)
    # shared_min_fraction=1.0: ids in every request (both of them here) stay shared across copies.
    assert {r.hash_ids for r in out.requests} == {(3, 4)}
    single = Workload([*w.requests, Request(arrival_s=1.0, input_tokens=5, output_tokens=1, hash_ids=(3, 9))])
    copies = shape(single, rate_scale=2.0, shared_min_fraction=1.0)
    assert sorted(r.hash_ids for r in copies.requests) == [(3, 4), (3, 9), (3, 14), (3, 19)]


@pytest.mark.parametrize(
    "kwargs",
    [
        {"time_scale": 0},
        {"time_scale": -1.0},
        {"time_scale": math.inf},
        {"rate_scale": 0},
        {"rate_scale": math.nan},
        {"jitter_s": -1.0},
        {"shared_min_fraction": 0.0},
    ],
)
def test_shape_rejects_bad_arguments(kwargs: dict[str, float]) -> None:
    with pytest.raises(ValueError, match=next(iter(kwargs))):
        shape(Workload([]), **kwargs)


# --- classes and workflows -------------------------------------------------------------------------


@needs_data
def test_assign_classes_deterministic_and_fraction(azure_conv: Workload) -> None:
    a = assign_classes(azure_conv, seed=3)
    assert fields(a) == fields(assign_classes(azure_conv, seed=3))
    n = len(a.requests)
    low, high = binomial_bound(n, 0.2)
    n_batch = sum(r.request_class == BATCH for r in a.requests)
    assert low <= n_batch <= high
    assert all((r.priority == 0) == (r.request_class == BATCH) for r in a.requests)
    interactive = [r for r in a.requests if r.request_class == INTERACTIVE]
    assert {r.priority for r in interactive} == {1, 2}
    low, high = binomial_bound(len(interactive), 0.25)  # Azure conv has no workflows: one unit per request
    assert low <= sum(r.priority == 2 for r in interactive) <= high
    assert all(r.request_class == INTERACTIVE for r in azure_conv.requests)  # input untouched


@needs_data
def test_classes_follow_workflows(mooncake_grouped: Workload) -> None:
    a = assign_classes(mooncake_grouped, batch_fraction=0.5, seed=1)
    per_wf: defaultdict[int, set[str]] = defaultdict(set)
    for r in a.requests:
        per_wf[r.workflow_id].add(r.request_class)
    assert all(len(c) == 1 for c in per_wf.values())
    prio: defaultdict[int, set[int]] = defaultdict(set)
    for r in a.requests:
        prio[r.workflow_id].add(r.priority)
    assert all(len(p) == 1 for p in prio.values())  # a workflow keeps one priority
    low, high = binomial_bound(len(per_wf), 0.5)
    assert low <= sum(c == {BATCH} for c in per_wf.values()) <= high


def test_assign_classes_extremes_and_errors() -> None:
    w = Workload([Request(arrival_s=float(i), input_tokens=1, output_tokens=1) for i in range(50)])
    assert {r.request_class for r in assign_classes(w, batch_fraction=0.0).requests} == {INTERACTIVE}
    assert {r.request_class for r in assign_classes(w, batch_fraction=1.0).requests} == {BATCH}
    with pytest.raises(ValueError, match="batch_fraction"):
        assign_classes(w, batch_fraction=1.5)
    with pytest.raises(ValueError, match="critical_fraction"):
        assign_classes(w, critical_fraction=-0.1)
    assert {r.priority for r in assign_classes(w, batch_fraction=0.0, critical_fraction=1.0).requests} == {2}


@needs_data
def test_group_workflows_on_mooncake(mooncake_grouped: Workload) -> None:
    sizes = Counter(r.workflow_id for r in mooncake_grouped.requests)
    assert len(sizes) == 8_056
    assert np.mean(list(sizes.values())) == pytest.approx(1.4934, abs=1e-4)
    assert max(sizes.values()) == 43
    steps: defaultdict[int, list[int]] = defaultdict(list)
    for r in mooncake_grouped.requests:
        steps[r.workflow_id].append(r.step)
    assert all(s == list(range(len(s))) for s in steps.values())


def test_group_workflows_rule() -> None:
    def req(t: float, tokens: int, ids: tuple[int, ...]) -> Request:
        return Request(arrival_s=t, input_tokens=tokens, output_tokens=1, hash_ids=ids)

    w = Workload(
        [
            req(0, 1100, (0, 1, 2)),  # 2 complete blocks: (0, 1)
            req(1, 1600, (0, 1, 5, 6)),  # starts with (0, 1) -> continues request 0
            req(2, 1100, (0, 7, 8)),  # shares only the common block 0 -> new workflow
            req(3, 2100, (0, 1, 5, 9, 10)),  # longest: request 1's complete blocks (0, 1, 5)
            req(4, 600, (0, 1)),  # (0, 1) = request 0's complete blocks
        ]
    )
    g = group_workflows(w, shared_min_fraction=0.9)  # only id 0 (in all 5) counts as shared
    assert [(r.workflow_id, r.step) for r in g.requests] == [(0, 0), (0, 1), (1, 0), (0, 2), (0, 3)]
    assert all(r.workflow_id is None for r in group_workflows(Workload([req(0, 5, ())])).requests)


# --- synthetic default ----------------------------------------------------------------------------


def test_synthetic_is_deterministic() -> None:
    a = synthetic_workload(duration_s=300, seed=7)
    assert fields(a) == fields(synthetic_workload(duration_s=300, seed=7))
    assert fields(a) != fields(synthetic_workload(duration_s=300, seed=8))


def test_synthetic_matches_documented_parameters(synth: Workload) -> None:
    reqs = synth.requests
    assert synth.source == "synthetic:default"
    assert synth.block_tokens == 512
    assert len(reqs) / 3600 == pytest.approx(synthetic.AZURE_CONV_RATE_RPS, rel=0.03)
    assert reqs[0].arrival_s >= 0 and reqs[-1].arrival_s < 3600
    inp = np.array([r.input_tokens for r in reqs])
    out = np.array([r.output_tokens for r in reqs])
    assert np.median(inp) == pytest.approx(synthetic.INPUT_MEDIAN_TOKENS, rel=0.05)
    assert inp.mean() == pytest.approx(synthetic.INPUT_MEAN_TOKENS, rel=0.05)
    assert inp.min() >= 1 and inp.max() <= synthetic.INPUT_MAX_TOKENS < 32_000
    assert np.median(out) == pytest.approx(synthetic.OUTPUT_MEDIAN_TOKENS, rel=0.05)
    assert out.mean() == pytest.approx(synthetic.OUTPUT_MEAN_TOKENS, rel=0.10)  # clipped at the max
    assert out.min() >= 1 and out.max() <= synthetic.OUTPUT_MAX_TOKENS
    low, high = binomial_bound(len({r.workflow_id for r in reqs}), 0.2)
    assert low <= len({r.workflow_id for r in reqs if r.request_class == BATCH}) <= high


def test_synthetic_prefix_reuse_and_conversations(synth: Workload) -> None:
    reqs = synth.requests
    assert 0.25 <= block_reuse_fraction([r.hash_ids for r in reqs]) <= 0.5  # Mooncake: 0.366
    assert 0.2 <= np.mean([r.step > 0 for r in reqs]) <= 0.4  # Mooncake: 0.33
    last: dict[int, Request] = {}
    for r in reqs:
        assert len(r.hash_ids) == -(-r.input_tokens // 512)
        prev = last.get(r.workflow_id)
        if prev is not None:
            assert r.step == prev.step + 1
            complete = prev.input_tokens // 512
            assert r.hash_ids[:complete] == prev.hash_ids[:complete]
        last[r.workflow_id] = r
    # The loader-side workflow rule never merges two synthetic conversations.
    found: defaultdict[int, set[int]] = defaultdict(set)
    for a, b in zip(reqs, group_workflows(synth).requests, strict=True):
        found[b.workflow_id].add(a.workflow_id)
    assert all(len(v) == 1 for v in found.values())


def test_rate_curve_mean_and_swing() -> None:
    t, rate = rate_curve(3600.0, 5.0, np.random.default_rng(0))
    assert t[0] == 0 and t[-1] == 3600
    assert np.trapezoid(rate, t) / 3600 == pytest.approx(5.0)
    assert rate.max() / rate.min() > 3  # a compressed day swings several-fold


def test_synthetic_rejects_bad_arguments() -> None:
    for kwargs in ({"duration_s": 0}, {"mean_rate_rps": -1.0}, {"day_s": math.nan}):
        with pytest.raises(ValueError, match=next(iter(kwargs))):
            synthetic_workload(**kwargs)


@needs_data
def test_measured_figures_match_synthetic_constants(capsys: pytest.CaptureFixture[str]) -> None:
    measured = measure(DATA)
    for name, value in synthetic.CONSTANTS.items():
        assert measured[name] == pytest.approx(value, rel=1e-3), name
    main(["--data", str(DATA)])
    printed = capsys.readouterr().out
    assert "INPUT_MEAN_TOKENS = 1154.7" in printed
    assert "BLOCK_REUSE_FRACTION = 0.366" in printed


def test_thinning_keeps_the_class_mix() -> None:
    # Classes and thinning draw from the same seed but separate streams: thinned to 10 % or 50 %, the
    # workload keeps ~20 % batch (with one stream, everything kept at 10 % would be batch).
    from autoscaler.workload.classes import assign_classes
    from autoscaler.workload.shaping import shape

    wl = assign_classes(Workload([Request(arrival_s=i * 0.1, input_tokens=100, output_tokens=10)
                                  for i in range(20_000)]), batch_fraction=0.2, seed=3)
    for scale in (0.1, 0.5):
        thin = shape(wl, rate_scale=scale, seed=3)
        share = sum(r.request_class == "batch" for r in thin.requests) / len(thin.requests)
        assert share == pytest.approx(0.2, abs=0.02), scale
