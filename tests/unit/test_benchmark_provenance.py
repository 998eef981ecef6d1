"""Every benchmark table carries the commit and date it ran on (issue 32, item 1)."""

from __future__ import annotations

import importlib.util
import re
import subprocess
from datetime import UTC, datetime
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SPEC = importlib.util.spec_from_file_location("bench_provenance", ROOT / "benchmarks" / "provenance.py")
assert SPEC is not None and SPEC.loader is not None
provenance = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(provenance)

NOW = datetime(2026, 1, 2, 3, 4, 59, tzinfo=UTC)


def test_the_stamp_names_this_checkout_s_commit_and_the_minute() -> None:
    head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True,
                          check=True).stdout.strip()
    m = re.fullmatch(r"commit ([0-9a-f]{7,40})(\+changes)?, 2026-01-02 03:04 UTC", provenance.stamp(NOW))
    assert m, provenance.stamp(NOW)
    assert head.startswith(m.group(1))


def test_without_git_the_stamp_says_the_commit_is_unknown(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(provenance, "_git", lambda *args: None)
    assert provenance.stamp(NOW) == "commit unknown, 2026-01-02 03:04 UTC"


HELPERS = ("provenance.py", "fleet_exposition.py")
"""Modules the benchmarks import, not benchmarks: they print no table."""


@pytest.mark.parametrize("script", sorted(p.name for p in (ROOT / "benchmarks").glob("*.py")
                                          if p.name not in HELPERS))
def test_every_benchmark_prints_the_stamp(script: str) -> None:
    """Each benchmark calls ``stamp()`` where it prints (a table pasted from its output keeps its commit)."""
    assert "stamp()" in (ROOT / "benchmarks" / script).read_text()
