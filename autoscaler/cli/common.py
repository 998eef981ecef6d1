"""What every command shares: the app, its consoles, one-line errors and warnings, progress, the
fleet file, a reachable Prometheus and the ``-o/--output`` formats.

Nothing heavy is imported here at start-up (the fleet schema, numpy, scipy): ``autoscaler --help``
and ``autoscaler <command> --help`` answer without them; each command imports what it runs.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any, get_args

import typer
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, Progress, TaskProgressColumn, TextColumn, TimeElapsedColumn
from typer.core import TyperCommand, TyperGroup

from autoscaler import files
from autoscaler.errors import Terminated

if TYPE_CHECKING:
    from autoscaler.config import FleetConfig

DISTRIBUTION = "llm-autoscaler"
"""The installed package's name (pyproject.toml), whose metadata ``--version`` reads."""


def _element_name(p: Any) -> str:
    """The element type of a repeatable option, in lower case: typer >= 0.2x keeps the annotation
    (``type_descriptor``: list[Path] -> path), older releases click's type (click.Path is named "path")."""
    descriptor = getattr(p, "type_descriptor", None)
    if descriptor is not None:
        args = get_args(descriptor.annotation)
        return args[0].__name__.lower() if args and isinstance(args[0], type) else "value"
    name = getattr(getattr(p, "type", None), "name", "") or "value"
    return "str" if name == "text" else name


def _readable_metavars(params: list[Any]) -> None:
    """Flags show no value in help (typer would write ``<bool>``); a repeatable option shows its
    element type once (typer would write ``<list[Path]>``; ``<path>...`` would read as several values
    after one flag, which click refuses) and its help ends saying the flag repeats (``--bench A --bench
    B``). ``params``: the command's parameters (typer's own click classes, hence duck-typed)."""
    for p in params:
        if getattr(p, "param_type_name", "") != "option" or p.metavar is not None:
            continue
        if p.is_flag or p.count:
            p.metavar = ""
        elif p.multiple:
            p.metavar = f"<{_element_name(p)}>"
            flag = max(p.opts, key=len)
            p.help = f"{p.help or ''} Repeatable: {flag} A {flag} B.".lstrip()


def empty_out(args: list[str]) -> bool:
    """Whether ``args`` give ``--out`` an empty (or blank) value: typer makes ``--out ''`` ``Path('')``, which is
    ``Path('.')``, so a command would write into the working directory (an unset ``$OUT`` in a script)."""
    for i, arg in enumerate(args):
        if arg == "--":
            return False
        value = arg[len("--out="):] if arg.startswith("--out=") else (
            args[i + 1] if arg == "--out" and i + 1 < len(args) else None)
        if value is not None and not value.strip():
            return True
    return False


def unwrap(text: str | None) -> str | None:
    """A docstring's paragraphs each on one line, for the terminal to wrap: typer's rich help keeps a
    paragraph's line breaks (after the first paragraph, and in a group's list of commands), so a docstring
    wrapped for the source would break mid-sentence in help. A paragraph that starts with ``\\b`` keeps
    its lines (click's no-rewrap mark); what follows ``\\f`` is left as it is (typer drops it)."""
    if not text:
        return text
    import inspect

    shown, sep, hidden = inspect.cleandoc(text).partition("\f")
    paragraphs = [p if p.startswith("\b") else " ".join(p.split()) for p in shown.split("\n\n")]
    return "\n\n".join(paragraphs) + sep + hidden


class Command(TyperCommand):
    """A command whose help shows readable metavars (``_readable_metavars``) and paragraphs the terminal
    wraps (``unwrap``), and that refuses an empty ``--out`` (``empty_out``) before typer reads it as the
    working directory."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.help = unwrap(self.help)

    def get_params(self, ctx: Any) -> list[Any]:
        params = super().get_params(ctx)
        _readable_metavars(params)
        return params

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        if empty_out(args):
            raise fail("--out is empty: name where to write")
        return super().parse_args(ctx, args)


class _OneLineUsageErrors:
    """Turns click's usage errors (an unknown option or command, a missing value, an extra argument, a
    value of the wrong type) into the command line's one ``error:`` line and exit 2 (``fail``), where
    typer would draw a box; ``no_args_is_help``'s error (the help page itself) passes as it is."""

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: object) -> None:
        # the click typer runs (typer 0.29 carries its own copy, typer._click): its UsageError is what
        # typer.BadParameter (exported) derives from
        usage_error: type[Any] = next(c for c in typer.BadParameter.__mro__ if c.__name__ == "UsageError")
        if isinstance(exc, usage_error) and type(exc).__name__ != "NoArgsIsHelpError":
            where = f"; see '{exc.ctx.command_path} --help'" if exc.ctx is not None else ""
            message = exc.format_message()
            if where and message.endswith("."):  # click's own "Missing option '--out'." ends a sentence
                message = message[:-1]
            raise fail(message + where) from None


