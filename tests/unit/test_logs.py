"""``autoscaler.logs`` (the daemon's log lines) and one warning per cause when Prometheus is down."""

from __future__ import annotations

import json
import logging
import sys
from datetime import UTC, datetime

import pytest

from autoscaler.logs import JsonFormatter, TextFormatter, formatter, rfc3339


def _record(msg: str, *args: object, extra: dict | None = None, exc: bool = False) -> logging.LogRecord:
    exc_info = None
    if exc:
        try:
            raise RuntimeError("boom")
        except RuntimeError:
            exc_info = sys.exc_info()
    rec = logging.getLogger("autoscaler.daemon").makeRecord("autoscaler.daemon", logging.INFO, __file__, 1, msg,
                                                            args, exc_info, extra=extra)
    rec.created = 1796409600.123456  # 2026-12-04T18:40:00.123456Z (date -u -d @1796409600)
    return rec


def test_a_json_line_has_an_rfc3339_time_and_its_fields_as_values() -> None:
    rec = _record("%s: decision", "llama", extra={"service": "llama", "reason": "up: queue 12 > 4",
                                                   "applied": {"h100": 2}, "hold": False, "level": "clash"})
    line = JsonFormatter().format(rec)
    doc = json.loads(line)
    assert "\n" not in line
    assert doc == {"ts": "2026-12-04T18:40:00.123Z", "level": "info", "logger": "autoscaler.daemon",
                   "msg": "llama: decision", "service": "llama", "reason": "up: queue 12 > 4",
                   "applied": {"h100": 2}, "hold": False, "field_level": "clash"}
    ts = datetime.fromisoformat(doc["ts"])  # RFC 3339, with its offset
    assert ts.utcoffset() is not None and ts == datetime(2026, 12, 4, 18, 40, 0, 123000, tzinfo=UTC)


def test_an_exception_is_one_field_of_the_one_line() -> None:
    doc = json.loads(JsonFormatter().format(_record("tick failed", exc=True)))
    assert doc["msg"] == "tick failed" and "RuntimeError: boom" in doc["error"] and doc["level"] == "info"


def test_a_text_line_reads_as_text_with_its_fields_as_key_values() -> None:
    rec = _record("%s: decision", "llama", extra={"service": "llama", "reason": "up: queue 12 > 4",
                                                   "applied": {"h100": 2}})
    assert TextFormatter().format(rec) == ('2026-12-04T18:40:00.123Z INFO autoscaler.daemon: llama: decision '
                                           'service=llama reason="up: queue 12 > 4" applied={"h100": 2}')
    assert TextFormatter().format(_record("plain")) == "2026-12-04T18:40:00.123Z INFO autoscaler.daemon: plain"


def test_a_newline_in_a_text_message_cannot_start_a_record_of_its_own() -> None:
    # an API server's webhook denial carries newlines; the text after one must not read as a new line
    rec = _record("%s not read: %s", "Deployment llm/x", "HTTP 403: denied:\n2026-01-01T00:00:00.000Z INFO a: b\r")
    assert TextFormatter().format(rec) == ("2026-12-04T18:40:00.123Z INFO autoscaler.daemon: Deployment llm/x not "
                                           "read: HTTP 403: denied:\\n2026-01-01T00:00:00.000Z INFO a: b\\r")


def test_any_field_value_gives_one_valid_json_line() -> None:
    import math
    from datetime import UTC, datetime

    import numpy as np

    rec = _record("odd fields", extra={"nan": math.nan, "inf": -math.inf, "keys": {(1, 2): 3, 4: "x"},
                                       "n": np.int64(3), "f": np.float32(0.5), "when": datetime(2026, 1, 2, tzinfo=UTC),
                                       "tags": {"a"}})
    doc = json.loads(JsonFormatter().format(rec), parse_constant=lambda c: pytest.fail(f"not JSON: {c}"))
    assert {k: doc[k] for k in ("nan", "inf", "keys", "n", "f", "when", "tags")} == {
        "nan": "NaN", "inf": "-Infinity", "keys": {"(1, 2)": 3, "4": "x"}, "n": 3, "f": 0.5,
        "when": "2026-01-02T00:00:00Z", "tags": ["a"]}
    assert TextFormatter().format(rec).count("\n") == 0


def test_formatter_names_the_two_formats() -> None:
    assert isinstance(formatter("json"), JsonFormatter) and isinstance(formatter("text"), TextFormatter)
    with pytest.raises(ValueError, match="--log-format must be text or json, got 'xml'"):
        formatter("xml")
    assert rfc3339(0.0) == "1970-01-01T00:00:00.000Z"


def test_an_outage_is_one_warning_per_service_and_tick(caplog: pytest.LogCaptureFixture) -> None:
    """Prometheus down (nothing listens): every query fails for one reason; each tick logs that once
    per service, with the counts, not a line per query (the default fleet's gateway and prefix-cache
    queries are optional, its pods' needed: both counted)."""
    from autoscaler.adapters.prometheus import connect
    from autoscaler.config.loading import default_config
    from autoscaler.wiring import build_loop, build_source
    from controllers.registry import build

    cfg = default_config()
    source = build_source(cfg, connect(cfg.prometheus, "http://127.0.0.1:1"))
    loop = build_loop(cfg, "dry-run", source, build("pid", cfg))
    for tick in range(2):
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="autoscaler"):
            record = loop.tick(30.0 * tick)
        assert [r.service for r in caplog.records] == [s.name for s in cfg.services]  # type: ignore[attr-defined]
        for r in caplog.records:
            st = record.services[r.service]  # type: ignore[attr-defined]
            assert r.name == "autoscaler.loop.runner" and r.levelno == logging.WARNING
            assert "Connection refused" in r.cause  # type: ignore[attr-defined]
            assert r.failed == len(st.estimate.errors) > 0 and r.failed_optional > 0  # type: ignore[attr-defined]
            assert r.getMessage() == f"{r.service}: {r.failed + r.failed_optional} metric queries failed, " \
                                     "holding replicas"  # type: ignore[attr-defined]
            assert st.decision.hold
