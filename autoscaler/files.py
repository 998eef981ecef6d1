"""Writing a run's outputs so that a reader never mistakes an old or half-written file for this run's.

A run first removes the files it is about to write (``clear``), so an interrupted run leaves none of
an earlier run's behind under its names; each file is then written to a temporary name in the same
directory, flushed to disk and renamed into place (``atomic``), so a reader sees the whole file or none
of it, after a crash too; ``clear`` also removes the temporary files a killed run left.
"""

from __future__ import annotations

import os
import stat
import tempfile
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path


def read_regular(path: Path, limit: int | None = None) -> bytes:
    """The bytes of ``path``, which must be a regular file (a device, a FIFO or a socket would block or
    never end: ``--config /dev/zero``) of at most ``limit`` bytes when given.

    Raises:
        OSError: it cannot be read (``strerror`` says why).
        ValueError: it is not a regular file, or is larger than ``limit``.
    """
    info = os.stat(path)
    if not stat.S_ISREG(info.st_mode):
        kind = "a directory" if stat.S_ISDIR(info.st_mode) else "not a regular file (a device, FIFO or socket)"
        raise ValueError(f"is {kind}")
    with open(path, "rb") as f:
        data = f.read() if limit is None else f.read(limit + 1)
    if limit is not None and len(data) > limit:
        raise ValueError(f"larger than {limit // 2**20} MiB")
    return data


def check_writable(out: Path) -> None:
    """Create directory ``out`` if needed and check that files can be created in it, before any long work.

    Raises:
        ValueError: ``out`` exists and is not a directory, cannot be created, or refuses a new file.
    """
    if out.exists() and not out.is_dir():
        raise ValueError(f"--out {out}: exists and is not a directory")
    try:
        out.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=out):
            pass
    except OSError as exc:
        raise ValueError(f"--out {out}: cannot write there: {exc.strerror}") from None


def clear(out: Path, names: Iterable[str]) -> None:
    """Remove ``out / name`` for each name that exists (the outputs an earlier run left).

    Raises:
        ValueError: one of them is a directory or cannot be removed.
    """
    for name in names:
        path = out / name
        if path.is_dir() and not path.is_symlink():
            raise ValueError(f"{path}: is a directory, where this run writes a file")
        try:
            path.unlink(missing_ok=True)
            for tmp in out.glob(f".{name}.tmp-*"):  # a killed run's half-written file
                tmp.unlink(missing_ok=True)
        except OSError as exc:
            raise ValueError(f"{path}: cannot remove the earlier run's file: {exc.strerror}") from None


@contextmanager
def atomic(path: Path) -> Iterator[Path]:
    """A temporary path beside ``path`` to write to; renamed to ``path`` when the block succeeds,
    removed when it fails.

    Raises:
        OSError: writing or renaming failed; the message names ``path``, not the temporary file.
    """
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        yield tmp
        _fsync(tmp)  # the data on disk before the name points at it: a crash leaves the old file or the new
        os.replace(tmp, path)
        _fsync(path.parent, directory=True)  # the rename itself
    except OSError as exc:
        raise OSError(f"cannot write {path}: {exc.strerror}") from None
    finally:
        tmp.unlink(missing_ok=True)


def _fsync(path: Path, directory: bool = False) -> None:
    fd = os.open(path, os.O_RDONLY | (os.O_DIRECTORY if directory else 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_text(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` atomically."""
    with atomic(path) as tmp:
        tmp.write_text(text)