class Group(TyperGroup):
    """A command group whose help shows readable metavars (``_readable_metavars``) and paragraphs the
    terminal wraps (``unwrap``), and whose usage errors, and its commands', are one ``error:`` line with
    exit 2 (``_OneLineUsageErrors``): parsing its own options (``make_context``) and resolving and parsing
    a command (``invoke``)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.help = unwrap(self.help)

    def make_context(self, *args: Any, **kwargs: Any) -> Any:
        with _OneLineUsageErrors():
            return super().make_context(*args, **kwargs)

    def invoke(self, ctx: Any) -> Any:
        with _OneLineUsageErrors():
            return super().invoke(ctx)

    def get_params(self, ctx: Any) -> list[Any]:
        params = super().get_params(ctx)
        _readable_metavars(params)
        return params


class App(typer.Typer):
    """``typer.Typer`` whose commands and groups are ``Command`` and ``Group`` unless told otherwise."""

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("cls", Group)
        super().__init__(**kwargs)

    def command(self, *args: Any, **kwargs: Any) -> Any:  # typer's own signature is the same pass-through
        kwargs.setdefault("cls", Command)
        return super().command(*args, **kwargs)


EXAMPLE_WIDTH = 76
"""The widest line of an example in help: a help page pads its epilog by one column each side, so an
example fits an 80-column terminal whole (``examples``)."""


SHELL_CUTS = ("|", "&&", ";")
"""Words after which a shell line goes on with another command (``example_lines`` cuts before them)."""


def _shell_words(command: str) -> list[str]:
    """``command`` split at its spaces, but never inside a '...' or "..." quote (the quotes kept)."""
    words, word, quote = [], "", ""
    for ch in command:
        if quote:
            quote = "" if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch == " ":
            if word:
                words.append(word)
            word = ""
            continue
        word += ch
    return [*words, word] if word else words


def _is_value(word: str, piece: str) -> bool:
    """Whether ``word``, which starts with ``-``, is the value of the option ``piece`` ends with rather
    than an option: ``-`` (stdin or stdout, as in ``-f -``) or a negative number, after an option alone."""
    alone = piece.split(" ")[-1].startswith("-") and " " not in piece
    number = word[1:].replace(".", "", 1).isdigit()
    return alone and (word == "-" or number)


def example_lines(command: str, width: int = EXAMPLE_WIDTH) -> list[str]:
    """``command`` as shell lines of at most ``width`` characters where it can: the command is cut into
    an option (``--x``, ``-o``), a redirection (``>``) or a pipe or list operator (``|``, ``&&``: before
    it; ``;``, alone or ending a word: after it; ``SHELL_CUTS``) with the words after it, and a line
    that would pass ``width`` ends with `` \\`` and the next, indented by four, goes on at such a cut
    (an option with its value never split, a ``-`` that is a value such as ``-f -``'s kept with its
    option, a quoted argument never cut inside its quotes); a single piece longer than ``width`` stays
    whole on a line of its own."""
    pieces: list[str] = []
    for word in _shell_words(command):
        cut = word.startswith(("-", ">")) and not (pieces and _is_value(word, pieces[-1]))
        if pieces and not cut and word not in SHELL_CUTS and not pieces[-1].endswith(";"):
            pieces[-1] += " " + word
        else:
            pieces.append(word)
    lines = [pieces[0]]
    for piece in pieces[1:]:
        if len(lines[-1]) + 1 + len(piece) + 2 > width:  # 2: the " \\" this line would end with
            lines[-1] += " \\"
            lines.append("    " + piece)
        else:
            lines[-1] += " " + piece
    return lines


def examples(*commands: str) -> str:
    """A help page's epilog: ``Examples:`` and each command on lines of its own, never wrapped by the
    terminal mid-command (``example_lines``; rich markup escaped)."""
    def shown(line: str) -> str:  # rich's escape doubles a backslash at the end of what it escapes
        return escape(line[:-2]) + " \\" if line.endswith(" \\") else escape(line)

    return "Examples:\n\n" + "\n".join(f"  {shown(line)}" for c in commands for line in example_lines(c))


app = App(add_completion=False, no_args_is_help=True,
          help="Observability-driven control-loop autoscaler for LLM inference fleets.",
          epilog=examples("autoscaler simulate --controller mpc", "autoscaler compare --wide",
                          "autoscaler dry-run --prometheus-url http://localhost:9090 --once",
                          "autoscaler <command> --help"))
# emoji=False: user text (a path such as no:x:such:file.csv) prints verbatim, never as emoji codes.
console = Console(emoji=False)
err_console = Console(stderr=True, emoji=False)


def _version(value: bool) -> None:
    """``--version``: the installed package's version (importlib.metadata), then exit."""
    if value:
        from importlib.metadata import PackageNotFoundError, version

        try:
            typer.echo(f"autoscaler {version(DISTRIBUTION)}")
        except PackageNotFoundError:
            typer.echo(f"autoscaler: package {DISTRIBUTION} is not installed (run from a source tree)")
        raise typer.Exit()


