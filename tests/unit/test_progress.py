"""``autoscaler.progress``: the rows' shared progress and how it is shown."""

from __future__ import annotations

import io

import pytest
from rich.console import Console

from autoscaler.progress import DONE, RUNNING, WAITING, Display, Rows, progress_line


def _console(terminal: bool) -> tuple[Console, io.StringIO]:
    buf = io.StringIO()
    return Console(file=buf, width=200, force_terminal=terminal), buf


def test_a_row_reports_its_simulated_time_as_a_share_of_its_span() -> None:
    rows = Rows(["mpc", "pid"], [3600.0, 0.0])
    assert rows.state(0) == WAITING
    report = rows.reporter(0)
    report(1512.0)  # the first report is written at once
    report(1600.0)  # within WRITE_EVERY_S of it: not written
    assert rows.state(0) == RUNNING and rows.simulated_s(0) == 1512.0
    assert rows.fraction(0) == pytest.approx(1512 / 3600)
    assert rows.fraction(1) == 1.0  # an empty span is done as soon as it starts
    rows.reporter(0)(4000.0)  # draining past the last arrival: 100 %, not more
    assert rows.fraction(0) == 1.0
    rows.finish(0)
    assert rows.state(0) == DONE
    with pytest.raises(ValueError, match="2 labels for 1 totals"):
        Rows(["a", "b"], [1.0])


def test_piped_a_running_row_gets_a_line_every_interval_and_a_waiting_or_ended_one_none() -> None:
    rows = Rows(["mpc", "pid", "hpa"], [3600.0, 3600.0, 3600.0])
    console, buf = _console(terminal=False)
    display = Display(rows, "compare", console, line_every_s=30.0)
    rows.start(0)
    rows.reporter(0)(1512.0)
    rows.start(2)
    display.refresh(100.0)  # first seen running now: its first line is due 30 s later
    assert buf.getvalue() == ""
    rows.finish(2)
    display.refresh(131.0)
    assert buf.getvalue() == "compare: mpc 42% (1512/3600 s simulated), 31 s\n"
    display.refresh(140.0)  # not yet 30 s since the last line
    rows.finish(0)
    display.refresh(200.0)  # ended: the command prints its own line
    assert buf.getvalue().count("\n") == 1
    assert progress_line("faults run", rows, 1, 0.0) == "faults run: pid 0% (0/3600 s simulated), 0 s"


def test_on_a_terminal_each_running_row_has_a_bar_until_it_ends() -> None:
    rows = Rows(["mpc", "pid"], [3600.0, 3600.0])
    console, _ = _console(terminal=True)
    with Display(rows, "compare", console, poll_s=3600.0) as display:  # refreshed by hand, not by its thread
        rows.start(1)
        rows.reporter(1)(900.0)
        display.refresh(1.0)
        assert display.bar is not None and list(display.tasks) == [1]
        task = display.bar.tasks[0]
        assert task.description == "pid" and task.completed == pytest.approx(0.25)
        rows.finish(1)
        display.refresh(2.0)
        assert display.tasks == {} and display.bar.tasks == []


def test_a_disabled_display_shows_nothing() -> None:
    rows = Rows(["mpc"], [10.0])
    console, buf = _console(terminal=True)
    with Display(rows, "compare", console, enabled=False) as display:
        assert display.bar is None
    assert buf.getvalue() == ""


def test_a_searching_row_says_so_and_its_plain_name_returns_for_its_own_run() -> None:
    """``bound`` searches (up to 8 runs here) before its own run: while it does, its line and its bar
    name the search run; each search run restarts the row at 0 s simulated."""
    rows = Rows(["pid", "bound"], [3600.0, 3600.0], [0, 8])
    console, buf = _console(terminal=False)
    display = Display(rows, "compare", console, line_every_s=30.0)
    rows.start(1)
    search = rows.searcher(1)
    search(1)
    rows.reporter(1)(3600.0)
    search(3)  # a new run: back to 0 s
    assert rows.search_run(1) == 3 and rows.simulated_s(1) == 0.0
    rows.reporter(1)(1512.0)
    display.refresh(0.0)
    display.refresh(35.0)
    assert buf.getvalue() == "compare: bound searching (run 3 of at most 8) 42% (1512/3600 s simulated), 35 s\n"
    search(0)  # the search is over: the row's own run
    assert rows.label(1) == "bound" and rows.simulated_s(1) == 0.0
    assert rows.label(0) == "pid"
    with pytest.raises(ValueError, match="2 labels for 2 totals and 1 searches"):
        Rows(["a", "b"], [1.0, 1.0], [0])


def test_on_a_terminal_a_searching_row_s_bar_names_the_search() -> None:
    rows = Rows(["bound"], [3600.0], [4])
    console, _ = _console(terminal=True)
    with Display(rows, "compare", console, poll_s=3600.0) as display:
        rows.start(0)
        rows.searcher(0)(2)
        rows.reporter(0)(900.0)
        display.refresh(1.0)
        assert display.bar is not None
        assert display.bar.tasks[0].description == "bound searching (run 2 of at most 4)"
        rows.searcher(0)(0)
        display.refresh(2.0)
        assert display.bar.tasks[0].description == "bound"
