"""``autoscaler simulate`` when a controller's decision raises mid-run (``TickError``): one error line
naming the controller, the service, the simulated time and the exception, exit 1, no traceback and no
results written."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from autoscaler.cli import app
from autoscaler.cli.common import EXIT_FAILED
from autoscaler.report import OUTPUTS
from controllers.base import Decision
from controllers.pid import PIDController


def test_a_decision_that_raises_is_one_error_line_and_exit_1(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The default fleet's one service (``llama-3.1-8b``) under ``pid``, whose ``decide`` raises. The
    loop first calls the controller at the first tick one window after the start (``window_s: 300``,
    ``tick_s: 15`` in autoscaler/default_fleet.yaml: the tick at 300 s), so the run fails there. On
    1ee56d1 the ``TickError`` escaped the command (a traceback, ``res.exception`` the ``TickError``)."""
    calls: list[str] = []

    def boom(self: PIDController, est: object, svc: object) -> Decision:
        calls.append(getattr(svc, "name", "?"))
        raise ZeroDivisionError("gain over nothing")

    monkeypatch.setattr(PIDController, "decide", boom)
    out = tmp_path / "out"
    out.mkdir()
    (out / "results.json").write_text("{}")  # an earlier run's: removed, as any run's start removes it
    res = CliRunner().invoke(app, ["simulate", "--span", "0:400", "--out", str(out)])
    assert calls == ["llama-3.1-8b"]  # the run stopped at the first decision
    assert res.exit_code == EXIT_FAILED == 1, res.output
    assert isinstance(res.exception, SystemExit)  # the command exited; nothing escaped it
    assert "Traceback" not in res.output
    errors = [line for line in res.output.splitlines() if line.startswith("error:")]
    assert errors == [
        f"error: controller pid: 1 service(s) raised in their decision, scale writes or results at "
        f"t=300 s (llama-3.1-8b: ZeroDivisionError: gain over nothing); no results written to {out}"
    ]
    assert not [name for name in OUTPUTS if (out / name).exists()]
