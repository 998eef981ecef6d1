"""The console script's exit on SIGTERM wherever it lands (a breaking pass: 130 and silence)."""

from __future__ import annotations

import pytest
import typer

import autoscaler.cli
import autoscaler.entry as entry
from autoscaler.errors import Terminated


def _main_with(monkeypatch: pytest.MonkeyPatch, app: typer.Typer) -> pytest.ExceptionInfo[SystemExit]:
    """``entry.main()`` running ``app`` as the command line (this test process keeps its SIGTERM handler)."""
    monkeypatch.setattr(autoscaler.cli, "app", app)
    monkeypatch.setattr(entry, "_TERMINATED", [])
    monkeypatch.setattr("sys.argv", ["autoscaler"])
    monkeypatch.setattr(entry.signal, "signal", lambda *args: None)
    with pytest.raises(SystemExit) as exit_:
        entry.main()
    return exit_


def test_a_sigterm_before_a_command_handles_it_exits_143_with_one_line(monkeypatch: pytest.MonkeyPatch,
                                                                        capsys: pytest.CaptureFixture[str]) -> None:
    early = typer.Typer()

    @early.command()
    def work() -> None:  # as a command importing what it runs, before its own try
        entry._on_sigterm(15, None)

    exit_ = _main_with(monkeypatch, early)
    assert exit_.value.code == 143
    assert capsys.readouterr().err.strip().splitlines()[-1] == "interrupted"


def test_a_command_s_own_exit_is_left_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    done = typer.Typer()

    @done.command()
    def work() -> None:
        raise typer.Exit(130)  # Ctrl-C handled by the command: its own line, its own code

    exit_ = _main_with(monkeypatch, done)
    assert exit_.value.code == 130
    assert issubclass(Terminated, KeyboardInterrupt)
