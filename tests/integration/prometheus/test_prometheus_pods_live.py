"""The per-pod aggregation's client-side reading (``autoscaler.adapters.prometheus_pods``) against a real
Prometheus v2.42 on constant vectors (no scrape): the quantile of hand-made buckets, as ``histogram_quantile``
computes it (each bucket is ``label_replace(vector(count), "le", bound, "", "")``), and the label matchers
it reads, as Prometheus parses and matches them."""

from __future__ import annotations

import json
import math
import random
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest

from autoscaler.adapters.prometheus_pods import (
    Term,
    bucket_quantile,
    decompose,
    parse_matchers,
    pods_query,
    scope_value,
)
from autoscaler.faults.promserver import PromServer
from autoscaler.promql import quote


@pytest.fixture(scope="module")
def prom(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PromServer]:
    server = PromServer(tmp_path_factory.mktemp("pods-live") / "prom")
    with server:
        yield server


def instant(prom: PromServer, promql: str) -> tuple[int, Any]:
    """(HTTP status, ``data.result`` or Prometheus's error) of ``promql`` at a fixed time."""
    q = urllib.parse.urlencode({"query": promql, "time": "1000"})
    try:
        with urllib.request.urlopen(f"{prom.url}/api/v1/query?{q}", timeout=10) as r:
            return r.status, json.loads(r.read())["data"]["result"]
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read()).get("error")


def _number(x: float) -> str:
    return "NaN" if math.isnan(x) else ("+Inf" if x == math.inf else ("-Inf" if x == -math.inf else repr(x)))


def prometheus_quantile(prom: PromServer, q: float, buckets: list[tuple[str, float]]) -> float:
    parts = " or ".join(f'label_replace(vector({_number(c)}), "le", "{le}", "", "")' for le, c in buckets)
    status, result = instant(prom, f"histogram_quantile({q!r}, {parts})")
    assert status == 200 and len(result) == 1, result
    return float(result[0]["value"][1])


@pytest.mark.parametrize(("q", "buckets"), [
    (0.5, [("0.1", 2.0), ("0.5", 6.0), ("1", 10.0), ("+Inf", 10.0)]),
    (0.0, [("0.1", 0.0), ("0.25", 5.0), ("+Inf", 10.0)]),  # rank 0 in an empty first bucket: 0 / 0
    (0.0, [("-1", 0.0), ("0.1", 0.0), ("+Inf", 3.0)]),
    (0.1, [("0.05", 1.0), ("1", math.nan), ("+Inf", 1.0)]),  # a NaN count: Go's binary search
    (0.5, [("-1", 1.0), ("0", 0.0), ("0.25", 5.0), ("0.5", math.nan), ("1", 8.0), ("2.5", math.nan), ("+Inf", 3.0)]),
    (0.0, [("-1", math.nan), ("0", 2.0), ("0.1", 8.0), ("0.5", -1.0), ("1", 2.0), ("5", -1.0), ("+Inf", 3.0)]),
    (0.5, [("-1", 8.0), ("0.5", math.nan), ("2.5", 1.0), ("+Inf", 1.0)]),
    (0.9, [("0.1", -2.0), ("0.5", -1.0), ("+Inf", 4.0)]),  # negative counts
    (0.5, [("0.1", 3.0), ("0.5", 1.0), ("1", 2.0), ("+Inf", 4.0)]),  # not monotonic
    (0.5, [("0.1", 1.0), ("1", 2.0)]),  # no +Inf bucket
    (0.99, [("0.1", 1.0), ("+Inf", math.inf)]),
])
def test_bucket_quantile_is_prometheus_histogram_quantile(prom: PromServer, q: float,
                                                          buckets: list[tuple[str, float]]) -> None:
    want = prometheus_quantile(prom, q, buckets)
    got = bucket_quantile(q, [(float(le), c) for le, c in buckets])
    assert got == want or (math.isnan(got) and math.isnan(want)), (got, want)


def test_bucket_quantile_is_prometheus_histogram_quantile_on_random_buckets(prom: PromServer) -> None:
    """NaN, negative and decreasing counts among ordinary ones, drawn with a fixed seed."""
    rng = random.Random(57)
    for _ in range(60):
        finite = rng.sample(["-1", "0", "0.05", "0.1", "0.25", "0.5", "1", "2.5", "5"], rng.randint(1, 6))
        bounds = [*sorted(finite, key=float), "+Inf"]
        counts = [rng.choice([0.0, 1.0, 2.0, 3.0, 5.0, 8.0, math.nan, -1.0]) for _ in bounds]
        q = rng.choice([0.0, 0.1, 0.5, 0.9, 0.99, 1.0])
        want = prometheus_quantile(prom, q, list(zip(bounds, counts, strict=True)))
        got = bucket_quantile(q, [(float(b), c) for b, c in zip(bounds, counts, strict=True)])
        assert got == pytest.approx(want, rel=1e-12, nan_ok=True), (q, bounds, counts)


