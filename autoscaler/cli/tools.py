"""The command groups around the loop: ``admission``, ``dashboards``, ``faults``, ``profiles``, ``profile``."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from autoscaler import files
from autoscaler.cli.common import (
    App,
    StderrLog,
    app,
    connect_prometheus,
    console,
    controller_list,
    err_console,
    examples,
    fail,
    interrupted,
    load_cfg,
    output_format,
    print_document,
    say,
    unreachable,
)
from autoscaler.cli.options import ControllersAliasOpt, JsonAliasOpt, output_help
from autoscaler.errors import AutoscalerError, Terminated, UnreachableError
from autoscaler.formats import count

if TYPE_CHECKING:
    from rich.table import Table

admission_app = App(no_args_is_help=True, help="Admission thresholds for a real gateway.", epilog=examples(
    "autoscaler admission objectives http://autoscaler.autoscaler:8080 | kubectl apply -f -",
    "autoscaler admission budget -o yaml > epp-config.yaml",
))
app.add_typer(admission_app, name="admission")


@admission_app.command("objectives", epilog=examples(
    "autoscaler admission objectives http://autoscaler.autoscaler:8080 | kubectl apply -f -",
    "autoscaler admission objectives admission.json --pool my-pool --namespace llm",
    "autoscaler admission objectives admission.json --continuations | kubectl apply -f -",
))
def admission_objectives(
    source: Annotated[str, typer.Argument(help="The loop's address (http://HOST:PORT, /v1/admission added) "
                                                "or a file holding an admission document.")],
    pool: Annotated[str | None, typer.Option(
        help="The InferencePool the objectives name (default: the service).")] = None,
    namespace: Annotated[str | None, typer.Option(help="The objectives' namespace.")] = None,
    api_group: Annotated[str, typer.Option(
        help="The InferenceObjective's API group: llm-d.ai (llm-d-router) or inference.networking.x-k8s.io "
             "(Gateway API Inference Extension up to v1.5).")] = "llm-d.ai",
    continuations: Annotated[bool, typer.Option(
        help="Also write <service>-<priority>-continuing, never shed, for a task's follow-up calls "
             "(header x-llm-d-inference-objective).")] = False,
) -> None:
    """Print the thresholds in force as the endpoint picker's InferenceObjectives.

    One objective per service and priority (docs/admission.md), for `kubectl apply -f -`; with
    --continuations, each priority's continuation objective too.
    """
    import yaml

    from autoscaler.adapters.gateway_api import objectives, read_document
    try:
        manifests = objectives(read_document(source), pool, namespace, api_group, continuations)
    except UnreachableError as exc:  # the address was fine, the server not there: exit 1, as for Prometheus
        raise unreachable(str(exc)) from None
    except ValueError as exc:
        raise fail(str(exc)) from None
    if not manifests:
        raise fail(f"admission document at {source}: no thresholds published yet (the loop publishes them "
                    "at its first decision)")
    typer.echo(yaml.safe_dump_all(manifests, sort_keys=False), nl=False)


@admission_app.command("budget", epilog=examples(
    "autoscaler admission budget --config fleet.yaml",
    "autoscaler admission budget --config fleet.yaml -o yaml --min-ceiling 0.8 > epp-config.yaml",
    "autoscaler admission budget --config fleet.yaml --mode hybrid --streaming -o yaml > epp-config.yaml",
    "autoscaler admission budget --config fleet.yaml --from http://autoscaler.autoscaler:8080 -o yaml",
))
def admission_budget(
    config: Annotated[Path | None, typer.Option(help="Fleet YAML file (default: the embedded example fleet).")] = None,
    service: Annotated[str | None, typer.Option(help="The service (default: the first).")] = None,
    output: Annotated[str, typer.Option("--output", "-o", help=output_help(
        "table | yaml", "table: each variant's budget; yaml: the EPP's config (no json: the EPP reads YAML)."))
    ] = "table",
    min_ceiling: Annotated[float | None, typer.Option(
        help="With yaml: hold the lowest priority from this pool saturation (priority-holdback-policy).")] = None,
    mode: Annotated[str, typer.Option(
        help="The concurrency detector's mode: requests (requests in flight), tokens (tokens in flight) or "
             "hybrid (both).")] = "requests",
    streaming: Annotated[bool | None, typer.Option(
        "--streaming/--no-streaming",
        help="Clients stream (tokens, hybrid: the EPP frees a request's tokens at its first token, unless the "
             "fleet's simulator.gateway.output_estimate; default: the fleet's simulator.clients.streaming).")] = None,
    source: Annotated[str | None, typer.Option(
        "--from", help="The loop's address (http://HOST:PORT) or an admission document file: use the ITL budget "
                       "the MPC learned and published there (requests mode only).")] = None,
) -> None:
    """Print the requests in flight each replica can carry at the ITL objective (docs/admission.md).

    From the capacity model's ITL bound on the service's typical request, at most max_num_seqs. With
    --mode tokens or hybrid, also the tokens the EPP counts in flight there (its inflight-load-producer,
    charged as the fleet's simulator.gateway says). With --output yaml, the endpoint picker's config
    holding every replica to the fewest of them (its concurrency detector takes one number for the
    pool), for the EPP's --config-file. With --from, the budget the controller learned and published
    (its itl_budget) replaces the model's for the variants it names: the EPP reads its config once, so
    roll it out again to apply a new one.
    """
    import yaml
    from rich.table import Table

    from autoscaler.adapters.gateway_api import epp_config
    from autoscaler.cli.common import check_service
    from controllers.admission import itl_budgets, pool_budget, token_budget
    try:
        output = output_format(output, False, ("table", "yaml"))
        if min_ceiling is not None and output != "yaml":
            raise ValueError("--min-ceiling sets the EPP config's priority holdback: it needs -o yaml")
        if mode not in ("requests", "tokens", "hybrid"):
            raise ValueError(f"--mode must be one of requests, tokens, hybrid, got {mode!r}")
        if source is not None and mode != "requests":
            raise ValueError("--from reads a budget of requests in flight: it needs --mode requests")
        cfg = load_cfg(config)
        check_service(cfg, service)
        svc = cfg.service(service)
        budgets = itl_budgets(svc, cfg.engine)
        learned: dict[str, int] = {}
        if source is not None:
            from autoscaler.adapters.gateway_api import read_itl_budgets
            learned = read_itl_budgets(source).get(svc.name, {})
            if not learned:
                raise ValueError(f"admission document at {source}: no ITL budget for service {svc.name} (the MPC "
                                 "publishes one each tick unless it runs with learn=0)")
            unknown = sorted(set(learned) - set(budgets))
            if unknown:
                raise ValueError(f"admission document at {source}: service {svc.name} has no variant "
                                 f"{', '.join(unknown)} in the fleet file")
            over = {n: k for n, k in learned.items() if k > cfg.engine.max_num_seqs}
            if over:  # a replica never runs more at once: the document is from another fleet, or wrong
                raise ValueError(f"admission document at {source}: ITL budget {over} above engine.max_num_seqs "
                                 f"({cfg.engine.max_num_seqs}) of the fleet file, the most a replica runs at once")
            budgets = {n: replace(b, budget=learned[n]) if n in learned else b for n, b in budgets.items()}
        one = pool_budget(budgets)
        tokens: dict[str, int] = {}
        g = cfg.simulator.gateway.model_copy(update={"max_token_concurrency": "auto"})
        if mode != "requests":  # the EPP config carries the prefix-cache scorer: its producer discounts hits
            tokens = token_budget(svc, cfg.engine, g, cfg.simulator.clients.streaming if streaming is None
                                  else streaming, discount_prefix=True)
        one_tokens = min(tokens[n] for n, b in budgets.items() if b.servable) if tokens else None
        if output == "yaml":
            producer = None
            if mode != "requests" and g.output_estimate:
                producer = {"addEstimatedOutputTokens": True, "outputRatio": g.output_ratio}
                if g.max_estimated_output_tokens is not None:
                    producer["maxEstimatedOutputTokens"] = g.max_estimated_output_tokens
            typer.echo(yaml.safe_dump(epp_config(one, min_ceiling, mode=mode, max_token_concurrency=one_tokens,
                                                 producer=producer), sort_keys=False), nl=False)
            return
    except UnreachableError as exc:  # the address was fine, the server not there: exit 1, as `objectives`
        raise unreachable(str(exc)) from None
    except (AutoscalerError, ValueError) as exc:
        raise fail(str(exc)) from None
    slo, typical = svc.slo["interactive"], svc.typical_request
    table = Table(title=f"{svc.name}: ITL budget per replica",
                  caption=f"ITL objective {slo.itl_s:g} s; typical request {typical.input_tokens:g} / "
                          f"{typical.output_tokens:g} tokens")
    columns = ["variant", "profile", "ITL bound req/s", "in flight there", "learned budget" if learned else "budget"]
    if tokens:
        columns.append("token budget")
    for col in columns:
        table.add_column(col, justify="left" if col in ("variant", "profile") else "right")
    for v in svc.variants:
        b = budgets[v.name]
        row = [v.name, v.profile, f"{b.itl_rps:.2f}", f"{math.floor(b.in_flight * 10) / 10:.1f}", str(b.budget)]
        table.add_row(*row, *([str(tokens[v.name])] if tokens else []))
    console.print(table)
    if learned:
        say(f"learned: as published at {source} (the model's in flight there, corrected by what the "
            "controller learned); variants it does not name keep the model's")
    cap = cfg.engine.max_num_seqs
    capped = [v.name for v in svc.variants
              if v.name not in learned and math.floor(budgets[v.name].in_flight) > cap]
    say(f"budget: at most engine.max_num_seqs ({cap}), the most a replica runs at once"
        + (f" ({', '.join(capped)} capped)" if capped else ""))
    say(f"one number for the pool (the EPP's maxConcurrency): {one}, {_fewest(budgets, lambda n: budgets[n].budget)}")
    if tokens:
        say(f"one number for the pool (the EPP's maxTokenConcurrency): {one_tokens}, "
            f"{_fewest(budgets, lambda n: tokens[n])}")


def _fewest(budgets: dict[str, Any], value: Callable[[str], int]) -> str:
    """Which variants the pool's one number is (``a100's budget, the fewest``): the servable variants whose
    ``value(name)`` is least (the EPP's detector takes one number for every endpoint)."""
    servable = [n for n, b in budgets.items() if b.servable]
    least = min(value(n) for n in servable)
    return f"{', '.join(n for n in servable if value(n) == least)}'s budget, the fewest"


dashboards_app = App(no_args_is_help=True, help="The Grafana dashboards and Prometheus rules.",
                     epilog=examples("autoscaler dashboards export --out bundle"))
app.add_typer(dashboards_app, name="dashboards")


@dashboards_app.command("export", epilog=examples(
    "autoscaler dashboards export --out bundle",
    "autoscaler dashboards export --out bundle --config fleet.yaml --objective 0.995",
    "autoscaler dashboards export --out bundle --runbook-url https://wiki.example.org/llm/runbooks.md",
))
def dashboards_export(
    # an empty or blank --out is refused before typer reads it (Command.parse_args: Path('') is Path('.'))
    out: Annotated[Path, typer.Option(metavar="<path>",
                                      help="Directory to write the bundle under: dashboards/, provisioning/, rules/, "
                                           "kubernetes/ and .autoscaler-bundle, the list of what it wrote "
                                           "(docs/dashboards.md).")],
    config: Annotated[Path | None, typer.Option(help="Fleet file (default: the embedded default fleet).")] = None,
    objective: Annotated[float, typer.Option(
        help="Fraction of interactive requests within their objectives the burn-rate alerts defend.")] = 0.99,
    prometheus_url: Annotated[str | None, typer.Option(
        help="The URL the provisioned Grafana datasource points at (default: the fleet's prometheus.url, "
             "else http://prometheus:9090).")] = None,
    runbook_url: Annotated[str | None, typer.Option(
        help="Where your copy of docs/runbooks.md is served: each alert's runbook_url is this page and "
             "the alert's heading (default: the project repository's page).", show_default=False)] = None,
) -> None:
    """Write the dashboard bundle for a fleet: Grafana dashboards, provisioning, Prometheus rules and
    both as Kubernetes manifests (docs/dashboards.md)."""
    from autoscaler.dashboards.bundle import render, write
    from autoscaler.dashboards.rules import RUNBOOKS_URL
    from autoscaler.urls import check_url

    try:
        cfg = load_cfg(config)
        if prometheus_url is not None:
            check_url(prometheus_url)
        bundle = render(cfg, objective, prometheus_url, runbook_url or RUNBOOKS_URL)  # bad settings: nothing made
        files.check_writable(out)  # a file there: one line naming --out, not the OSError of a path under it
        paths = write(bundle, out)
    except (AutoscalerError, ValueError, OSError) as exc:
        raise fail(str(exc)) from None
    say(f"wrote {len(paths)} files under {out}")


faults_app = App(no_args_is_help=True, help="Fault scenarios: the failures the anchors' users reported.",
                 epilog=examples("autoscaler faults run --scenarios other-writer"))
app.add_typer(faults_app, name="faults")


FAULTS_CONTROLLERS = "pid,mpc,hpa,keda,kpa,aibrix,dynamo,wva"


@faults_app.command("run", epilog=examples(
    "autoscaler faults run --scenarios other-writer",
    "autoscaler faults run --controller pid,hpa --out runs/faults -o json",
))
def faults_run(
    scenarios: Annotated[str | None, typer.Option(
        help="Comma-separated scenario names (default: every *.yaml of --suite).", show_default=False)] = None,
    controller: Annotated[str | None, typer.Option(
        help="Comma-separated controller specs (SPEC@POLICY sets a row's admission policy). Default: "
             f"{FAULTS_CONTROLLERS.replace(',', ', ')}.", show_default=False)] = None,
    controllers_alias: ControllersAliasOpt = None,
    out: Annotated[Path | None, typer.Option(help="Directory for faults.json and faults.md.")] = None,
    output: Annotated[str, typer.Option("--output", "-o", help=output_help(
        "table | json | yaml", "table: a Markdown table; json, yaml: the rows."))] = "table",
    json_alias: JsonAliasOpt = False,
    suite: Annotated[Path | None, typer.Option(
        help="Folder of scenario files (default: benchmarks/faults of this source tree).", show_default=False)] = None,
    data: Annotated[Path, typer.Option(help="Folder holding the traces that trace scenarios name.")] = Path(
        "../shared/data"),
    workers: Annotated[int | None, typer.Option(help="Processes for the simulator rows (default: CPUs).")] = None,
    seed: Annotated[int | None, typer.Option(help="Workload seed of every scenario (default: each file's own).",
                                             show_default=False)] = None,
) -> None:
    """Run the fault scenarios against the controllers and print one table.

    Scenario x controller -> harmful actions, interactive attainment, requests failed, retries and
    cost (docs/faults.md)."""
    from autoscaler.config.base import MAX_INT
    from autoscaler.faults.pace import STARVED_FRACTION
    from autoscaler.faults.rows import OUTPUTS, failed, markdown_table, starved, write_results
    from autoscaler.faults.suite import load_suite, run_suite, suite_dir
    from autoscaler.progress import Display

    try:
        output = output_format(output, json_alias)
        controllers = controller_list(controller, controllers_alias, FAULTS_CONTROLLERS)
        if workers is not None and workers < 1:
            raise ValueError(f"--workers must be >= 1, got {workers}")
        if seed is not None and not 0 <= seed <= MAX_INT:
            raise ValueError(f"--seed must be in [0, 2**53], got {seed}")
        names = [c.strip() for c in controllers.split(",")]
        if "" in names or len(set(names)) != len(names):
            raise ValueError(f"--controller '{controllers}': an empty or repeated entry")
        wanted = None if scenarios is None else [s.strip() for s in scenarios.split(",")]
        if wanted is not None and ("" in wanted or len(set(wanted)) != len(wanted)):
            raise ValueError(f"--scenarios '{scenarios}': an empty or repeated entry")
        suite_path = suite_dir() if suite is None else suite
        chosen = load_suite(suite_path, wanted)
        if seed is not None:
            chosen = [sc.model_copy(update={"seed": seed}) for sc in chosen]
        if out is not None:
            files.check_writable(out)
            files.clear(out, OUTPUTS)  # an interrupted run leaves none of an earlier run's results behind
        total = len(chosen) * len(names)
        finished: list[dict[str, Any]] = []

        def done(row: dict[str, Any]) -> None:
            finished.append(row)
            pace = row.get("pace")
            kept = "" if pace is None else (f", pace {pace['kept']:.2f} of {pace['target_x']:g}x, lowest "
                                            f"{pace['lowest']:.2f} over {pace['window_s']:g} s simulated"
                                            + (", starved" if pace["starved"] else ""))
            err_console.print(f"done {len(finished)}/{total}: {row['scenario']} x {row['controller']} "
                              f"({row['wall_s']:.0f} s{kept})", highlight=False, soft_wrap=True)

        rows = run_suite(chosen, names, data, workers, done,
                         progress=lambda shown: Display(shown, "faults run", err_console))
        paths = write_results(rows, out) if out is not None else []
    except KeyboardInterrupt as exc:  # Ctrl-C (130) or SIGTERM (143, ``autoscaler.entry``)
        if out is not None:
            raise interrupted(out, OUTPUTS, exc) from None
        raise typer.Exit(143 if isinstance(exc, Terminated) else 130) from None
    except (AutoscalerError, ValueError, OSError, RuntimeError) as exc:
        raise fail(str(exc)) from None
    if output != "table":
        print_document(rows, output)
    else:
        typer.echo(markdown_table(rows))
        if paths:
            say(f"wrote {' and '.join(str(p) for p in paths)}")
    slow = starved(rows)
    if slow:  # not an error: the row ran and says so; its attainment is the machine's load (docs/faults.md)
        say(f"{len(slow)} of {count(len(rows), 'row')} starved (the fleet fell below {STARVED_FRACTION:g} of its "
            f"pace; their attainment is not evidence, rerun them on a quieter machine): "
            f"{', '.join(r['scenario'] + ' x ' + r['controller'] for r in slow)}", err=True)
    bad = failed(rows)
    if bad:  # the other rows are written and shown
        fail(f"{len(bad)} of {count(len(rows), 'row')} failed: "
             f"{', '.join(r['scenario'] + ' x ' + r['controller'] for r in bad)} (the row's 'failed' says why)")
        raise typer.Exit(1)


profiles_app = App(no_args_is_help=True, help="The shipped performance profiles.",
                   epilog=examples("autoscaler profiles list"))
app.add_typer(profiles_app, name="profiles")

_SOURCE_LABEL = {"llm-inference-bench": "LIB", "splitwise": "Splitwise"}


def profiles_table() -> Table:
    """Every shipped profile: where its rows come from, how many, its errors, how its prefill slope was set."""
    from rich.table import Table

    from models.profiles import shipped_entries

    table = Table(title="Shipped performance profiles",
                  caption="LIB: LLM-Inference-Bench All_results.csv (+ Fig_21 TTFT where prefill is fitted); "
                          "Splitwise: perf_model.csv. Errors: mean |predicted / measured - 1|. prior: "
                          "prefill slope pinned (docs/simulator.md). *: a stand-in carrying another profile's "
                          "step times (coefficients.json's stand_in says which and why).")
    table.add_column("profile", no_wrap=True)
    table.add_column("source", no_wrap=True)
    for col in ("fit rows", "held out", "held-out err", "fit err"):
        table.add_column(col, justify="right")
    table.add_column("prefill")
    for name, e in sorted(shipped_entries().items()):
        mark = "*" if "stand_in" in e else ""
        table.add_row(name + mark, _SOURCE_LABEL[e["source"]], str(e["rows_fitted"]), str(e["rows_held_out"]),
                      f"{e['heldout_mape']:.1%}", f"{e['fit_mape']:.1%}",
                      "fitted" if e["prefill_prior"] is None else "prior")
    return table


def profile_groups_table() -> Table:
    """Each shipped profile on a row of its own (with its shipped step form), then one row per row group:
    held-out and fitted rows and their errors, and the held-out error of the form not shipped.

    The profile's name is not repeated on its groups' rows, and the box has no vertical rules, so the
    table fits 80 columns (the longest name is 25 characters).
    """
    from rich import box
    from rich.table import Table

    from models.profiles import group_listing

    table = Table(title="Shipped performance profiles by row group", box=box.SIMPLE_HEAD, pad_edge=False,
                  caption="ships: the step form the profile ships (docs/simulator.md#step-forms: how it is "
                          "chosen). prefill <= / > 2048: prefill steps of prompts of at most / over 2048 "
                          "tokens; decode B=n: mean decode step of n sequences; mixed B=n: whole runs "
                          "(prefill and decode) of n prompts. Errors: mean |predicted / measured - 1|; -: no "
                          "such rows; !: held-out error over 10 %. other form: the held-out error of the "
                          "step form not shipped.")
    table.add_column("profile / group", no_wrap=True)
    for col in ("held", "held err", "fit", "fit err"):
        table.add_column(col, justify="right", no_wrap=True)
    table.add_column("other form", no_wrap=True)

    def pct(e: float | None) -> str:
        return "-" if e is None else f"{e:.1%}" + ("!" if e > 0.10 else "")

    name = None
    for item in group_listing():
        if item["name"] != name:
            name = item["name"]
            table.add_row(name, "", "", "", "", f"ships {item['step_form']}", style="bold")
        held, fitted = item["heldout_mape"], item["fit_mape"]
        other = "roofline" if item["step_form"] == "linear" else "linear"
        table.add_row(f"  {item['group']}", str(item["rows_held_out"]), pct(held),
                      str(item["rows_fitted"]), "-" if fitted is None else f"{fitted:.1%}",
                      f"{other} {pct(item[f'{other}_heldout_mape'])}")
    return table


@profiles_app.command("list", epilog=examples("autoscaler profiles list", "autoscaler profiles list -o json",
                                               "autoscaler profiles list --groups"))
def profiles_list(
    output: Annotated[str, typer.Option("--output", "-o", help=output_help(
        "table | json | yaml", "json, yaml: a list of {name, model, gpu, tensor_parallel, rows_fitted, "
        "rows_held_out, heldout_mape}; with --groups a list of {name, group, rows_held_out, heldout_mape, "
        "rows_fitted, fit_mape, step_form, linear_heldout_mape, roofline_heldout_mape}."))] = "table",
    groups: Annotated[bool, typer.Option("--groups", help=(
        "One row per profile and row group (short and long prefills, decode by batch, whole runs by batch) "
        "with its held-out and fit errors."))] = False,
    json_alias: JsonAliasOpt = False,
) -> None:
    """Every shipped profile with its source rows and held-out error (a fleet file's profile: names one)."""
    from models.profiles import group_listing, listing

    try:
        output = output_format(output, json_alias)
    except ValueError as exc:
        raise fail(str(exc)) from None
    if output != "table":
        print_document(group_listing() if groups else listing(), output)
    else:
        console.print(profile_groups_table() if groups else profiles_table())


profile_app = App(no_args_is_help=True, help="A profile from your own measurements.",
                  epilog=examples("autoscaler profile fit --model llama-3-8b --gpu H100-SXM --out my.json "
                                  "--bench run1.json"))
app.add_typer(profile_app, name="profile")


def _fit_table(res: Any) -> Table:
    """The fitted coefficients beside the shipped profile of the same (model, GPU, TP), if any."""
    from rich.table import Table

    from models.profiles import list_profiles, profile_name, shipped_entries

    doc = res.document
    name = profile_name(doc["model"], doc["gpu"], doc["tensor_parallel"])
    shipped = shipped_entries()[name]["coefficients"] if name in list_profiles() else None
    table = Table(title=f"profile fit: {doc['model']} on {doc['tensor_parallel']} x {doc['gpu']}",
                  caption="se: standard error / value")
    table.add_column("coefficient", no_wrap=True)
    table.add_column("fitted", justify="right")
    table.add_column("se", justify="right")
    if shipped is not None:
        table.add_column(f"shipped {name}", justify="right")
    se = doc["relative_standard_error"]
    for key, value in doc["coefficients"].items():
        row = [key, f"{value:.4g}", f"{se[key]:.1%}"]
        if shipped is not None:
            row.append(f"{shipped[key]:.4g}")
        table.add_row(*row)
    return table


@profile_app.command("fit", epilog=examples(
    "autoscaler profile fit --model llama-3-8b --gpu H100-SXM --out my.json --bench run1.json --bench run2.json",
    "autoscaler profile fit --model llama-3-8b --gpu H100-SXM --out my.json --prometheus-url http://localhost:9090 "
    "--selector 'model_name=\"m\"' --start 2025-01-01T00:00 --end 2025-01-01T06:00",
    "autoscaler profile fit --model llama-3-8b --gpu H100-SXM --out decode.json --prometheus-url "
    "http://localhost:9090 --selector 'model_name=\"m\"' --role decode --role-labels dynamo --start "
    "2025-01-01T00:00 --end 2025-01-01T06:00",
))
def profile_fit(
    model: Annotated[str, typer.Option(help="Model key: a shipped profile name's first part, e.g. llama-3-8b.")],
    gpu: Annotated[str, typer.Option(help="GPU, as in a fleet file or a profile name, e.g. H100-SXM.")],
    out: Annotated[Path, typer.Option(help="Profile file to write (*.json; a fleet file's profile: names it).")],
    bench: Annotated[list[Path] | None, typer.Option(
        help="Result JSON of vllm bench serve --save-result --save-detailed against one replica (a sweep: "
             "one per run).")] = None,
    prometheus_url: Annotated[str | None, typer.Option(help="Prometheus base URL of the live fleet.")] = None,
    selector: Annotated[str | None, typer.Option(
        help='PromQL matchers of the pods of this model on this GPU, e.g. model_name="m",variant="h100".')] = None,
    role: Annotated[str | None, typer.Option(
        help="Prometheus: fit one prefill/decode pool's pods: prefill | decode (adds the role's label to "
             "--selector).")] = None,
    role_labels: Annotated[str, typer.Option(
        help="Prometheus, with --role: how the pods say their role: llm-d (llm_d_ai_role) | dynamo "
             "(dynamo_component prefill/backend) | dynamo-operator, as a fleet file's prometheus.role_labels."
    )] = "llm-d",
    start: Annotated[str | None, typer.Option(help="Range start: unix seconds or ISO 8601 (UTC if no offset).")] = None,
    end: Annotated[str | None, typer.Option(help="Range end: unix seconds or ISO 8601.")] = None,
    tensor_parallel: Annotated[int, typer.Option(help="GPUs per replica (vLLM --tensor-parallel-size).")] = 1,
    window: Annotated[float, typer.Option(help="Prometheus: seconds per window (one row per busy pod-window).")] = 60.0,
    resolution: Annotated[float, typer.Option(help="Prometheus: the scrape interval, seconds.")] = 15.0,
    max_num_batched_tokens: Annotated[int, typer.Option(
        help="Benchmark: the server's --max-num-batched-tokens.")] = 8192,
    max_num_seqs: Annotated[int, typer.Option(help="Benchmark: the server's --max-num-seqs.")] = 256,
    tolerance: Annotated[float, typer.Option(
        help="Benchmark: seconds within which tokens of one engine step reach the client.")] = 0.001,
    output: Annotated[str, typer.Option("--output", "-o", help=output_help(
        "table | json | yaml", "json, yaml: the profile file's content."))] = "table",
    json_alias: JsonAliasOpt = False,
) -> None:
    """Fit a profile to a vLLM benchmark's results (--bench) or a Prometheus range (--prometheus-url); write it.

    Give exactly one of --bench and --prometheus-url (with --selector, --start and --end).
    """
    import logging

    from autoscaler import profile_fit as pf
    from autoscaler.backtest import parse_time
    from autoscaler.config.loading import default_config

    try:
        output = output_format(output, json_alias)
        if (bench is None) == (prometheus_url is None):
            raise ValueError("give either --bench FILE (one or more) or --prometheus-url with --selector, --start "
                             "and --end")
        gpu = gpu.lower()  # fleet files write H100-SXM, profile names h100-sxm
        if bench is not None:
            # what only the Prometheus fit reads: a benchmark's fit would drop it silently (--role prefill
            # would write an aggregated replica's profile)
            given = [flag for flag, value in (("--role", role), ("--selector", selector), ("--start", start),
                                              ("--end", end)) if value is not None]
            given += ["--role-labels"] if role_labels != "llm-d" else []
            given += [flag for flag, value, default in (("--window", window, 60.0), ("--resolution", resolution, 15.0))
                      if value != default]
            if given:
                raise ValueError(f"{', '.join(given)}: read only by the Prometheus fit (--prometheus-url), not "
                                 "with --bench")
            res = pf.from_bench(bench, model, gpu, tensor_parallel, out, max_num_batched_tokens, tolerance,
                                max_num_seqs)
        else:
            # what only the benchmark's fit reads: the Prometheus fit would drop it silently
            given = [flag for flag, value, default in (("--max-num-batched-tokens", max_num_batched_tokens, 8192),
                                                       ("--max-num-seqs", max_num_seqs, 256),
                                                       ("--tolerance", tolerance, 0.001)) if value != default]
            if given:
                raise ValueError(f"{', '.join(given)}: read only by the benchmark's fit (--bench), not with "
                                 "--prometheus-url")
            if prometheus_url is None or selector is None or start is None or end is None:
                raise ValueError("--prometheus-url needs --selector, --start and --end")
            t0, t1 = parse_time(start, "--start"), parse_time(end, "--end")
            with StderrLog(logging.ERROR):
                res = pf.from_prometheus(lambda url: connect_prometheus(default_config(), url), prometheus_url,
                                         pf.role_selector(selector, role, role_labels),
                                         t0, t1, model, gpu, tensor_parallel, out, window, resolution,
                                         log=lambda m: say(m, err=True))
    except (AutoscalerError, ValueError) as exc:
        raise fail(str(exc)) from None
    except OSError as exc:
        raise fail(f"{out}: {exc.strerror or exc}") from None
    if output != "table":
        print_document(res.document, output)
        return
    console.print(_fit_table(res))
    f = res.fit
    console.print(f"{f.rows_fitted} {f.unit}s fitted, {f.rows_held_out} held out; held-out error {f.heldout_mape:.1%} "
                  f"(fit {f.fit_mape:.1%}): mean |predicted / measured - 1| of their durations", highlight=False,
                  soft_wrap=True)
    say(f"wrote {res.out}")
