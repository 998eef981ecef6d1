"""The per-pod aggregation's pure parts (``autoscaler.adapters.prometheus_pods``): which templates and
matchers it reads, the quantile as Prometheus v2.42 computes it, and a scope's value from its pods' groups."""

from __future__ import annotations

import math

import pytest

from autoscaler.adapters.prometheus_pods import (
    Matcher,
    Term,
    bucket_quantile,
    decompose,
    parse_matchers,
    pods_query,
    scope_value,
)
from autoscaler.promql import QUERY_SETS, SERVICE_SIGNALS


def test_every_shipped_pod_signal_template_is_read_per_pod() -> None:
    for qs in QUERY_SETS.values():
        for signal, template in qs.signals.items():
            if signal not in SERVICE_SIGNALS:
                assert decompose(template) is not None, (qs.name, signal)


@pytest.mark.parametrize("template", [
    "vllm:kv_cache_usage_perc{$sel} / on() vllm:num_requests_running{$sel}",  # a matching modifier
    "max(vllm:num_requests_running{$sel})",  # an aggregation not read per pod
    "sum(rate(x{$sel}[$window])) / sum(rate(y{$sel}[$window])) * 2",  # three terms
    "sum(rate(x{a=\"1\"}[$window]))",  # no $sel
    "sum(rate(x{$sel,$sel}[$window]))",  # $sel twice
    "avg(rate(x{$sel}[$window]))",
    "histogram_quantile(0.9, sum by (le, pod) (rate(x_bucket{$sel}[$window])))",
])
def test_other_shapes_are_sent_as_before(template: str) -> None:
    assert decompose(template) is None


def test_a_mean_is_two_sums_joined_by_its_operator() -> None:
    d = decompose("sum(rate(a_sum{$sel}[$window])) / sum(rate(a_count{x!=\"y\",$sel}[$window]))")
    assert d is not None and d.op == "/"
    assert d.left == Term("sum", "rate(a_sum{$sel}[$window])")
    assert d.right == Term("sum", 'rate(a_count{x!="y",$sel}[$window])')


@pytest.mark.parametrize(("text", "parsed"), [
    ('namespace="default",pod=~"s0-h100-.*"',
     (Matcher("namespace", "=", "default"), Matcher("pod", "=~", "s0-h100-.*"))),
    ('a!="x\\\\y", b!~\'c|d\'', (Matcher("a", "!=", "x\\y"), Matcher("b", "!~", "c|d"))),
    ("", ()),
    ('a=~"x\\\\.y"', (Matcher("a", "=~", "x\\.y"),)),
    ("a='x\\'y',b=\"x\\\"y\"", (Matcher("a", "=", "x'y"), Matcher("b", "=", 'x"y'))),  # each its own quote
])
def test_matchers_are_parsed_with_their_values_unquoted(text: str, parsed: tuple[Matcher, ...]) -> None:
    assert parse_matchers(text) == parsed


@pytest.mark.parametrize("text", [
    'a=~"^x$"',  # anchors: Python's $ also matches before a final newline
    'a=~"\\\\d+"',  # \d: Unicode digits in Python, ASCII in RE2
    'a=~"(?i)x"',  # flags
    'a=~"[[:alpha:]]"',  # a POSIX class
    'a=~"x{,2}"',  # RE2 reads it as a literal
    '__name__="x"',
    'a="\\u00e9"',  # an escape not read here
    '"a.b"="x"',  # a quoted label name
    "a=b",  # not a matcher
    # Prometheus refuses these (HTTP 400) where Python would read them:
    'a="x\\\'y"', "a='x\\\"y'", 'a="x\ny"',  # another quote's escape, a raw newline (PromQL's lexer)
    'a=~"a*+"', 'a=~"a{2}+"',  # possessive quantifiers (Python 3.11; RE2: invalid nested repetition)
    'a=~"x{1001}"', 'a=~"(x{100}){100}"',  # past RE2's 1000 repetitions
    'a=~"\\\\é"',  # a backslash before a non-ASCII character (RE2: invalid escape)
])
def test_matchers_read_otherwise_by_prometheus_are_not_read_here(text: str) -> None:
    assert parse_matchers(text) is None


def test_matchers_select_as_prometheus_does() -> None:
    group = {"pod": "s0-h100-1", "namespace": "default"}
    assert Matcher("pod", "=~", "s0-h100-.*").matches(group)
    assert not Matcher("pod", "=~", "s0-h100").matches(group)  # anchored at both ends
    assert Matcher("role", "!=", "prefill").matches(group)  # absent: ""
    assert Matcher("role", "=", "").matches(group)
    assert not Matcher("namespace", "!~", "def.*").matches(group)


