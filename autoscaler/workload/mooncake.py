"""Loader for Mooncake (Kimi, FAST'25) JSONL traces.

Source: github.com/kvcache-ai/Mooncake ``FAST25-release/traces/conversation_trace.jsonl``, last changed
in commit 3cca71daccf2a7afb8fe3f0295358f70e3a69fdb (copy in ``shared/data/mooncake``).

Format: one JSON object per line,
``{"timestamp": <ms>, "input_length": <tokens>, "output_length": <tokens>, "hash_ids": [<int>, ...]}``;
``hash_ids`` are chained prefix-block hashes of 512-token blocks (equal leading ids = shareable KV).

Rules:
    * ``arrival_s`` = (timestamp - earliest timestamp) / 1000. Rows out of order are accepted
      (``Workload`` sorts them); the conversation trace is sorted and starts at 0.
    * ``output_length == 0`` is clamped to 1 token (vLLM always emits one token). Checked on the
      conversation trace (12,031 rows): no row has 0, 72 rows have exactly 1, minimum 1; the number
      clamped is in ``meta["clamped_zero_output"]``.
    * ``hash_ids`` must be non-negative integers (``shape`` offsets them) and at most
      ceil(input_length / 512) of them; the real files have exactly that many on every row.
    * Blank lines are skipped; extra keys are ignored; any other problem raises ``TraceError``
      naming the file and the 1-based line.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Iterator
from pathlib import Path

from autoscaler.workload._common import MAX_TOKENS, check_span, output_count, read_lines, show, trace_error
from autoscaler.workload.types import Request, Workload

BLOCK_TOKENS = 512
KEYS = ("timestamp", "input_length", "output_length", "hash_ids")
# 10^13 ms is about 317 years: beyond any epoch-ms timestamp, and small enough to convert to float.
MAX_TIMESTAMP_MS = 10**13


class DuplicateKeyError(ValueError):
    """A JSON object names one key twice (``json`` would keep the last value silently)."""


def _unique_keys(pairs: list[tuple[str, object]]) -> dict[str, object]:
    out: dict[str, object] = {}
    for k, v in pairs:
        if k in out:
            raise DuplicateKeyError(k)
        out[k] = v
    return out


def _is_int(value: object) -> bool:
    """True for a JSON integer (``bool`` is an ``int`` subclass in Python but not a count)."""
    return isinstance(value, int) and not isinstance(value, bool)


def mooncake_rows(p: Path, lines: Iterable[tuple[int, str]]) -> Iterator[tuple[int, int | float, int, int, bool,
                                                                             list[int]]]:
    """The requests of a Mooncake file's non-blank ``lines`` (``_common.read_lines``/``iter_lines``) one at a
    time, in file order: (line, timestamp ms, input_length, output_length clamped to >= 1, whether it
    was clamped, hash_ids).

    Raises:
        TraceError: as ``load_mooncake``, but for the span (``_common.check_span``: the caller's).
    """
    for n, text in lines:
        try:
            obj = json.loads(text, object_pairs_hook=_unique_keys)
        except DuplicateKeyError as err:
            raise trace_error(p, n, f"key {err.args[0]!r} given twice") from None
        except json.JSONDecodeError as err:
            raise trace_error(p, n, f"invalid JSON ({err.msg} at column {err.colno})") from None
        except ValueError as err:  # e.g. an integer literal beyond Python's 4300-digit limit
            raise trace_error(p, n, f"invalid JSON ({show(str(err), 60)})") from None
        except RecursionError:
            raise trace_error(p, n, "invalid JSON (nested too deeply)") from None
        if not isinstance(obj, dict):
            raise trace_error(p, n, f"expected a JSON object, found {type(obj).__name__}")
        missing = [k for k in KEYS if k not in obj]
        if missing:
            raise trace_error(p, n, f"missing key {missing[0]!r}")
        ts, inp, out, hashes = (obj[k] for k in KEYS)

        if not (_is_int(ts) or isinstance(ts, float)):
            raise trace_error(p, n, f"timestamp must be a number of ms, found {show(ts)}")
        if abs(ts) > MAX_TIMESTAMP_MS or not math.isfinite(ts) or ts < 0:
            raise trace_error(p, n, f"bad timestamp {ts!r} (must be finite and >= 0 ms)")
        for key, value in (("input_length", inp), ("output_length", out)):
            if not _is_int(value):
                raise trace_error(p, n, f"{key} must be an integer token count, found {show(value)}")
            if value < 0:
                raise trace_error(p, n, f"{key} is negative ({value})")
            if value > MAX_TOKENS:
                raise trace_error(p, n, f"{key} is implausibly large ({show(value)} > {MAX_TOKENS} tokens)")
        if inp == 0:
            raise trace_error(p, n, "input_length is 0 (a request needs at least one prompt token)")
        if not isinstance(hashes, list):
            raise trace_error(p, n, f"hash_ids must be a list, found {type(hashes).__name__}")
        for h in hashes:
            if not _is_int(h) or h < 0:
                raise trace_error(p, n, f"hash_ids must hold non-negative integers, found {show(h)}")
        if len(hashes) > -(-inp // BLOCK_TOKENS):
            raise trace_error(
                p, n, f"{len(hashes)} hash_ids for {inp} tokens (at most one per {BLOCK_TOKENS}-token block)"
            )

        output_tokens, was_clamped = output_count(out)
        yield n, ts, inp, output_tokens, was_clamped, hashes


def load_mooncake(path: str | Path) -> Workload:
    """Load a Mooncake JSONL trace into a ``Workload`` with ``block_tokens`` = 512.

    Args:
        path: the JSONL file.

    Returns:
        requests with ``arrival_s`` in seconds from the earliest timestamp, ``input_tokens`` =
        input_length, ``output_tokens`` = output_length, ``hash_ids`` as given; class interactive and
        no workflows (see ``classes.group_workflows``).

    Raises:
        TraceError: missing/empty/non-UTF-8 file, invalid JSON, a line that is not an object, a
            missing or repeated key, a value of the wrong type, a negative or non-finite timestamp,
            timestamps spread over more than ``_common.MAX_SPAN_S`` (ten years), a negative
            count, input_length == 0, or too many / negative hash_ids.
    """
    p, lines = read_lines(path)
    stamps_ms: list[float] = []
    rows: list[int] = []
    requests: list[Request] = []
    clamped = 0
    for n, ts, inp, output_tokens, was_clamped, hashes in mooncake_rows(p, lines):
        clamped += was_clamped
        stamps_ms.append(ts)
        rows.append(n)
        requests.append(Request(arrival_s=0.0, input_tokens=inp, output_tokens=output_tokens, hash_ids=tuple(hashes)))

    check_span(p, [ts / 1000.0 for ts in stamps_ms], rows)
    origin = min(stamps_ms)
    for r, ts in zip(requests, stamps_ms, strict=True):
        r.arrival_s = (ts - origin) / 1000.0
    return Workload(
        requests,
        block_tokens=BLOCK_TOKENS,
        source=str(p),
        meta={"format": "mooncake", "clamped_zero_output": clamped},
    )
