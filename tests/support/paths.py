"""Where the tests find the repository and the public data beside its clone."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
"""The repository's root (the folder holding pyproject.toml)."""

DATA_DIR = ROOT.parent / "shared" / "data"
"""The shared public traces and GPU measurements (``../shared/data`` beside the clone)."""
