"""The ``autoscaler`` console script: signal handling first, then the (slow to import) command line.

SIGTERM raises ``Terminated`` so a terminated run removes its partial outputs as Ctrl-C does; an interrupt
while the command line is still importing exits 130 (143 for SIGTERM) with one line, not a traceback, and
so does a SIGTERM that lands before a command's own handling (typer turns it into a silent exit 130).
"""

from __future__ import annotations

import signal
import sys
from types import FrameType

from autoscaler.errors import Terminated

_TERMINATED: list[int] = []  # the SIGTERMs received (a handler can only raise or record)


def _on_sigterm(signum: int, frame: FrameType | None) -> None:
    _TERMINATED.append(signum)
    raise Terminated()


def main() -> None:
    """Run the command line (``autoscaler.cli.app``)."""
    signal.signal(signal.SIGTERM, _on_sigterm)
    try:
        from autoscaler.cli import app
    except KeyboardInterrupt as exc:
        sys.stderr.write("interrupted\n")
        raise SystemExit(143 if isinstance(exc, Terminated) else 130) from None
    try:
        app()
    except SystemExit as exc:
        # a command handles Terminated itself (143, one line); 130 after a SIGTERM means typer caught it
        # first, e.g. while the command was still importing what it runs
        if exc.code == 130 and _TERMINATED:
            sys.stderr.write("interrupted\n")
            raise SystemExit(143) from None
        raise