MATCHERS = [
    'a="x\\\'y"', "a='x\\\"y'", 'a="x\ny"', "a='x\\'y'", 'a="x\\"y"', "a=`x\\'y`",  # quotes' escapes, a raw newline
    'a=~"a*+"', 'a=~"a++"', 'a=~"a?+"', 'a=~"a{2}+"', 'a=~"(ab)*+"',  # possessive quantifiers (Python 3.11)
    'a=~"x{1001}"', 'a=~"x{1,1001}"', 'a=~"x{1000}"', 'a=~"(x{100}){100}"', 'a=~"((x{10}){10}){11}"',
    'a=~"\\\\é"', 'a=~"\\\\ "', 'a=~"\\\\-"', 'a=~"[a\\\\-z]+"', 'a=~"a\\\\++"', 'a=~"[+]+"',
    'a=~"a{"', 'a=~"a{1"', 'a=~"a{1}?"', 'a=~"a+?"', 'a=~"(|a)+"', 'a=~"[--z]"', 'a!~"é.|x"',
]


@pytest.mark.parametrize("text", MATCHERS)
def test_matchers_read_here_are_matchers_prometheus_reads_alike(prom: PromServer, text: str) -> None:
    """A matcher the module reads (``parse_matchers``) is one Prometheus accepts (it is evaluated here, never
    sent: one Prometheus refuses would read as a value instead of the scope's error), and selects the same
    values: each value tried as the label of a constant vector, matched by ``label_replace``'s regex (anchored
    RE2, as ``=~``) or compared as written."""
    parsed = parse_matchers(text)
    status, error = instant(prom, "up{" + text + "}")
    if parsed is None:
        return
    assert status == 200, (text, parsed, error)
    (m,) = parsed
    for value in ["", "a", "aa", "x'y", 'x"y', "x\ny", "é", "éa", "x" * 1000, "-", " ", "a+", "ab", "[", "z"]:
        if m.op in ("=~", "!~"):
            expr = (f'label_replace(label_replace(vector(1), "a", {quote(value)}, "", ""), "hit", "1", "a", '
                    f'{quote(m.value)})')
            status, result = instant(prom, expr)
            assert status == 200, result
            hit = result[0]["metric"].get("hit") == "1"
            assert m.matches({"a": value}) == (hit if m.op == "=~" else not hit), (text, value)


LES = ["1", "1.0", ".5", "5.", "1E+2", "-0.5", "+Inf", "inf", "-Inf", "Infinity", "iNf", "NaN", "nan",
       "1_0", "1_0.2_5", "1e1_0", "0x1p-2", "0X1.8P1", "0x_1p0", "0x.8p1", "+0x1p0",  # Go reads these
       "+nan", "-nan", " 1", "1 ", "١", "1__0", "_1", "1_", "1_.5", "1e_1", "0x10", "0x1.8", "0x1_p0",  # not these
       "1e400", "-1e400", "0x1p2000", "infin", "", "1e-400"]


_decomposed = decompose("histogram_quantile(0.5, sum by (le) (rate(h_bucket{$sel}[$window])))")
assert _decomposed is not None
decomposed, term = _decomposed, _decomposed.left


@pytest.mark.parametrize("le", LES)
def test_a_bucket_bound_is_read_as_prometheus_reads_it(prom: PromServer, le: str) -> None:
    """One bucket of 1 observation below ``le`` and a +Inf bucket of 2: the median is the bound itself when
    Prometheus reads it, NaN (a +Inf bucket alone) when it leaves the bucket out."""
    want = prometheus_quantile(prom, 0.5, [(le, 1.0), ("+Inf", 2.0)])
    got = scope_value(decomposed, {(term, "sum"): {"p": [({"pod": "p", "le": le}, 1.0),
                                                       ({"pod": "p", "le": "+Inf"}, 2.0)]}}, (), ["p"], "pod")
    assert got == pytest.approx(want, nan_ok=True), (le, got, want)


@pytest.mark.parametrize("name", ["inf", "NaN", "Without", "infinity", "offset", "bool", "by", "le", "sum", "on",
                                  "group_left", "start", "atan2"])
def test_a_label_a_scope_matcher_names_is_one_prometheus_groups_by(prom: PromServer, name: str) -> None:
    """A scope's matcher is read here (``parse_matchers``) only when the per-pod query, grouped by the label
    it names, is one Prometheus accepts: else every per-pod query of the tick (they group by every scope's
    matcher labels) was refused, and the scopes' own queries sent again."""
    parsed = parse_matchers(f'{name}="x"')
    query = pods_query(Term("sum", "up{$sel}"), "sum", "pod", ["p"], ["pod", name], 60.0)
    status, _ = instant(prom, query)
    assert (parsed is not None) == (status == 200), (name, status)
