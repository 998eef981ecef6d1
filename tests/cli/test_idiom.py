"""One command-line idiom (issue 32): ``-o/--output`` and ``--controller`` everywhere, readable help with
examples, ``--version``, a light start-up, user text printed verbatim, what live commands refuse."""

from __future__ import annotations

import json
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.main import get_command
from typer.testing import CliRunner

from autoscaler.cli import app
from autoscaler.cli.options import CONTROLLERS, DEFAULT_BATCH_FRACTION, LIVE_CONTROLLERS, NEEDS_A_TRACE, TRACE_FORMATS

HEAVY = ("scipy", "statsmodels", "matplotlib", "kubernetes", "numpy", "pydantic")


def commands(group: Any = None, path: tuple[str, ...] = ()) -> list[tuple[tuple[str, ...], Any]]:
    """(argv path, click command) of every command of the app, groups' subcommands included."""
    group = get_command(app) if group is None else group
    out = []
    for name, cmd in group.commands.items():
        if hasattr(cmd, "commands"):
            out += commands(cmd, (*path, name))
        else:
            out.append(((*path, name), cmd))
    return out


ALL = commands()


def help_page(*argv: str) -> str:
    res = CliRunner().invoke(app, [*argv, "--help"], terminal_width=200)
    assert res.exit_code == 0, res.output
    return res.stdout


# ------------------------------------------------------------------------------------ start-up
@pytest.mark.parametrize("module", ["autoscaler.cli", "autoscaler.entry"])
def test_importing_the_command_line_imports_nothing_heavy(module: str) -> None:
    # A fresh interpreter: this test process has imported everything already.
    code = (f"import sys, {module}\n"
            f"{'import autoscaler.cli' if module == 'autoscaler.entry' else ''}\n"
            f"print(','.join(m for m in {HEAVY!r} if m in sys.modules))")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert res.stdout.strip() == ""


def test_the_names_written_out_for_help_match_the_registry() -> None:
    from autoscaler.workload.build import DEFAULT_BATCH_FRACTION as BUILD_DEFAULT
    from autoscaler.workload.loader import LOADERS
    from controllers.registry import NAMES

    assert CONTROLLERS == NAMES
    assert DEFAULT_BATCH_FRACTION == BUILD_DEFAULT
    assert set(TRACE_FORMATS) == {*LOADERS, "servegen"}


def test_version_is_the_installed_packages() -> None:
    res = CliRunner().invoke(app, ["--version"])
    assert res.exit_code == 0
    assert res.stdout == f"autoscaler {version('llm-autoscaler')}\n"


# ------------------------------------------------------------------------------------ help pages
@pytest.mark.parametrize("argv", [p for p, _ in ALL], ids=" ".join)
def test_every_help_page_has_examples_and_readable_metavars(argv: tuple[str, ...]) -> None:
    page = help_page(*argv)
    assert "Examples:" in page
    examples = page.split("Examples:", 1)[1]
    assert f"autoscaler {' '.join(argv)}" in examples
    for bad in ("<bool>", "<list["):
        assert bad not in page, bad


@pytest.mark.parametrize("group", ["admission", "dashboards", "faults", "profiles", "profile"])
def test_every_group_help_page_has_examples_of_its_own(group: str) -> None:
    page = help_page(group)
    assert "Examples:" in page and f"autoscaler {group} " in page.split("Examples:", 1)[1]


def test_top_level_help_shows_examples_and_version() -> None:
    page = help_page()
    assert "--version" in page and "<bool>" not in page and "Examples:" in page


@pytest.mark.parametrize("argv", [p for p, _ in ALL], ids=" ".join)
def test_help_strings_are_sentences(argv: tuple[str, ...]) -> None:
    cmd = dict(ALL)[argv]
    for p in cmd.params:
        if p.hidden or not p.help:
            continue
        assert p.help[0].isupper() and p.help.rstrip().endswith("."), (argv, p.name, p.help)


@pytest.mark.parametrize("argv", [p for p, _ in ALL], ids=" ".join)
def test_one_spelling_per_concept(argv: tuple[str, ...]) -> None:
    visible = {o for p in dict(ALL)[argv].params if not getattr(p, "hidden", False) for o in p.opts}
    assert "--json" not in visible and "--controllers" not in visible
    if "--output" in visible:
        assert "-o" in visible


# ------------------------------------------------------------------------------------ -o/--output
def test_output_json_and_yaml_print_the_same_document() -> None:
    as_json = CliRunner().invoke(app, ["profiles", "list", "-o", "json"])
    as_yaml = CliRunner().invoke(app, ["profiles", "list", "--output", "yaml"])
    assert as_json.exit_code == 0 == as_yaml.exit_code
    from models.profiles import listing

    assert json.loads(as_json.stdout) == listing() == yaml.safe_load(as_yaml.stdout)


