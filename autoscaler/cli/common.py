"""What every command shares: the app, its consoles, one-line errors and warnings, progress, the
fleet file and a reachable Prometheus."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import typer
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, Progress, TaskProgressColumn, TextColumn, TimeElapsedColumn

from autoscaler import files
from autoscaler.config import FleetConfig
from autoscaler.config.loading import default_config, load_config
from autoscaler.errors import Terminated

app = typer.Typer(add_completion=False, no_args_is_help=True,
                  help="Observability-driven control-loop autoscaler for LLM inference fleets.")
console = Console()
err_console = Console(stderr=True)


@app.callback()
def _main() -> None:
    """Observability-driven control-loop autoscaler for LLM inference fleets."""


def fail(msg: str) -> typer.Exit:
    one_line = msg.replace("\r", "\\r").replace("\n", "\\n")  # a name may hold a newline; the error stays one line
    err_console.print(f"[bold red]error:[/] {escape(one_line)}", highlight=False, soft_wrap=True)
    return typer.Exit(2)


def load_cfg(config: Path | None) -> FleetConfig:
    """The fleet file (default: the embedded one); a key read from its old place is one warning line."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", FutureWarning)
        cfg = default_config() if config is None else load_config(config)
    for w in caught:
        if issubclass(w.category, FutureWarning):
            warn(str(w.message))
        else:
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
    return cfg


def check_service(cfg: FleetConfig, service: str | None) -> None:
    """ValueError naming the fleet's services when ``--service`` names none of them."""
    if service is not None and service not in {s.name for s in cfg.services}:
        raise ValueError(f"unknown service '{service}' (fleet has: {', '.join(s.name for s in cfg.services)})")


def warn(msg: str) -> None:
    err_console.print(f"[bold yellow]warning:[/] {escape(msg)}", highlight=False, soft_wrap=True)


class ProgressBar:
    """Progress of a long run on stderr: a bar on a terminal, a line per 10 % otherwise (logs, CI)."""

    def __init__(self, label: str, enabled: bool = True) -> None:
        self.label = label
        self.enabled = enabled
        self.bar: Progress | None = None
        self.next = 0.1

    def __enter__(self) -> ProgressBar:
        if self.enabled and err_console.is_terminal:
            self.bar = Progress(TextColumn("[bold]{task.description}[/]"), BarColumn(), TaskProgressColumn(),
                                TimeElapsedColumn(), console=err_console, transient=True)
            self.bar.__enter__()
            self.task = self.bar.add_task(self.label, total=1.0)
        return self

    def update(self, fraction: float) -> None:
        """Record progress (0..1)."""
        if self.bar is not None:
            self.bar.update(self.task, completed=fraction)
            return
        while self.enabled and fraction >= self.next - 1e-9 and self.next <= 1.0 + 1e-9:
            err_console.print(f"{self.label}: {self.next:.0%}", highlight=False)
            self.next += 0.1

    def __exit__(self, *exc: object) -> None:
        if self.bar is not None:
            self.bar.__exit__(None, None, None)


def interrupted(out: Path, names: tuple[str, ...], exc: KeyboardInterrupt) -> typer.Exit:
    """Remove what the run had written of its outputs, say so, and exit 130 (Ctrl-C) or 143 (SIGTERM)."""
    try:
        files.clear(out, names)
    except ValueError as err:
        warn(str(err))
    err_console.print(f"[bold red]interrupted:[/] no results written to {escape(str(out))} (the files an earlier "
                      "run left there under the same names were removed when this one started)", highlight=False,
                      soft_wrap=True)
    return typer.Exit(143 if isinstance(exc, Terminated) else 130)


def fmt(x: Any, spec: str = ".3f") -> str:
    return "-" if x is None else format(x, spec)


def check_admission(admission: str | None) -> None:
    from autoscaler.config import ADMISSION_MODES

    if admission is not None and admission not in ADMISSION_MODES:
        raise ValueError(f"--admission must be one of {', '.join(ADMISSION_MODES)}, got '{admission}'")


class StderrLog:
    """While open, the ``autoscaler`` loggers (failed queries, ignored pods) write to this command's stderr."""

    def __init__(self, level: int) -> None:
        import logging
        import sys

        from autoscaler.logs import TextFormatter

        self.logger = logging.getLogger("autoscaler")
        self.level = level
        self.handler = logging.StreamHandler(sys.stderr)
        self.handler.setFormatter(TextFormatter())  # with the records' fields (a failure's cause)

    def __enter__(self) -> None:
        self.old_level = self.logger.level
        self.logger.addHandler(self.handler)
        self.logger.setLevel(self.level)

    def __exit__(self, *exc: object) -> None:
        self.logger.removeHandler(self.handler)
        self.logger.setLevel(self.old_level)


def connect_prometheus(cfg: FleetConfig, url: str | None) -> Any:
    """A reachable client for ``url`` (or the fleet file's ``prometheus.url``).

    Bad settings exit 2; an unreachable server exits 1, both with one line.
    """
    from autoscaler.adapters.prometheus import PrometheusError, check_reachable, connect

    url = url or cfg.prometheus.url
    if not url:
        raise fail("no Prometheus URL: pass --prometheus-url or set prometheus.url in the fleet file")
    try:
        client = connect(cfg.prometheus, url)
    except PrometheusError as exc:
        raise fail(str(exc)) from None
    try:
        check_reachable(client)
    except PrometheusError as exc:
        err_console.print(f"[bold red]error:[/] {exc}", highlight=False, soft_wrap=True)
        raise typer.Exit(1) from None
    return client
