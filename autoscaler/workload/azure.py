"""Loader for the Azure LLM inference trace 2023 (Splitwise, ISCA'24).

Source: github.com/Azure/AzurePublicDataset ``data/AzureLLMInferenceTrace_{conv,code}.csv``, files last
changed in commit 790921015d50dd6aae7f7e47f39ba0e235ad6b08 (copy in ``shared/data/azure-llm-2023``).

Format: header ``TIMESTAMP,ContextTokens,GeneratedTokens``, then one request per line:
``2023-11-16 18:15:46.6805900,374,44`` — wall-clock arrival with up to 9 fractional digits (the files
have 7; Python's ``datetime`` takes only 6, so the time is parsed by hand), prompt tokens, generated
tokens.

Rules:
    * ``arrival_s`` is seconds after the earliest TIMESTAMP in the file (= the first row, as the files
      are sorted). Rows out of order are accepted; ``Workload`` sorts them by arrival.
    * Blank lines are skipped. The trace has no prefix hashes: ``hash_ids`` is empty and
      ``block_tokens`` is irrelevant (kept at the 512 default); no workflows, no classes.
    * ``GeneratedTokens == 0`` is clamped to 1 (vLLM always emits one token); the real files have no
      such row. The number clamped is in ``meta["clamped_zero_output"]``.
    * Any other problem raises ``TraceError`` naming the file and the 1-based line.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from datetime import date
from pathlib import Path

from autoscaler.workload._common import MAX_TOKENS, check_span, output_count, read_lines, show, trace_error
from autoscaler.workload.types import Request, Workload

HEADER = "TIMESTAMP,ContextTokens,GeneratedTokens"
_TIMESTAMP = re.compile(r"(\d{4}-\d{2}-\d{2}) (\d{2}):(\d{2}):(\d{2})(?:\.(\d{1,9}))?")


def _count(path: Path, line: int, column: str, text: str) -> int:
    """Parse a non-negative integer token count; raise ``TraceError`` otherwise."""
    t = text.strip()
    if t.isascii() and t.isdigit():
        if len(t.lstrip("0")) > len(str(MAX_TOKENS)) or int(t) > MAX_TOKENS:
            raise trace_error(path, line, f"{column} is implausibly large ({show(t)} > {MAX_TOKENS} tokens)")
        return int(t)
    if t.startswith("-") and t[1:].isascii() and t[1:].isdigit():
        raise trace_error(path, line, f"{column} is negative ({t})")
    raise trace_error(path, line, f"{column} is not an integer token count: {show(text)}")


def azure_rows(p: Path, lines: Iterable[tuple[int, str]]) -> Iterator[tuple[int, float, int, int, bool]]:
    """The requests of an Azure CSV's non-blank ``lines`` (``_common.read_lines``/``iter_lines``) one at a
    time, in file order: (line, seconds from midnight of the first row's day, ContextTokens,
    GeneratedTokens clamped to >= 1, whether it was clamped).

    Raises:
        TraceError: as ``load_azure``, but for the span (``_common.check_span``: the caller's, on every row).
    """
    it = iter(lines)
    header_line, header = next(it)
    if header.strip() != HEADER:
        raise trace_error(p, header_line, f"wrong header {show(header, 60)}, expected {HEADER!r}")
    day_ordinals: dict[str, int] = {}  # date text -> ordinal; parse and validate each date once
    first_day: int | None = None
    for n, text in it:
        fields = text.split(",")
        if len(fields) != 3:
            raise trace_error(p, n, f"expected 3 comma-separated columns, found {len(fields)}")
        m = _TIMESTAMP.fullmatch(fields[0].strip())
        if m is None:
            raise trace_error(p, n, f"bad TIMESTAMP {show(fields[0])}, expected like '2023-11-16 18:15:46.6805900'")
        day_text, hh, mm, ss, frac = m.groups()
        day = day_ordinals.get(day_text)
        if day is None:
            try:
                day = date.fromisoformat(day_text).toordinal()
            except ValueError:
                raise trace_error(p, n, f"bad TIMESTAMP date {day_text!r}") from None
            day_ordinals[day_text] = day
        h, mi, s = int(hh), int(mm), int(ss)
        if h > 23 or mi > 59 or s > 59:
            raise trace_error(p, n, f"bad TIMESTAMP time {fields[0].strip()!r}")
        if first_day is None:
            first_day = day
        # Seconds from midnight of the first row's day: small numbers keep the 100-ns digits exact.
        t = (day - first_day) * 86400 + h * 3600 + mi * 60 + s + (int(frac) / 10 ** len(frac) if frac else 0)
        input_tokens = _count(p, n, "ContextTokens", fields[1])
        if input_tokens == 0:
            raise trace_error(p, n, "ContextTokens is 0 (a request needs at least one prompt token)")
        output_tokens, was_clamped = output_count(_count(p, n, "GeneratedTokens", fields[2]))
        yield n, t, input_tokens, output_tokens, was_clamped
    if first_day is None:
        raise trace_error(p, header_line, "header only, no requests")


def load_azure(path: str | Path) -> Workload:
    """Load an Azure LLM inference trace 2023 CSV into a ``Workload``.

    Args:
        path: the CSV file.

    Returns:
        requests with ``arrival_s`` in seconds from the earliest row, ``input_tokens`` =
        ContextTokens, ``output_tokens`` = GeneratedTokens, class interactive, no hashes/workflows.

    Raises:
        TraceError: missing/empty/non-UTF-8 file, wrong header, no data rows, wrong column count,
            a bad timestamp, rows spread over more than ``_common.MAX_SPAN_S`` (ten years), a
            non-integer or negative count, or ContextTokens == 0.
    """
    p, lines = read_lines(path)
    times: list[float] = []
    rows: list[int] = []
    requests: list[Request] = []
    clamped = 0
    for n, t, input_tokens, output_tokens, was_clamped in azure_rows(p, lines):
        clamped += was_clamped
        times.append(t)
        rows.append(n)
        requests.append(Request(arrival_s=t, input_tokens=input_tokens, output_tokens=output_tokens))

    check_span(p, times, rows)
    origin = min(times)
    for r in requests:
        r.arrival_s -= origin
    return Workload(requests, source=str(p), meta={"format": "azure", "clamped_zero_output": clamped})
