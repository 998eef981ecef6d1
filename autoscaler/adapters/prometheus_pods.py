"""Pod-scoped signals read as one per-pod aggregation per term, the scopes summed in the client.

A batched tick (``prometheus.batch``) used to send each pod-scoped signal as one ``or`` of one branch per
service and per variant, each branch its own selector over its own pods (~400 selectors per signal at
100 services): Prometheus's own work stayed O(services). With ``prometheus.aggregate`` (the default),
a template of the shapes below is instead sent as one query per *term*, over every valid pod of the
tick at once, grouped by the pod and by every label the scopes' matchers name:

    sum by (pod, model_name, namespace) (rate(vllm:prompt_tokens_total{pod=~"a|b|..."}[60000ms]))

and each scope (a service, a variant, a pool) is the sum of the groups of its pods that its own
matchers select, evaluated here on the group's labels. A ``histogram_quantile`` term is grouped by
``le`` too and its quantile computed here as Prometheus computes it (``bucket_quantile``).

The shapes (``decompose``; whitespace free, ``<M>`` a metric name, ``{...}`` its matchers with ``$sel``
once among them, ``<q>`` a number):

- ``sum(rate(<M>{...}[$window]))``, ``sum(<M>{...})``, ``avg(<M>{...})``;
- ``histogram_quantile(<q>, sum by (le) (rate(<M>{...}[$window])))``, or of ``sum by (le) (<M>{...})``
  (a recorded rate, the ``recorded`` set);
- two of those joined by one of ``+ - * /`` (a mean: ``rate(_sum) / rate(_count)``).

Every template of the shipped query sets has one of them. A user's ``queries.<signal>`` that has
another shape, and a scope whose matchers this module cannot evaluate exactly as Prometheus does
(``parse_matchers``: a quoted label name, ``__name__``, a string escape other than ``\\\\ \\n \\t \\r``
and the string's own quote (another quote's escape, a raw newline: Prometheus refuses those too),
a regex outside the subset where RE2 and Python's ``re`` agree), is sent as before (a branch of the
batched ``or``): the aggregation changes how the answer is computed, never what it is. Values agree
with the per-scope queries' up to the order of floating-point additions (``avg`` divides a sum by a
count where Prometheus v2.42 keeps a running mean), ~1e-15 relative.

Sources: Prometheus v2.42 ``promql/quantile.go`` (``bucketQuantile``, ``coalesceBuckets``,
``ensureMonotonic``), ``promql/functions.go`` (``funcHistogramQuantile``: a series whose ``le`` does not
parse as a float is left out), ``model/labels/matcher.go`` and ``regexp.go`` (``=~`` is anchored at
both ends; a label the series lacks reads as ``""``).
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from autoscaler.promql import duration, exact_alternation, quote

_NAME = r"[a-zA-Z_][a-zA-Z0-9_]*"
_METRIC = r"[a-zA-Z_:][a-zA-Z0-9_:]*"
_STRING = r""""(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'|`[^`]*`"""
_SEL = r"\$(?:sel|\{sel\})"
_ITEM = re.compile(rf"\s*(?:(?P<sel>{_SEL})|(?P<name>{_NAME})\s*(?P<op>=~|!~|!=|=)\s*(?P<value>{_STRING}))\s*(?:,|$)")
_ESCAPES = {"\\": "\\", "n": "\n", "t": "\t", "r": "\r"}
"""Escapes read in a quoted string, besides its own quote's (PromQL's lexer, ``lexEscape``, refuses ``\\'``
in a double-quoted string and ``\\"`` in a single-quoted one)."""
_PUNCT = r"[ -/:-@\[-`{-~]"  # printable ASCII that is not a letter or digit: what RE2 reads escaped as itself
_REGEX_SAFE = re.compile(rf"""(?:[^\\$^(\[]|\\{_PUNCT}|\(\?:|\((?!\?)|\[\^?(?:[^\]\\\[]|\\{_PUNCT})+\])*""")
"""A regex in the subset where Go's RE2 (anchored, as Prometheus anchors ``=~``) and Python's ``re.fullmatch``
agree: literals, ``. * + ? | {m,n}``, groups ``( )`` and ``(?: )``, classes ``[...]`` of literals and ranges,
and backslash-escaped ASCII punctuation. Left out: ``^ $`` (Python's ``$`` also matches before a final
newline), ``\\d \\w \\s \\b`` and other lettered escapes (Unicode in Python, ASCII in RE2), a backslash
before a non-ASCII character (a literal in Python, an error in RE2), flags ``(?i)``, POSIX classes
``[[:alpha:]]``; and (``_regex_ok``) possessive quantifiers ``*+ ++ ?+ {n}+`` (Python 3.11's, an error in
RE2) and counted repetitions past RE2's limits."""
_REPEAT = re.compile(r"\{([0-9]+)(?:,([0-9]*))?\}")
MAX_REPEAT = 1000
"""RE2's largest repetition count (Go ``regexp/syntax``, ``parse.go``: ``{1001}`` is "invalid repeat count")."""


