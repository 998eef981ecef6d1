"""The commit and date a benchmark's figures come from, printed with each of its tables.

docs/benchmarks.md quotes every table with the commit it ran on; a benchmark prints that line itself
so a table pasted from its output cannot lose it.
"""

from __future__ import annotations

import subprocess
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _git(*args: str) -> str | None:
    """``git args`` in the checkout's root: its stripped stdout, or None where git or the checkout is absent."""
    try:
        done = subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True, text=True, timeout=10,
                              check=True)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip()


def stamp(now: datetime | None = None) -> str:
    """``commit <short hash>[+changes], <UTC date and minute>``: what the figures printed next to it ran on.

    ``+changes`` marks a checkout with uncommitted changes to tracked files (its figures belong to no
    commit); ``commit unknown`` where the benchmark does not run from a git checkout.
    """
    head = _git("rev-parse", "--short", "HEAD")
    dirty = _git("status", "--porcelain", "--untracked-files=no")
    commit = "unknown" if head is None else head + ("+changes" if dirty else "")
    when = (now or datetime.now(UTC)).strftime("%Y-%m-%d %H:%M UTC")
    return f"commit {commit}, {when}"
