"""The console script's exit on SIGTERM wherever it lands (a breaking pass: 130 and silence)."""

from __future__ import annotations

import pytest
import typer

import autoscaler.cli
import autoscaler.entry as entry
from autoscaler.errors import Terminated


def test_a_sigterm_before_a_command_handles_it_exits_143_with_one_line(monkeypatch: pytest.MonkeyPatch,
                                                                        capsys: pytest.CaptureFixture[str]) -> None:
    early = typer.Typer()

    @early.command()
    def work() -> None:  # as a command importing what it runs, before its own try
        entry._on_sigterm(15, None)

    monkeypatch.setattr(autoscaler.cli, "app", early)
    monkeypatch.setattr(entry, "_TERMINATED", [])
    monkeypatch.setattr("sys.argv", ["autoscaler"])
    monkeypatch.setattr(entry.signal, "signal", lambda *args: None)  # this test process keeps its handler
    with pytest.raises(SystemExit) as exit_:
        entry.main()
    assert exit_.value.code == 143
    assert capsys.readouterr().err.strip().splitlines()[-1] == "interrupted"


def test_a_command_s_own_exit_is_left_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    done = typer.Typer()

    @done.command()
    def work() -> None:
        raise typer.Exit(130)  # Ctrl-C handled by the command: its own line, its own code

    monkeypatch.setattr(autoscaler.cli, "app", done)
    monkeypatch.setattr(entry, "_TERMINATED", [])
    monkeypatch.setattr("sys.argv", ["autoscaler"])
    monkeypatch.setattr(entry.signal, "signal", lambda *args: None)  # this test process keeps its handler
    with pytest.raises(SystemExit) as exit_:
        entry.main()
    assert exit_.value.code == 130
    assert issubclass(Terminated, KeyboardInterrupt)
