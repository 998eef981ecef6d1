"""The ``autoscaler`` console script: signal handling first, then the (slow to import) command line.

SIGTERM raises ``Terminated`` so a terminated run removes its partial outputs as Ctrl-C does; an interrupt
while the command line is still importing exits 130 (143 for SIGTERM) with one line, not a traceback.
"""

from __future__ import annotations

import signal
import sys
from types import FrameType

from autoscaler.errors import Terminated


def _on_sigterm(signum: int, frame: FrameType | None) -> None:
    raise Terminated()


def main() -> None:
    """Run the command line (``autoscaler.cli.app``)."""
    signal.signal(signal.SIGTERM, _on_sigterm)
    try:
        from autoscaler.cli import app
    except KeyboardInterrupt as exc:
        sys.stderr.write("interrupted\n")
        raise SystemExit(143 if isinstance(exc, Terminated) else 130) from None
    app()