def test_bucket_quantile_interpolates_inside_the_bucket_as_prometheus() -> None:
    # 10 observations: 2 <= 0.1, 6 <= 0.5 (4 in (0.1, 0.5]), 10 <= 1, none above.
    buckets = [(0.1, 2.0), (0.5, 6.0), (1.0, 10.0), (math.inf, 10.0)]
    # p50: rank 5, in (0.1, 0.5]: 0.1 + 0.4 * (5 - 2) / 4 = 0.4
    assert bucket_quantile(0.5, buckets) == pytest.approx(0.4)
    # p10: rank 1, in the first bucket, from 0: 0.1 * 1 / 2
    assert bucket_quantile(0.1, list(reversed(buckets))) == pytest.approx(0.05)
    # p100 with observations above 1: the highest finite bound
    assert bucket_quantile(0.99, [(1.0, 5.0), (math.inf, 10.0)]) == 1.0
    assert math.isnan(bucket_quantile(0.5, [(0.1, 0.0), (math.inf, 0.0)]))  # no observations
    assert math.isnan(bucket_quantile(0.5, [(0.1, 1.0), (1.0, 2.0)]))  # no +Inf bucket
    assert bucket_quantile(1.5, buckets) == math.inf and bucket_quantile(-1, buckets) == -math.inf
    # equal bounds are added; a count below an earlier one is raised to it (monotonic)
    assert bucket_quantile(0.5, [(0.5, 1.0), (0.5, 1.0), (1.0, 1.0), (math.inf, 4.0)]) == pytest.approx(0.5)


def test_bucket_quantile_of_degenerate_buckets_is_go_code_s() -> None:
    # q = 0: rank 0 falls in the empty first bucket (count 0 >= 0), 0 + 0.1 x (0 / 0): NaN, not ZeroDivisionError
    assert math.isnan(bucket_quantile(0.0, [(0.1, 0.0), (0.25, 5.0), (math.inf, 10.0)]))
    # a NaN count: sort.Search over the 2 finite buckets probes index 1 (NaN >= 0.1 false) and answers 2,
    # the +Inf bucket: the highest finite bound (a scan would stop at the first bucket, 0.005)
    assert bucket_quantile(0.1, [(0.05, 1.0), (1.0, math.nan), (math.inf, 1.0)]) == 1.0
    # a NaN first count is ensureMonotonic's starting maximum: nothing after it compares above or below, so
    # the counts stay as given (3 observations, rank 0); the search probes 3, 5 (-1 >= 0 false) and ends
    # at the +Inf bucket: the bound 5
    assert bucket_quantile(0.0, [(-1.0, math.nan), (0.0, 2.0), (0.1, 8.0), (0.5, -1.0), (1.0, 2.0), (5.0, -1.0),
                                 (math.inf, 3.0)]) == 5.0


def test_a_scope_is_the_sum_of_the_groups_its_matchers_select() -> None:
    rate = Term("sum", "rate(x{$sel}[$window])")
    hist = Term("quantile", "rate(h_bucket{$sel}[$window])", 0.5)
    groups = {
        "p1": [({"pod": "p1", "model_name": "m"}, 1.0), ({"pod": "p1", "model_name": "lora"}, 10.0)],
        "p2": [({"pod": "p2", "model_name": "m"}, 2.0)],
        "p3": [({"pod": "p3", "model_name": "m"}, 4.0)],
    }
    hgroups = {"p1": [({"pod": "p1", "model_name": "m", "le": "1"}, 1.0),
                      ({"pod": "p1", "model_name": "m", "le": "+Inf"}, 2.0)],
               "p2": [({"pod": "p2", "model_name": "m", "le": "1.0"}, 1.0),
                      ({"pod": "p2", "model_name": "m", "le": "+Inf"}, 2.0)]}
    answers = {(rate, "sum"): groups, (hist, "sum"): hgroups}
    model = (Matcher("model_name", "=", "m"),)
    d = decompose("sum(rate(x{$sel}[$window]))")
    assert d is not None
    assert scope_value(d, answers, model, ["p1", "p2"], "pod") == 3.0  # p3 out of scope, lora not selected
    assert scope_value(d, answers, (), ["p1"], "pod") == 11.0
    assert scope_value(d, answers, model, ["p9"], "pod") is None  # no series: unknown, not 0
    q = decompose("histogram_quantile(0.5, sum by (le) (rate(h_bucket{$sel}[$window])))")
    assert q is not None
    # "1" and "1.0" are one bound: 2 of 4 at or below 1, rank 2 -> 1.0
    assert scope_value(q, answers, model, ["p1", "p2"], "pod") == pytest.approx(1.0)
    ratio = decompose("sum(rate(x{$sel}[$window])) / sum(rate(x{$sel}[$window]))")
    assert ratio is not None and scope_value(ratio, answers, model, ["p2"], "pod") == 1.0


def test_a_pods_query_chunks_its_pods() -> None:
    term = Term("sum", 'rate(x{a="b",$sel}[$window])')
    q = pods_query(term, "sum", "pod", [f"p{i:03d}" for i in range(300)], ["model_name", "pod"], 60.0)
    assert q.startswith("sum by (model_name, pod) (rate(x{a=\"b\",pod=~\"p000|p001|")
    assert q.count(" or ") == 1 and q.count("[60000ms]") == 2
