"""Reading one JSON object from a file, with the one-line errors the profile readers give."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from autoscaler.errors import ProfileError


def read_object(path: Path, what: str) -> dict[str, Any]:
    """The JSON object in ``path``, a ``what`` (e.g. ``"profile file"``), for messages.

    Raises:
        ProfileError: the file is unreadable, not JSON, or not one JSON object; one line naming it.
    """
    try:
        if path.exists() and not path.is_file():  # a directory, a device (/dev/zero reads forever)
            raise ProfileError(f"{path}: cannot read {what}: not a regular file")
        doc = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ProfileError(f"{path}: cannot read {what}: {exc.strerror}") from None
    except RecursionError:
        raise ProfileError(f"{path}: not a JSON {what}: nested too deeply") from None
    except (UnicodeDecodeError, ValueError) as exc:  # JSONDecodeError, and ints over Python's digit limit
        raise ProfileError(f"{path}: not a JSON {what}: {' '.join(str(exc).split())}") from None
    if not isinstance(doc, dict):
        raise ProfileError(f"{path}: a {what} is one JSON object, got {type(doc).__name__}")
    return doc
