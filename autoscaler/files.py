"""Writing a run's outputs so that a reader never mistakes an old or half-written file for this run's.

A run first removes the files it is about to write (``clear``), so an interrupted run leaves none of
an earlier run's behind under its names; each file is then written to a temporary name in the same
directory and renamed into place (``atomic``), so a reader sees the whole file or none of it.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path


def clear(out: Path, names: Iterable[str]) -> None:
    """Remove ``out / name`` for each name that exists (the outputs an earlier run left)."""
    for name in names:
        (out / name).unlink(missing_ok=True)


@contextmanager
def atomic(path: Path) -> Iterator[Path]:
    """A temporary path beside ``path`` to write to; renamed to ``path`` when the block succeeds,
    removed when it fails."""
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        yield tmp
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def write_text(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` atomically."""
    with atomic(path) as tmp:
        tmp.write_text(text)