def test_old_json_flag_still_works_with_a_warning() -> None:
    res = CliRunner().invoke(app, ["profiles", "list", "--json"])
    assert res.exit_code == 0
    assert json.loads(res.stdout) == json.loads(CliRunner().invoke(app, ["profiles", "list", "-o", "json"]).stdout)
    assert res.stderr == "warning: --json is deprecated and will be removed: use -o json (or --output json)\n"


@pytest.mark.parametrize(("argv", "needle"), [
    (["profiles", "list", "-o", "xml"], "-o/--output must be one of table, json, yaml, got 'xml'"),
    (["dry-run", "-o", "yaml", "--prometheus-url", "http://127.0.0.1:9"],
     "-o/--output must be one of table, json, got 'yaml'"),
    (["admission", "budget", "-o", "json"], "-o/--output must be one of table, yaml, got 'json'"),
    (["profiles", "list", "--json", "-o", "yaml"], "--json contradicts -o yaml: give one of them"),
])
def test_a_format_a_command_does_not_offer_is_a_one_line_error(argv: list[str], needle: str) -> None:
    res = CliRunner().invoke(app, argv)
    assert res.exit_code == 2
    assert res.stderr.splitlines()[-1] == f"error: {needle}"


# ------------------------------------------------------------------------------------ controllers
def option_help(command: str, option: str) -> str:
    """The help text of ``option`` of ``command``, as its help page shows it."""
    return next(p.help for p in dict(ALL)[(command,)].params if option in p.opts)


@pytest.mark.parametrize("command", ["dry-run", "backtest", "run"])
def test_live_commands_offer_no_controller_that_needs_a_trace(command: str) -> None:
    assert option_help(command, "--controller") == (
        f"Controller spec NAME[:key=value...]; NAME is one of {', '.join(LIVE_CONTROLLERS)} (oracle and bound need a "
        "trace: simulate, compare).")
    assert not set(NEEDS_A_TRACE) & set(LIVE_CONTROLLERS) and "mpc" in LIVE_CONTROLLERS


@pytest.mark.parametrize(("command", "extra"), [
    ("dry-run", ["--prometheus-url", "http://127.0.0.1:9", "--once"]),
    ("backtest", ["--start", "0", "--end", "60", "--prometheus-url", "http://127.0.0.1:9"]),
    ("run", ["--config", "examples/fleet.yaml"]),
])
@pytest.mark.parametrize("name", NEEDS_A_TRACE)
def test_live_commands_refuse_what_they_do_not_offer(command: str, extra: list[str], name: str) -> None:
    res = CliRunner().invoke(app, [command, "--controller", name, *extra])
    assert res.exit_code == 2
    assert res.stderr == (f"error: --controller {name} needs a trace (simulate, compare); {command} takes one of: "
                          f"{', '.join(LIVE_CONTROLLERS)}\n")


@pytest.mark.parametrize(("command", "extra"), [
    ("dry-run", ["--prometheus-url", "http://127.0.0.1:9", "--once"]),
    ("run", ["--config", "examples/fleet.yaml"]),
])
def test_real_time_commands_refuse_a_solve_time_limit_past_the_default(command: str, extra: list[str]) -> None:
    # mpc:time_limit lets a simulated solve run past the 10 s a live tick allows (controllers.mpc)
    res = CliRunner().invoke(app, [command, "--controller", "mpc:node_limit=100:time_limit=600", *extra])
    assert res.exit_code == 2
    assert res.stderr == ("error: --controller mpc:node_limit=100:time_limit=600: time_limit=600 is for simulation "
                          f"(a solve may run on); {command} runs in real time: at most 10 s\n")


def test_a_solve_time_limit_within_the_default_passes_the_live_check() -> None:
    from autoscaler.cli.options import check_live_controller

    check_live_controller("mpc:time_limit=10", "run")
    check_live_controller("mpc:time_limit=2.5", "dry-run")
    check_live_controller("mpc:time_limit=600", "backtest")  # not in real time: a solve may run on


def test_simulate_offers_every_controller() -> None:
    assert option_help("simulate", "--controller").endswith(f"NAME is one of {', '.join(CONTROLLERS)}.")


def test_a_pid_gain_in_a_spec_says_where_gains_are_set() -> None:
    res = CliRunner().invoke(app, ["simulate", "--controller", "pid:kp=abc"])
    assert res.exit_code == 2
    assert res.stderr == ("error: bad parameter 'kp=abc' for pid; its spec takes no parameters; its gains and "
                          "setpoint (kp, ki, kd, setpoint, deadband, ...) are set in the fleet file under "
                          "controller.pid (docs/configuration.md#controller)\n")


