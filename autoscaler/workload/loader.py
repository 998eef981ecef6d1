"""Load a trace file in any supported format, detecting the format from its content."""

from __future__ import annotations

from pathlib import Path

from autoscaler.workload._common import read_lines, show, trace_error
from autoscaler.workload.azure import load_azure
from autoscaler.workload.mooncake import load_mooncake
from autoscaler.workload.types import Workload

LOADERS = {"azure": load_azure, "mooncake": load_mooncake}


def detect_format(path: str | Path) -> str:
    """Return ``"mooncake"`` if the first non-blank line is a JSON object, ``"azure"`` if it is a CSV header.

    Raises:
        TraceError: the file is missing, unreadable or empty, or its first line is neither.
    """
    p, lines = read_lines(path)
    n, first = lines[0]
    first = first.strip()
    if first.startswith("{"):
        return "mooncake"
    if "," in first:
        return "azure"  # load_azure then checks the exact header
    raise trace_error(p, n, f"unrecognised trace format: first line {show(first, 60)} is neither a CSV header nor JSON")


def load_trace(path: str | Path, fmt: str | None = None) -> Workload:
    """Load a request trace.

    Args:
        path: trace file (Azure LLM inference 2023 CSV or Mooncake JSONL).
        fmt: ``"azure"`` or ``"mooncake"``; None detects it from the first non-blank line.

    Returns:
        the ``Workload`` (arrivals in seconds from the first request; see ``azure``/``mooncake``).

    Raises:
        TraceError: unknown ``fmt``, or any problem with the file (one line: file, line, problem).
    """
    if fmt is None:
        fmt = detect_format(path)
    loader = LOADERS.get(fmt)
    if loader is None:
        raise trace_error(Path(path), None, f"unknown trace format {fmt!r} (expected one of {sorted(LOADERS)})")
    return loader(path)