@dataclass(frozen=True)
class Matcher:
    """One label matcher: ``name op value`` with ``op`` one of ``= != =~ !~`` and ``value`` unquoted."""

    name: str
    op: str
    value: str

    def matches(self, labels: Mapping[str, str]) -> bool:
        """Whether a series (or group) with ``labels`` is selected (an absent label reads as ``""``)."""
        got = labels.get(self.name, "")
        if self.op == "=":
            return got == self.value
        if self.op == "!=":
            return got != self.value
        hit = _compiled(self.value).fullmatch(got) is not None
        return hit if self.op == "=~" else not hit


@functools.lru_cache(maxsize=4096)
def _compiled(regex: str) -> re.Pattern[str]:
    return re.compile(regex)


def _regex_ok(regex: str) -> bool:
    """Whether RE2 and Python's ``re.fullmatch`` read ``regex`` alike (``_REGEX_SAFE``): also no possessive
    quantifier, no ``{,n}`` (a literal in RE2), each count at most ``MAX_REPEAT`` and their product too
    (RE2 refuses nested repetitions past it; a product over all of them is stricter, never looser)."""
    if not _REGEX_SAFE.fullmatch(regex) or "{," in regex:
        return False
    product = 1
    for m in _REPEAT.finditer(regex):
        product *= max(int(m[1]), int(m[2]) if m[2] else 0, 1)
        if product > MAX_REPEAT:
            return False
    unescaped = re.sub(r"\\.|\[\^?(?:[^\]\\]|\\.)+\]", "x", regex)  # quantifiers outside classes and escapes
    return re.search(r"(?:[*+?]|\{[0-9]+(?:,[0-9]*)?\})\+", unescaped) is None


def _unquote(literal: str) -> str | None:
    """A PromQL string literal's value; None for an escape this module does not read (``_ESCAPES``) and
    for what PromQL's lexer refuses: another quote's escape, a raw newline in a quoted string."""
    body = literal[1:-1]
    if literal[0] == "`":
        return body
    if "\n" in body:  # lexString: "unterminated quoted string"
        return None
    out, i = [], 0
    while i < len(body):
        c = body[i]
        if c == "\\":
            nxt = body[i + 1] if i + 1 < len(body) else ""
            if nxt == literal[0]:
                out.append(nxt)
            elif nxt in _ESCAPES:
                out.append(_ESCAPES[nxt])
            else:
                return None
            i += 2
        else:
            out.append(c)
            i += 1
    return "".join(out)


