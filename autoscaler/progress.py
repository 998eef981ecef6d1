"""Progress of commands whose rows run for minutes (``compare``, ``faults run``, ``benchmarks/admission.py``).

``Rows`` holds, per row, how far its simulation has got (simulated seconds) in shared memory, so a
row run in a worker process reports it too: the worker's ``Rows.reporter`` writes at most every
``WRITE_EVERY_S`` of wall time, so the simulation does not slow down. ``Display`` reads it from a
thread of the parent every ``POLL_S`` and shows it on a console (stderr):

- on a terminal, one rich progress bar per running row (``rich.progress``), gone when the row ends;
- otherwise (piped, a log, CI), one line per running row every ``LINE_EVERY_S`` of wall time::

      compare: mpc 42% (1512/3600 s simulated), 35 s

  (the share of the trace's span simulated, then the wall seconds since the row started). The
  command prints its own line when a row ends (``done 3/9: mpc (71.2 s)``).

A row past its last arrival is draining: it shows 100 % until it ends. A row that searches before
its run (``bound`` simulates up to ``simulations`` candidate schedules, ``controllers.bound``) says
so while it does, each candidate's simulation shown as it goes::

      compare: bound searching (run 3 of at most 8) 42% (1512/3600 s simulated), 35 s

and its wall seconds count from the row's start, the search included.
"""

from __future__ import annotations

import math
import multiprocessing
import threading
import time
from collections.abc import Callable, Sequence
from ctypes import c_byte, c_double, c_int
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, Progress, TaskID, TaskProgressColumn, TextColumn, TimeElapsedColumn

WRITE_EVERY_S = 0.5
"""Wall seconds between two writes of a row's simulated time (a worker's cost: a clock read per call)."""
POLL_S = 0.5
"""Wall seconds between two reads of the rows by the display thread."""
LINE_EVERY_S = 15.0
"""Wall seconds between two progress lines of a running row when the console is not a terminal."""

WAITING, RUNNING, DONE = 0, 1, 2


class Rows:
    """How far each row has got, shared with the processes that run them.

    Create it in the parent before the workers start (it is inherited on fork, pickled on spawn).

    Args:
        labels: each row's name as shown (``mpc``, ``surge x pid``).
        totals_s: each row's trace span, simulated seconds (its last arrival; the bar's 100 %).
        searches: each row's most search runs before its own (``bound``'s ``simulations``), 0 for
            a row that does not search; default none searches.

    Raises:
        ValueError: ``labels``, ``totals_s`` (or ``searches``) of different lengths.
    """

    def __init__(self, labels: Sequence[str], totals_s: Sequence[float],
                 searches: Sequence[int] | None = None) -> None:
        if len(labels) != len(totals_s) or (searches is not None and len(searches) != len(labels)):
            raise ValueError(f"{len(labels)} labels for {len(totals_s)} totals"
                             + ("" if searches is None else f" and {len(searches)} searches"))
        self.labels = list(labels)
        self.totals_s = [float(t) for t in totals_s]
        self.searches = [0] * len(labels) if searches is None else [int(n) for n in searches]
        # Raw (lock-free) shared memory: one writer per row; an aligned double, int or byte is read whole.
        self._sim_s: Any = multiprocessing.RawArray(c_double, len(labels))
        self._state: Any = multiprocessing.RawArray(c_byte, len(labels))
        self._search: Any = multiprocessing.RawArray(c_int, len(labels))  # the search run under way; 0: none

    def __len__(self) -> int:
        return len(self.labels)

    def reporter(self, index: int) -> Callable[[float], None]:
        """A callback for row ``index``'s simulation: called with the simulated time (s) as often as it
        likes, it marks the row running and writes the time at most every ``WRITE_EVERY_S``."""
        last = -math.inf

        def report(sim_s: float) -> None:
            nonlocal last
            now = time.monotonic()
            if now - last >= WRITE_EVERY_S:
                last = now
                self._sim_s[index] = sim_s
                self._state[index] = RUNNING

        return report

    def start(self, index: int) -> None:
        """Mark row ``index`` running at 0 s (before its first report: building a controller can take long)."""
        self._sim_s[index] = 0.0
        self._search[index] = 0
        self._state[index] = RUNNING

    def searcher(self, index: int) -> Callable[[int], None]:
        """A callback for row ``index``'s search: called with the search run about to start (1, 2, ...)
        and with 0 once the search is over (the row's own run next); each call restarts the row at 0 s."""

        def search(run: int) -> None:
            self._sim_s[index] = 0.0
            self._search[index] = run

        return search

    def search_run(self, index: int) -> int:
        """The search run row ``index`` is simulating (1, 2, ...), or 0 when it is not searching."""
        return int(self._search[index])

    def label(self, index: int) -> str:
        """Row ``index``'s name as shown now: ``bound searching (run 3 of at most 8)`` while it searches."""
        run = self.search_run(index)
        if run <= 0:
            return self.labels[index]
        return f"{self.labels[index]} searching (run {run} of at most {self.searches[index]})"

    def finish(self, index: int) -> None:
        """Mark row ``index`` ended (done or failed)."""
        self._state[index] = DONE

    def state(self, index: int) -> int:
        """``WAITING``, ``RUNNING`` or ``DONE``."""
        return int(self._state[index])

    def simulated_s(self, index: int) -> float:
        """The simulated seconds row ``index`` last reported."""
        return float(self._sim_s[index])

    def fraction(self, index: int) -> float:
        """Share of row ``index``'s span simulated, in [0, 1] (1 for an empty span)."""
        total = self.totals_s[index]
        return 1.0 if total <= 0 else min(1.0, max(0.0, self.simulated_s(index) / total))


