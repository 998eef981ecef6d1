"""Log lines with structured fields, as text or one JSON object per line (``autoscaler run --log-format``).

A record's fields are the ``extra`` of its call (``log.info("decision", extra={"service": ...,
"reason": ...})``), kept as values, not formatted into the message. The shapes follow controller-runtime's
(zap's) production logger:

- JSON: ``{"ts": "2026-12-04T18:40:00.123Z", "level": "info", "logger": "autoscaler.daemon",
  "msg": "decision", "service": "llama", "reason": "...", "applied": {"h100": 2}}``: ``ts`` is
  RFC 3339 in UTC with milliseconds, the fields top-level keys (a field named like one of the
  record's own keys is prefixed ``field_``), ``error`` the traceback of an exception;
- text: ``2026-12-04T18:40:00.123Z INFO autoscaler.daemon: decision service=llama reason="..."
  applied={"h100": 2}``: values that are not a plain word are JSON.
"""

from __future__ import annotations

import json
import logging
import math
import re
from datetime import UTC, datetime
from typing import Any

# The attributes every LogRecord has (and the two Formatter.format adds): whatever else is an ``extra`` field.
_RECORD_KEYS = frozenset(logging.LogRecord("", 0, "", 0, "", (), None).__dict__) | {"message", "asctime"}
_OWN_KEYS = ("ts", "level", "logger", "msg", "error")
_WORD = re.compile(r"[A-Za-z0-9_./:@+-]+")


def record_fields(record: logging.LogRecord) -> dict[str, Any]:
    """The ``extra`` fields of ``record``, in the order given."""
    return {k: v for k, v in record.__dict__.items() if k not in _RECORD_KEYS and not k.startswith("_")}


def rfc3339(created: float) -> str:
    """A POSIX time (s) as RFC 3339 in UTC with milliseconds: ``2026-12-04T18:40:00.123Z``."""
    return datetime.fromtimestamp(created, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def plain(value: Any) -> Any:
    """``value`` as what JSON holds, so a field never drops its record or writes invalid JSON: mapping
    keys as strings, a non-finite float as its name (``"NaN"``, ``"Infinity"``), a numpy scalar as its
    number, a datetime in RFC 3339, sequences and sets as lists, anything else as ``str``."""
    if value is None or isinstance(value, bool | int | str):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else json.dumps(value)
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [plain(v) for v in value]
    if isinstance(value, datetime):
        return value.isoformat().replace("+00:00", "Z")
    item = getattr(value, "item", None)  # a numpy scalar
    if callable(item) and getattr(value, "shape", None) == ():
        return plain(item())
    return str(value)


def _text_value(value: Any) -> str:
    if isinstance(value, str) and _WORD.fullmatch(value):
        return value
    return json.dumps(plain(value), allow_nan=False)


class JsonFormatter(logging.Formatter):
    """One JSON object per record (module docstring)."""

    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {"ts": rfc3339(record.created), "level": record.levelname.lower(),
                               "logger": record.name, "msg": record.getMessage()}
        for key, value in record_fields(record).items():
            out[f"field_{key}" if key in _OWN_KEYS else key] = value
        if record.exc_info:
            out["error"] = self.formatException(record.exc_info)
        return json.dumps(plain(out), allow_nan=False)


class TextFormatter(logging.Formatter):
    """``TS LEVEL LOGGER: MESSAGE key=value...`` (module docstring); a traceback on the lines after."""

    def format(self, record: logging.LogRecord) -> str:
        # one record, one line: a newline in the message (an API server's webhook denial) is escaped, so
        # the text after it cannot read as a record of its own; only the traceback takes lines below
        msg = record.getMessage().replace("\n", "\\n").replace("\r", "\\r")
        line = f"{rfc3339(record.created)} {record.levelname} {record.name}: {msg}"
        extra = " ".join(f"{k}={_text_value(v)}" for k, v in record_fields(record).items())
        if extra:
            line += " " + extra
        if record.exc_info:
            line += "\n" + self.formatException(record.exc_info)
        return line


def formatter(log_format: str) -> logging.Formatter:
    """``JsonFormatter`` for ``json``, ``TextFormatter`` for ``text``.

    Raises:
        ValueError: another format.
    """
    if log_format == "json":
        return JsonFormatter()
    if log_format == "text":
        return TextFormatter()
    raise ValueError(f"--log-format must be text or json, got '{log_format}'")