def _items(text: str) -> list[tuple[str, Matcher | None]] | None:
    """``text`` (matchers without braces) as (source text, matcher) items, ``$sel`` as ``(text, None)``;
    None when it is not such a list or a matcher is not one ``Matcher.matches`` reads exactly."""
    out: list[tuple[str, Matcher | None]] = []
    pos, text = 0, text.strip()
    while pos < len(text):
        m = _ITEM.match(text, pos)
        if m is None or m.end() == pos:
            return None
        pos = m.end()
        src = m.group(0).strip().rstrip(",").strip()
        if m["sel"]:
            out.append((src, None))
            continue
        value = _unquote(m["value"])
        if value is None or m["name"] == "__name__":
            return None
        if m["op"] in ("=~", "!~"):
            if not _regex_ok(value):
                return None
            try:
                _compiled(value)
            except re.error:
                return None
        out.append((src, Matcher(m["name"], m["op"], value)))
    return out


UNGROUPABLE = frozenset({"inf", "nan", "without"})
"""Label names (any case) a matcher may name but a ``by (...)`` clause may not: Prometheus v2.42 refuses
``sum by (pod, inf) (...)`` (HTTP 400; ``inf`` and ``nan`` lex as numbers, ``without`` as the keyword),
and one scope's so named would have every per-pod query of the tick refused and sent again as before."""


@functools.lru_cache(maxsize=4096)
def parse_matchers(text: str) -> tuple[Matcher, ...] | None:
    """``a="b",c=~"d.*"`` -> its matchers; None when the text has ``$sel``, is not a matcher list, has a
    matcher this module cannot evaluate exactly as Prometheus does (module docstring), or names a label
    the per-pod queries cannot group by (``UNGROUPABLE``)."""
    items = _items(text)
    if items is None or any(m is None or m.name.lower() in UNGROUPABLE for _, m in items):
        return None
    return tuple(m for _, m in items if m is not None)


@dataclass(frozen=True)
class Term:
    """One aggregation of a template over the scope's series.

    Attributes:
        kind: ``sum``, ``avg`` or ``quantile``.
        inner: the aggregated expression with ``$sel`` (``rate(M{...,$sel}[$window])`` or ``M{...,$sel}``).
        q: the quantile (``quantile`` only).
    """

    kind: str
    inner: str
    q: float = math.nan


@dataclass(frozen=True)
class Decomposed:
    """A template as one term, or two joined by ``op`` (``+ - * /``)."""

    left: Term
    op: str | None = None
    right: Term | None = None

    def terms(self) -> tuple[Term, ...]:
        return (self.left,) if self.right is None else (self.left, self.right)


def _selector(tag: str) -> str:
    return rf"(?P<metric{tag}>{_METRIC})\s*\{{(?P<matchers{tag}>[^{{}}]*)\}}"


def _rated(tag: str) -> str:
    return r"rate\s*\(\s*" + _selector(tag) + r"\s*\[\s*\$(?:window|\{window\})\s*\]\s*\)"


def _term_pattern(i: str) -> str:
    return (rf"(?:(?P<agg{i}>sum|avg)\s*\(\s*(?:(?P<rate{i}>{_rated('r' + i)})|(?P<plain{i}>{_selector('p' + i)}))\s*\)"
            rf"|histogram_quantile\s*\(\s*(?P<q{i}>[0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)\s*,\s*"
            rf"sum\s+by\s*\(\s*le\s*\)\s*\(\s*(?P<hist{i}>{_rated('h' + i)}|{_selector('g' + i)})\s*\)\s*\))")


_TEMPLATE = re.compile(r"\s*" + _term_pattern("0") + r"\s*(?:(?P<op>[-+*/])\s*" + _term_pattern("1") + r")?\s*")


def _term(m: re.Match[str], i: int) -> Term | None:
    if m[f"q{i}"] is not None:
        matchers = m[f"matchersh{i}"] if m[f"matchersh{i}"] is not None else m[f"matchersg{i}"]
        kind, inner, q = "quantile", m[f"hist{i}"], float(m[f"q{i}"])
    elif m[f"agg{i}"] is not None:
        rated = m[f"rate{i}"] is not None
        kind, q = m[f"agg{i}"], math.nan
        inner = m[f"rate{i}"] if rated else m[f"plain{i}"]
        matchers = m[f"matchersr{i}"] if rated else m[f"matchersp{i}"]
        if kind == "avg" and rated:
            return None
    else:
        return None
    items = _items(matchers)
    if items is None or sum(1 for _, x in items if x is None) != 1:
        return None
    return Term(kind, inner, q)