def test_old_controllers_spelling_still_works_with_a_warning() -> None:
    res = CliRunner().invoke(app, ["compare", "--controllers", "hpa,nope"])
    assert res.exit_code == 2
    assert res.stderr.splitlines() == [
        "warning: --controllers is deprecated and will be removed: use --controller (a comma-separated list)",
        "error: unknown controller 'nope'; choose one of: " + ", ".join(CONTROLLERS)]


# ------------------------------------------------------------------------------------ user text verbatim
NASTY = "no:x:such:warning:file.csv"


@pytest.mark.parametrize("argv", [["simulate", "--config", NASTY], ["simulate", "--trace", NASTY],
                                  ["dashboards", "export", "--out", "o", "--config", NASTY]])
def test_a_path_with_emoji_codes_prints_verbatim(argv: list[str], tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    res = CliRunner().invoke(app, argv)
    assert res.exit_code == 2
    assert res.stderr.startswith(f"error: {NASTY}"), res.stderr


# ------------------------------------------------------------------------------------ --trace-format
def test_trace_format_offers_servegen() -> None:
    for command in ("simulate", "compare"):
        assert option_help(command, "--trace-format").startswith("Trace format: azure | mooncake | servegen ")


def test_trace_format_servegen_reads_a_folder_and_refuses_a_file(tmp_path: Path) -> None:
    from autoscaler.workload.build import build_workload

    folder = tmp_path / "m"
    folder.mkdir()
    (folder / "chunk-0-trace.csv").write_text("0,2.0,1.0,Gamma,1.0,0.5\n600,0,0,,0,0\n")
    assert build_workload(folder, "servegen", span=(0, 60)).requests
    with pytest.raises(ValueError, match="is a ServeGen folder"):
        build_workload(folder, "azure", span=(0, 60))
    trace = tmp_path / "t.csv"
    trace.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.0000000,100,10\n")
    res = CliRunner().invoke(app, ["simulate", "--trace", str(trace), "--trace-format", "servegen"])
    assert res.exit_code == 2
    assert res.stderr == (f"error: --trace-format servegen: {trace} is not a ServeGen model folder (no "
                          "chunk-<n>-trace.csv in a folder)\n")


# ------------------------------------------------------------------------------------ compare --wide
def test_compare_wide_fits_the_terminal_width(tmp_path: Path) -> None:
    res = CliRunner().invoke(app, ["compare", "--controller", "static", "--span", "0:300", "--workers", "1",
                                   "--wide", "--out", str(tmp_path)], env={"COLUMNS": "100"})
    assert res.exit_code == 0, res.output
    lines = res.stdout.splitlines()
    assert any("wall s" in ln for ln in lines) and any(ln.startswith("│ static") for ln in lines)
    assert max(len(ln) for ln in lines if not ln.startswith("wrote ")) <= 100


def test_compare_piped_without_columns_prints_the_wide_table_whole(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("COLUMNS", raising=False)
    from autoscaler.cli.comparison import table_width

    assert table_width(wide=True) == 170 and table_width(wide=False) == 100
    monkeypatch.setenv("COLUMNS", "90")
    assert table_width(wide=True) == 90


# ------------------------------------------------------------------------------------ exit codes
@pytest.mark.parametrize(("argv", "status"), [
    # a server that does not answer: 1, whichever command reads it (docs/architecture.md#exit-codes)
    (["dry-run", "--prometheus-url", "http://127.0.0.1:1", "--once"], 1),
    (["backtest", "--start", "0", "--end", "60", "--prometheus-url", "http://127.0.0.1:1"], 1),
    (["admission", "objectives", "http://127.0.0.1:1"], 1),
    # a file that is not there: 2, whichever command reads it
    (["admission", "objectives", "/nonexistent/admission.json"], 2),
    (["profile", "fit", "--model", "llama-3-8b", "--gpu", "h100-sxm", "--out", "/nonexistent/p.json",
      "--bench", "/nonexistent/run.json"], 2),
    (["run", "--config", "examples/fleet.yaml", "--prometheus-url", "http://127.0.0.1:1", "--port", "0",
      "--kubeconfig", "/nonexistent/kubeconfig"], 2),
    (["simulate", "--config", "/nonexistent/fleet.yaml"], 2),
])
def test_the_same_failure_exits_the_same_way_in_every_command(argv: list[str], status: int) -> None:
    res = CliRunner().invoke(app, argv)
    assert res.exit_code == status, res.output
    assert len(res.stderr.splitlines()) == 1 and res.stderr.startswith("error: "), res.stderr