def progress_line(prefix: str, rows: Rows, index: int, wall_s: float) -> str:
    """``compare: mpc 42% (1512/3600 s simulated), 35 s``: row ``index`` after ``wall_s`` wall seconds
    (``bound searching (run 3 of at most 8) 42% ...`` while it searches, ``Rows.label``)."""
    return (f"{prefix}: {rows.label(index)} {rows.fraction(index):.0%} "
            f"({rows.simulated_s(index):.0f}/{rows.totals_s[index]:.0f} s simulated), {wall_s:.0f} s")


class Display:
    """Show ``rows`` on ``console`` while open (module docstring); a thread polls them.

    Args:
        rows: the shared progress.
        prefix: the command, before each line (``compare``).
        console: where to show it (the command's stderr console).
        line_every_s: wall seconds between the lines of a running row when not on a terminal
            (default ``LINE_EVERY_S``).
        poll_s: wall seconds between two polls (default ``POLL_S``).
        enabled: False shows nothing (``--json`` runs, quiet callers).
    """

    def __init__(self, rows: Rows, prefix: str, console: Console, line_every_s: float | None = None,
                 poll_s: float | None = None, enabled: bool = True) -> None:
        self.rows = rows
        self.prefix = prefix
        self.console = console
        self.line_every_s = LINE_EVERY_S if line_every_s is None else line_every_s
        self.poll_s = POLL_S if poll_s is None else poll_s
        self.enabled = enabled
        self.started: dict[int, float] = {}  # row -> monotonic time it was first seen running
        self.last_line: dict[int, float] = {}
        self.tasks: dict[int, TaskID] = {}
        self.bar: Progress | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def __enter__(self) -> Display:
        if not self.enabled:
            return self
        if self.console.is_terminal:
            self.bar = Progress(TextColumn("[bold]{task.description}[/]"), BarColumn(), TaskProgressColumn(),
                                TextColumn("{task.fields[sim]}"), TimeElapsedColumn(), console=self.console,
                                transient=True)
            self.bar.start()
        self._thread = threading.Thread(target=self._poll, name="progress", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        if self.bar is not None:
            self.bar.stop()

    def _poll(self) -> None:
        while not self._stop.wait(self.poll_s):
            self.refresh(time.monotonic())

    def refresh(self, now: float) -> None:
        """Read every row at monotonic time ``now`` and update the bars, or print the lines that are due."""
        for i in range(len(self.rows)):
            state = self.rows.state(i)
            if state == WAITING:
                continue
            began = self.started.setdefault(i, now)
            if self.bar is not None:
                self._update_bar(i, state)
            elif state == RUNNING and now - self.last_line.get(i, began) >= self.line_every_s:
                self.last_line[i] = now
                self.console.print(progress_line(self.prefix, self.rows, i, now - began), highlight=False,
                                   soft_wrap=True)

    def _update_bar(self, i: int, state: int) -> None:
        assert self.bar is not None
        if state == DONE:
            task = self.tasks.pop(i, None)
            if task is not None:
                self.bar.remove_task(task)
            return
        sim = f"{self.rows.simulated_s(i):.0f}/{self.rows.totals_s[i]:.0f} s simulated"
        label = self.rows.label(i)
        if i not in self.tasks:
            self.tasks[i] = self.bar.add_task(label, total=1.0, sim=sim)
        self.bar.update(self.tasks[i], completed=self.rows.fraction(i), sim=sim, description=label)