@functools.lru_cache(maxsize=1024)
def decompose(template: str) -> Decomposed | None:
    """``template`` as terms ``aggregate`` can send (module docstring); None for any other shape."""
    m = _TEMPLATE.fullmatch(template)
    if m is None:
        return None
    left = _term(m, 0)
    if left is None:
        return None
    if m["op"] is None:
        return Decomposed(left)
    right = _term(m, 1)
    return None if right is None else Decomposed(left, m["op"], right)


CHUNK = 256
"""Pod names per ``=~`` alternation in a per-pod query: Prometheus v2.42 reads an alternation of up to 256
literals as a set (``model/labels/regexp.go``, ``maxSetMatches``), a lookup per name, not a regex over
every value of the label; more pods are read as several selectors joined by ``or`` (disjoint pods)."""


def pods_query(term: Term, kind: str, pod_label: str, names: Iterable[str], by: Sequence[str],
               window_s: float) -> str:
    """The per-pod query of ``term``: ``kind`` (``sum`` or ``count``) ``by`` (``by``) of its inner
    expression over the pods ``names`` (chunks of ``CHUNK`` joined by ``or``), the window rendered."""
    names = sorted(set(names))
    w = duration(window_s)
    parts = []
    for i in range(0, len(names), CHUNK):
        sel = f"{pod_label}=~{quote(exact_alternation(names[i:i + CHUNK]))}"
        parts.append(term.inner.replace("${sel}", sel).replace("$sel", sel)
                     .replace("${window}", w).replace("$window", w))
    return f"{kind} by ({', '.join(by)}) ({' or '.join(parts)})"


def bucket_quantile(q: float, buckets: Sequence[tuple[float, float]]) -> float:
    """Prometheus v2.42's ``bucketQuantile`` over (upper bound, cumulative count) pairs (any order):
    NaN without a +Inf bucket, with fewer than two buckets or no observations; the highest finite
    bound when the rank falls in the +Inf bucket; else linear interpolation inside the bucket, from
    0 for the first (or its bound when that is <= 0); the bucket found by binary search and divided as
    IEEE 754 divides (``q`` 0 over an empty first bucket is NaN, not ZeroDivisionError), as Go's code."""
    if math.isnan(q):
        return math.nan
    if q < 0:
        return -math.inf
    if q > 1:
        return math.inf
    bs = sorted(buckets, key=lambda b: b[0])
    if not bs or not math.isinf(bs[-1][0]) or bs[-1][0] < 0:
        return math.nan
    merged: list[list[float]] = []
    for bound, count in bs:  # coalesceBuckets: equal bounds ("1" and "1.0") added
        if merged and merged[-1][0] == bound:
            merged[-1][1] += count
        else:
            merged.append([bound, count])
    top = merged[0][1]
    for b in merged[1:]:  # ensureMonotonic: from the first count, so a NaN there compares false all along
        if b[1] > top:
            top = b[1]
        elif b[1] < top:
            b[1] = top
    if len(merged) < 2:
        return math.nan
    observations = merged[-1][1]
    if observations == 0:
        return math.nan
    rank = q * observations
    lo, hi = 0, len(merged) - 1  # Go's sort.Search: a NaN count (left as is by ensureMonotonic) makes it
    while lo < hi:  # answer otherwise than a scan for the first count >= rank would
        mid = (lo + hi) // 2
        if merged[mid][1] >= rank:
            hi = mid
        else:
            lo = mid + 1
    i = lo
    if i == len(merged) - 1:
        return merged[-2][0]
    if i == 0 and merged[0][0] <= 0:
        return merged[0][0]
    start, end, count = 0.0, merged[i][0], merged[i][1]
    if i > 0:
        start = merged[i - 1][0]
        count -= merged[i - 1][1]
        rank -= merged[i - 1][1]
    return start + (end - start) * binary("/", rank, count)  # q = 0 over an empty first bucket: 0 / 0, NaN