@app.callback()
def _main(
    version: bool = typer.Option(False, "--version", callback=_version, is_eager=True,
                                 help="Print the installed version and exit."),
) -> None:
    """Observability-driven control-loop autoscaler for LLM inference fleets."""


def say(text: str, *, err: bool = False) -> None:
    """Print ``text`` verbatim (no markup, emoji or highlighting): paths, names, messages holding user text."""
    (err_console if err else console).print(text, markup=False, emoji=False, highlight=False, soft_wrap=True)


EXIT_FAILED = 1
"""Exit status when the input was valid but the work could not be done: a server unreachable
(``autoscaler.errors.UnreachableError``), queries failed, a row failed (docs/architecture.md#exit-codes)."""
EXIT_BAD_INPUT = 2
"""Exit status for bad input: an option, a file (missing or invalid), a spec, a fleet file, a URL
that cannot work (as click exits for a usage error)."""


def _error(msg: str, status: int) -> typer.Exit:
    one_line = msg.replace("\r", "\\r").replace("\n", "\\n")  # a name may hold a newline; the error stays one line
    err_console.print(f"[bold red]error:[/] {escape(one_line)}", highlight=False, soft_wrap=True)
    return typer.Exit(status)


def fail(msg: str) -> typer.Exit:
    """Print ``msg`` as one error line; the exit for bad input (``EXIT_BAD_INPUT``), to raise."""
    return _error(msg, EXIT_BAD_INPUT)


def unreachable(msg: str) -> typer.Exit:
    """Print ``msg`` as one error line; the exit for a server that could not be used
    (``EXIT_FAILED``: the input was valid), to raise."""
    return _error(msg, EXIT_FAILED)


def not_done(msg: str) -> typer.Exit:
    """Print ``msg`` as one error line; the exit for work that failed on valid input (``EXIT_FAILED``:
    e.g. a controller's decision raised mid-run, ``autoscaler.loop.runner.TickError``), to raise."""
    return _error(msg, EXIT_FAILED)


def load_cfg(config: Path | None) -> FleetConfig:
    """The fleet file (default: the embedded one); a key read from its old place is one warning line."""
    from autoscaler.config.loading import default_config, load_config

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

    Bad settings exit 2 (``fail``); an unreachable server exits 1 (``unreachable``), both with one line.
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
        raise unreachable(str(exc)) from None
    return client


OUTPUTS_ALL = ("table", "json", "yaml")


def output_format(output: str, json_alias: bool, allowed: tuple[str, ...] = OUTPUTS_ALL) -> str:
    """The checked ``-o/--output`` format; the deprecated ``--json`` flag reads as ``-o json`` (with a warning).

    Raises:
        ValueError: a format not in ``allowed`` (the command's help says which it offers), or ``--json``
            with another ``-o`` than json.
    """
    if json_alias:
        warn("--json is deprecated and will be removed: use -o json (or --output json)")
        if output not in ("table", "json"):
            raise ValueError(f"--json contradicts -o {output}: give one of them")
        output = "json"
    if output not in allowed:
        raise ValueError(f"-o/--output must be one of {', '.join(allowed)}, got '{output}'")
    return output


def print_document(doc: Any, output: str) -> None:
    """``doc`` (a JSON-able value) on stdout as JSON (indented) or YAML, verbatim."""
    import json

    text = json.dumps(doc, indent=2)
    if output == "yaml":
        import yaml

        # Through JSON first: tuples and numpy scalars become what JSON made of them.
        typer.echo(yaml.safe_dump(json.loads(text), sort_keys=False), nl=False)
    else:
        typer.echo(text)


def controller_list(controller: str | None, alias: str | None, default: str) -> str:
    """The comma-separated ``--controller`` list of a command that runs several (compare, faults run);
    the old spelling ``--controllers`` reads the same (with a warning).

    Raises:
        ValueError: both spellings given.
    """
    if alias is not None:
        warn("--controllers is deprecated and will be removed: use --controller (a comma-separated list)")
        if controller is not None:
            raise ValueError("--controllers is the old spelling of --controller: give one of them")
        return alias
    return default if controller is None else controller
