"""Helpers shared by the trace loaders: reading lines and building one-line ``TraceError`` messages."""

from __future__ import annotations

import codecs
import os
import stat
from collections.abc import Iterator
from pathlib import Path

from autoscaler.errors import TraceError
from autoscaler.files import read_regular


def trace_error(path: Path, line: int | None, problem: str) -> TraceError:
    """Build a one-line ``TraceError``: ``<file>: line <n>: <problem>`` (``line`` 1-based, None if n/a)."""
    where = f"{path}: line {line}: " if line is not None else f"{path}: "
    # Collapse any whitespace (newlines in a quoted value) so the message stays on one line.
    return TraceError(where + " ".join(problem.split()))


def show(value: object, limit: int = 40) -> str:
    """``repr`` of a bad value for an error message, cut to ``limit`` characters."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def read_lines(path: str | Path) -> tuple[Path, list[tuple[int, str]]]:
    """Read a text trace and return its non-blank lines with their 1-based line numbers.

    Lines are split on ``\\n`` only (as an editor counts them); a trailing ``\\r`` and a leading UTF-8
    BOM are dropped. Raises ``TraceError`` if the file is missing, unreadable, not UTF-8 text, or has
    no non-blank line.
    """
    p = Path(path)
    try:
        data = read_regular(p)
    except FileNotFoundError:
        raise trace_error(p, None, "file not found") from None
    except OSError as err:
        raise trace_error(p, None, f"cannot read file ({err.strerror})") from None
    except ValueError as err:  # a directory, a device, a FIFO
        raise trace_error(p, None, f"{err}, not a trace file") from None
    data = data.removeprefix(codecs.BOM_UTF8)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as err:
        line = data[: err.start].count(b"\n") + 1
        raise trace_error(p, line, "not UTF-8 text (binary or wrongly encoded file)") from None
    lines = [(n, raw.rstrip("\r")) for n, raw in enumerate(text.split("\n"), start=1)]
    lines = [(n, s) for n, s in lines if s.strip()]
    if not lines:
        raise trace_error(p, None, "empty file (no requests)")
    return p, lines


# No served model has a context anywhere near this; a larger count is a corrupt field, and rejecting
# it keeps Python's int parsing (4300-digit limit) and float conversion from failing with a traceback.
MAX_TOKENS = 10_000_000


# The longest span of arrivals a trace may have: ten years, 3.2e8 s. A real trace covers hours to weeks
# (the Azure ones an hour, Mooncake's conversation trace one, ServeGen's 14 days); what lies beyond is
# a corrupt timestamp (a row dated 9999, a 317-year gap), and the run's arrays sized by the span (the
# goodput windows of 60 s, the loop's ticks) would take gigabytes to terabytes for a handful of requests.
MAX_SPAN_S = 10 * 365.25 * 86400.0


def check_span(path: Path, times: list[float], lines: list[int]) -> None:
    """Refuse arrivals spread over more than ``MAX_SPAN_S`` seconds, naming the latest row and the earliest.

    Args:
        path: the trace, for the message.
        times: each row's arrival, seconds on any common origin.
        lines: each row's 1-based line number, in the order of ``times``.

    Raises:
        TraceError: the span exceeds ``MAX_SPAN_S`` (``<file>: line <n>: ...``).
    """
    if not times:
        return
    first = min(range(len(times)), key=times.__getitem__)
    last = max(range(len(times)), key=times.__getitem__)
    span = times[last] - times[first]
    if span > MAX_SPAN_S:
        years = span / (365.25 * 86400)
        raise trace_error(path, lines[last], f"arrives {years:,.1f} years after line {lines[first]} (the earliest); "
                                             f"a trace may span at most {MAX_SPAN_S / (365.25 * 86400):.0f} years "
                                             "(a corrupt timestamp?)")


def output_count(value: int) -> tuple[int, bool]:
    """Clamp a generated-token count of 0 to 1 token (vLLM always emits at least one token).

    ``value`` must already be checked >= 0. Returns the count to use and whether it was clamped.
    """
    return (1, True) if value == 0 else (value, False)


READ_BLOCK = 1 << 20  # bytes read at a time by ``iter_lines``' UTF-8 check: 1 MiB, small against any run


def iter_lines(path: str | Path) -> tuple[Path, Iterator[tuple[int, str]]]:
    """``read_lines`` read lazily: the same lines and the same errors, the file held a line at a time.

    The file is checked first (present, a regular file, UTF-8 throughout, a non-blank line), in
    ``READ_BLOCK``-byte blocks, so a file ``read_lines`` refuses is refused here before any line is
    given, with the same message (such a file is handed to ``read_lines`` itself to raise it); then
    its non-blank lines are read one at a time as the iterator is advanced (the file is opened again).

    Raises:
        TraceError: as ``read_lines``.
    """
    p = Path(path)
    try:
        info = os.stat(p)
        if not stat.S_ISREG(info.st_mode):
            kind = "a directory" if stat.S_ISDIR(info.st_mode) else "not a regular file (a device, FIFO or socket)"
            raise trace_error(p, None, f"is {kind}, not a trace file")
        decoder = codecs.getincrementaldecoder("utf-8")()
        any_text, first = False, True
        with open(p, "rb") as f:
            while block := f.read(READ_BLOCK):
                if first:
                    block, first = block.removeprefix(codecs.BOM_UTF8), False  # read_lines' BOM, at the start
                try:
                    text = decoder.decode(block)
                except UnicodeDecodeError:
                    break
                any_text = any_text or bool(text.strip())
            else:
                try:
                    any_text = bool(decoder.decode(b"", final=True).strip()) or any_text
                except UnicodeDecodeError:
                    pass
                else:
                    if any_text:
                        return p, _lines(p)
        read_lines(p)  # not UTF-8 or no line: raises read_lines' own message (the file held once)
    except FileNotFoundError:
        raise trace_error(p, None, "file not found") from None
    except OSError as err:
        raise trace_error(p, None, f"cannot read file ({err.strerror})") from None
    raise trace_error(p, None, "empty file (no requests)")  # read_lines raised for every other case


def _lines(p: Path) -> Iterator[tuple[int, str]]:
    """The non-blank lines of ``p`` (checked by ``iter_lines``) with their 1-based numbers, one at a time."""
    with open(p, "rb") as f:
        for n, raw in enumerate(f, start=1):
            text = raw.removeprefix(codecs.BOM_UTF8).decode("utf-8") if n == 1 else raw.decode("utf-8")
            text = text.removesuffix("\n").rstrip("\r")
            if text.strip():
                yield n, text
