"""Help pages read whole at 80 and 100 columns (a user's terminal): no example command split by the terminal's
wrap, no sentence broken where the source wrapped its docstring, a repeatable option shown as one value
per flag; and a usage error is one ``error:`` line, as every other error."""

from __future__ import annotations

from itertools import pairwise
from typing import Any

import pytest
from typer.main import get_command
from typer.testing import CliRunner

from autoscaler.cli import app


def pages(group: Any = None, path: tuple[str, ...] = ()) -> list[tuple[tuple[str, ...], Any]]:
    """(argv path, click command or group) of the app, every group and command included."""
    group = get_command(app) if group is None else group
    out = [(path, group)]
    for name, cmd in group.commands.items():
        out += pages(cmd, (*path, name)) if hasattr(cmd, "commands") else [((*path, name), cmd)]
    return out


ALL = pages()


def help_at(argv: tuple[str, ...], columns: int) -> list[str]:
    res = CliRunner().invoke(app, [*argv, "--help"], env={"COLUMNS": str(columns)})
    assert res.exit_code == 0, res.output
    lines = res.stdout.splitlines()
    assert max(len(ln) for ln in lines) <= columns  # the width was honoured
    return lines


@pytest.mark.parametrize("columns", [80, 100])
@pytest.mark.parametrize("argv", [p for p, _ in ALL], ids=lambda p: " ".join(p) or "autoscaler")
def test_no_example_is_split_by_the_terminal(argv: tuple[str, ...], columns: int) -> None:
    lines = help_at(argv, columns)
    shown = [ln.strip() for ln in lines[[ln.strip() for ln in lines].index("Examples:") + 1:] if ln.strip()]
    assert shown, "no examples"
    for before, line in zip(["", *shown[:-1]], shown, strict=True):
        # a line is a command of its own or the continuation its previous line announced with " \"
        continued = before.endswith(" \\")
        after_list = before.removesuffix(" \\").endswith(";")  # "a; \" goes on with the next command
        assert line.startswith("autoscaler ") != continued or after_list, (before, line)
        if continued and not after_list:  # cut before an option, a redirection or a pipe or list operator,
            # never between an option and its value
            assert line.startswith(("-", ">", "| ", "&& ")), line
        assert len(line) <= 76, line  # EXAMPLE_WIDTH: the page pads one column each side of 78


@pytest.mark.parametrize("argv", [p for p, _ in ALL], ids=lambda p: " ".join(p) or "autoscaler")
def test_help_paragraphs_break_only_where_the_terminal_wraps(argv: tuple[str, ...]) -> None:
    # the text above the first panel: a line followed by another of the same paragraph is one the next
    # word would not have fitted on (98 columns: the page pads one each side)
    lines = help_at(argv, 100)
    head = [ln.strip() for ln in lines[:next(i for i, ln in enumerate(lines) if ln.startswith("╭"))]]
    for line, after in pairwise(head):
        if line and after and not line.startswith("Usage:"):
            assert len(line) + 1 + len(after.split()[0]) > 98, (line, after)
    # a group's list of commands: each command's help one paragraph per line in the source
    cmd = dict(ALL)[argv]
    for sub in getattr(cmd, "commands", {}).values():
        first = (sub.help or "").split("\n\n")[0]
        assert "\n" not in first or first.startswith("\b"), (sub.name, first)


def test_a_long_example_is_cut_before_options_with_their_values() -> None:
    from autoscaler.cli.common import example_lines

    cmd = ("autoscaler backtest --config fleet.yaml --start 1735689600 --end 1735693200 --controller mpc -o json")
    assert example_lines(cmd, 76) == ["autoscaler backtest --config fleet.yaml --start 1735689600 \\",
                                      "    --end 1735693200 --controller mpc -o json"]
    assert example_lines("autoscaler admission budget -o yaml > epp-config.yaml", 40) == [
        "autoscaler admission budget -o yaml \\", "    > epp-config.yaml"]
    assert example_lines("autoscaler simulate", 76) == ["autoscaler simulate"]
    # a pipe is a cut, and "-f -"'s "-" is the option's value (stdin), not an option
    cmd = "autoscaler admission objectives http://autoscaler.autoscaler:8080 | kubectl apply -f -"
    assert example_lines(cmd, 76) == ["autoscaler admission objectives http://autoscaler.autoscaler:8080 \\",
                                      "    | kubectl apply -f -"]
    # a quoted argument is one word however many spaces it holds; "&&" and a word ending with ";" are cuts
    assert example_lines('autoscaler x --name "a b c" --k -5 && autoscaler y; autoscaler z', 20) == [
        "autoscaler x \\", '    --name "a b c" \\', "    --k -5 \\", "    && autoscaler y; \\",
        "    autoscaler z"]


def test_a_repeatable_option_shows_one_value_per_flag() -> None:
    lines = help_at(("profile", "fit"), 100)
    bench = next(ln for ln in lines if ln.lstrip("│ ").startswith("--bench"))
    assert "<path>" in bench and "<path>..." not in bench
    assert "Repeatable: --bench A --bench B." in " ".join(" ".join(lines).replace("│", " ").split())


def test_a_usage_error_is_one_error_line_with_exit_2() -> None:
    # two paths after one --bench: click's "unexpected extra argument", which typer draws as a box
    res = CliRunner().invoke(app, ["profile", "fit", "--model", "m", "--gpu", "g", "--out", "o.json",
                                   "--bench", "a.json", "b.json"], prog_name="autoscaler")
    assert res.exit_code == 2
    assert res.stdout == ""
    assert res.stderr.splitlines() == ["error: Got unexpected extra argument(s) (b.json); see "
                                       "'autoscaler profile fit --help'"]


def test_a_usage_error_ends_its_sentence_once() -> None:
    # click says "Missing option '--out'." with its own full stop: the line goes on with "; see", not ".;"
    res = CliRunner().invoke(app, ["dashboards", "export"], prog_name="autoscaler")
    assert res.exit_code == 2
    assert res.stderr.splitlines() == ["error: Missing option '--out'; see 'autoscaler dashboards export --help'"]


@pytest.mark.parametrize("argv", [["simulate", "--no-such-option"], ["no-such-command"], ["simulate", "--seed"],
                                  ["--bogus"], ["admission", "budget", "--mode"]])
def test_every_usage_error_is_one_line(argv: list[str]) -> None:
    res = CliRunner().invoke(app, argv)
    assert res.exit_code == 2, res.output
    lines = res.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "╭" not in res.stderr, res.stderr


def test_no_arguments_still_prints_the_help() -> None:
    res = CliRunner().invoke(app, ["admission"])
    assert "Usage:" in res.output and "Examples:" in res.output