_DIGITS = r"[0-9](?:_?[0-9])*"
_HEX_DIGITS = r"[0-9a-fA-F](?:_?[0-9a-fA-F])*"
_GO_FLOAT = re.compile(
    rf"[+-]?(?:(?P<dec>(?:{_DIGITS}(?:\.(?:{_DIGITS})?)?|\.{_DIGITS})(?:[eE][+-]?{_DIGITS})?)"
    rf"|(?P<hex>0[xX]_?(?:{_HEX_DIGITS}(?:\.(?:{_HEX_DIGITS})?)?|\.{_HEX_DIGITS})[pP][+-]?{_DIGITS})"
    r"|(?i:inf|infinity))|(?i:nan)")
"""What Go's ``strconv.ParseFloat`` reads (Go 1.19 ``atof.go``): decimal and hexadecimal (``p`` exponent
required) literals, ``_`` between digits (or after ``0x``), ``inf``/``infinity`` signed or not, ``nan``
unsigned, any case; no spaces, ASCII digits only. Python's ``float`` also reads " 1", "+nan", "١"."""


def _parse_le(text: str) -> float | None:
    """A bucket's ``le`` as ``funcHistogramQuantile`` reads it (``strconv.ParseFloat``, ``_GO_FLOAT``); None
    for one it leaves out: not a Go float, or beyond float64's range (Go's ``ErrRange``, with ±Inf)."""
    m = _GO_FLOAT.fullmatch(text)
    if m is None:
        return None
    plain = text.replace("_", "")
    if m["hex"] is not None:
        try:
            return float.fromhex(plain)
        except OverflowError:
            return None
    value = float(plain)
    return None if m["dec"] is not None and math.isinf(value) else value


def binary(op: str, a: float, b: float) -> float:
    """``a op b`` as PromQL evaluates it on two floats (IEEE 754: x / 0 is +-Inf, 0 / 0 NaN)."""
    if op == "+":
        return a + b
    if op == "-":
        return a - b
    if op == "*":
        return a * b
    if b == 0:
        return math.nan if a == 0 or math.isnan(a) else math.copysign(math.inf, a) * math.copysign(1.0, b)
    return a / b


Group = tuple[dict[str, str], float]
"""One series of a per-pod answer: its labels (the ``by`` labels it has) and value."""


def scope_value(decomposed: Decomposed, answers: Mapping[tuple[Term, str], Mapping[str, list[Group]]],
                rest: Sequence[Matcher], names: Iterable[str], pod_label: str) -> float | None:
    """A scope's value of ``decomposed``: its pods' groups (``answers``: (term, ``sum``/``count``) -> pod ->
    groups) that ``rest`` selects, aggregated as the template aggregates its series; None where the
    template's answer would have no series (no group selected, or a quantile with no parseable ``le``)."""
    pods = list(names)

    def selected(term: Term, kind: str) -> list[Group]:
        by_pod = answers[(term, kind)]
        return [g for p in pods for g in by_pod.get(p, ()) if all(m.matches(g[0]) for m in rest)]

    def value(term: Term) -> float | None:
        groups = selected(term, "sum")
        if not groups:
            return None
        if term.kind == "sum":
            return sum(v for _, v in groups)
        if term.kind == "avg":
            counts = selected(term, "count")
            n = sum(v for _, v in counts)
            total = sum(v for _, v in groups)
            return total / n if n else math.nan
        per_le: dict[str, float] = {}
        for labels, v in groups:
            le = labels.get("le", "")
            per_le[le] = per_le.get(le, 0.0) + v
        buckets = [(b, c) for le, c in per_le.items() if (b := _parse_le(le)) is not None]
        return bucket_quantile(term.q, buckets) if buckets else None

    left = value(decomposed.left)
    if decomposed.right is None or decomposed.op is None:
        return left
    right = value(decomposed.right)
    return None if left is None or right is None else binary(decomposed.op, left, right)
