"""The fault suite: every scenario against every controller, one row each (``autoscaler faults run``).

A row is ``{scenario, controller, harmful_actions, slo_attainment_interactive, requests_failed,
retries, cost_usd}`` plus ``harm`` (rule -> events, ``autoscaler.faults.harm``), ``crashes`` (each
crash as applied: time, replicas it took, requests it failed; null in live rows), ``layer``,
``reported``, ``seed``, ``wall_s`` and ``pace`` (the pace a live row's fleet kept, ``starved`` below
half of it: ``autoscaler.faults.pace``; null in simulator rows). Our controllers (``pid``, ``mpc``)
run with the scenario's ``admission`` policy (else the fleet's), the anchors without one, as their
users run them. Simulator rows run in parallel processes; live rows (``autoscaler.faults.live``) one
after another, each on its own ports. A controller that cannot run on a scenario's fleet
(``not_applicable``: one that needs aggregated variants, hpa or keda say, on a service of
prefill/decode pools only; ``dynamo-pd`` or ``wva-pd`` on a service without pools) gets a row saying so, every
figure null, and is not run.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, closing, contextmanager, nullcontext
from pathlib import Path
from typing import Any

from autoscaler.compare import split_row
from autoscaler.config import FleetConfig
from autoscaler.errors import ConfigError
from autoscaler.faults.harm import harm_counts
from autoscaler.faults.inject import Injector
from autoscaler.faults.rows import failed_row, make_row, not_applicable_row
from autoscaler.faults.scenario import Scenario, load_scenario, scenario_fleet, scenario_workload
from autoscaler.progress import Rows
from autoscaler.report import summarize
from autoscaler.simulate import SimulationDriver, default_admission
from autoscaler.workers import run_each
from autoscaler.workload.types import Workload
from controllers.base import FleetMismatchError
from controllers.registry import ANCHORS, build


def suite_dir() -> Path:
    """``benchmarks/faults`` of the source tree this package runs from."""
    return Path(__file__).resolve().parents[2] / "benchmarks" / "faults"


def load_suite(directory: Path, names: Sequence[str] | None = None) -> list[Scenario]:
    """The scenarios of ``directory`` (``*.yaml``, by name), or the ``names`` among them, in that order.

    Raises:
        ConfigError: no such directory, an unknown name (the message lists the known ones), or a
            scenario file that does not validate.
    """
    if not directory.is_dir():
        raise ConfigError(f"{directory}: no fault scenarios there (--suite names the folder of *.yaml scenarios)")
    paths = {p.stem: p for p in sorted(directory.glob("*.yaml"))}
    if not paths:
        raise ConfigError(f"{directory}: no *.yaml fault scenarios there")
    wanted = list(names) if names else list(paths)
    unknown = [n for n in wanted if n not in paths]
    if unknown:
        raise ConfigError(f"unknown scenario {', '.join(unknown)} (known: {', '.join(paths)})")
    out = []
    for n in wanted:
        sc = load_scenario(paths[n])
        if sc.name != n:
            raise ConfigError(f"{paths[n]}: name '{sc.name}' differs from the file's name '{n}'")
        out.append(sc)
    return out


def admission_for(sc: Scenario, cfg: FleetConfig, name: str) -> str:
    """A row's admission policy: its own (``SPEC@POLICY``), else none for an anchor, else the
    scenario's, else the fleet's."""
    spec, policy = split_row(name)
    if policy is not None:
        return policy
    if spec.split(":")[0] in ANCHORS or sc.admission is None:
        return default_admission(cfg, spec)
    return sc.admission


def run_sim_row(sc: Scenario, name: str, cfg: FleetConfig, workload: Workload,
                report: Callable[[float], None] | None = None) -> dict[str, Any]:
    """One simulator-layer row; ``report`` is called with the simulated time as it goes (``Rows.reporter``)."""
    spec, _ = split_row(name)
    ctrl = build(spec, cfg, None, workload)
    driver = SimulationDriver(cfg, workload, ctrl, admission=admission_for(sc, cfg, name))
    injector = Injector(sc, driver)

    def on_step(now: float) -> None:
        injector.on_step(now)
        if report is not None:
            report(now)

    with quiet_logs("autoscaler.loop"):
        run = driver.run(on_step=on_step)
    return make_row(sc, name, summarize(run), harm_counts(sc, run), injector.crashed)


def not_applicable(cfg: FleetConfig, name: str, workload: Workload | None) -> str | None:
    """Why controller ``name`` (a row's spec) cannot run on ``cfg``, or None when it can: it refuses
    the fleet (``FleetMismatchError``), or it does not scale prefill/decode pools and the target
    service has nothing else (it would only hold).

    Raises:
        ValueError: an unknown controller or a bad spec.
    """
    try:
        ctrl = build(split_row(name)[0], cfg, None, workload)
    except FleetMismatchError as exc:
        return str(exc)
    svc = cfg.service(None)
    if not svc.variants and not ctrl.scales_roles:
        return f"{name} does not scale prefill/decode pools, and service {svc.name} has only those"
    return None


@contextmanager
def quiet_logs(*names: str) -> Iterator[None]:
    """Only errors from these loggers meanwhile: the injected faults' warnings, every tick, are the
    point of a scenario, not news."""
    loggers = [logging.getLogger(n) for n in names]
    levels = [lg.level for lg in loggers]
    for lg in loggers:
        lg.setLevel(logging.ERROR)
    try:
        yield
    finally:
        for lg, level in zip(loggers, levels, strict=True):
            lg.setLevel(level)


_JOBS: dict[str, tuple[Scenario, FleetConfig, Workload]] = {}
_PROGRESS: dict[tuple[str, str], tuple[Rows, int]] = {}  # job -> its row of the progress shown


def _work(job: tuple[str, str]) -> dict[str, Any]:
    sc, cfg, wl = _JOBS[job[0]]
    if job not in _PROGRESS:
        return run_sim_row(sc, job[1], cfg, wl)
    shown, i = _PROGRESS[job]
    shown.start(i)
    try:
        return run_sim_row(sc, job[1], cfg, wl, shown.reporter(i))
    finally:
        shown.finish(i)


def _sim_rows(jobs: Sequence[tuple[str, str]]) -> Rows:
    """The progress of the simulator rows, ``SCENARIO x CONTROLLER``, each spanning its trace's last arrival."""
    spans = [wl.requests[-1].arrival_s if wl.requests else 0.0 for wl in (_JOBS[sc][2] for sc, _ in jobs)]
    return Rows([f"{sc} x {c}" for sc, c in jobs], spans)


def run_suite(scenarios: Sequence[Scenario], controllers: Sequence[str], data: Path, workers: int | None = None,
              done: Callable[[dict[str, Any]], None] | None = None,
              progress: Callable[[Rows], AbstractContextManager[object]] | None = None) -> list[dict[str, Any]]:
    """Every scenario x controller, rows in that order.

    ``done`` is called with each row as it ends; ``progress`` is given the simulator rows' ``Rows``
    and entered while they run (``autoscaler.progress.Display``).

    Raises:
        ConfigError: a scenario's fleet or trace (before anything runs); ValueError: an unknown
            controller; RuntimeError: a live row's harness failed (``autoscaler.faults.live``).
    """
    for name in controllers:
        split_row(name)
    prepared = {}
    rows: dict[tuple[str, str], dict[str, Any]] = {}
    for sc in scenarios:
        cfg = scenario_fleet(sc)
        wl = scenario_workload(sc, data) if sc.layer == "simulator" else None
        for name in controllers:
            why = not_applicable(cfg, name, wl)  # an unknown controller fails here, before any run
            policy = admission_for(sc, cfg, name)
            if why is None and sc.layer == "simulator" and policy != "none" and any(
                    s.roles is not None for s in cfg.services):  # ``FleetSimulator`` refuses it: not a failure
                why = (f"{name}: admission policy {policy} with prefill/decode pools (the gateway's flow control "
                       "there is not simulated yet)")
            if why is not None:
                rows[(sc.name, name)] = not_applicable_row(sc, name, why)
        prepared[sc.name] = (sc, cfg, wl)
    sim_jobs = [(sc.name, c) for sc in scenarios if sc.layer == "simulator" for c in controllers
                if (sc.name, c) not in rows]
    live_jobs = [(sc.name, c) for sc in scenarios if sc.layer == "live" for c in controllers
                 if (sc.name, c) not in rows]
    for na in rows.values():
        if done is not None:
            done(na)
    n = min(len(sim_jobs), os.cpu_count() or 1) if workers is None else max(1, min(workers, len(sim_jobs)))
    _JOBS.clear()
    _JOBS.update({k: v for k, v in prepared.items() if v[2] is not None})  # type: ignore[misc]
    shown = _sim_rows(sim_jobs)
    _PROGRESS.clear()
    _PROGRESS.update({job: (shown, i) for i, job in enumerate(sim_jobs)})  # the forked workers inherit it
    with progress(shown) if progress is not None and sim_jobs else nullcontext():
        _run_sim_jobs(sim_jobs, n, rows, done)
    if live_jobs:
        from autoscaler.faults.live import run_live_row

        for job in live_jobs:
            sc, cfg, _ = prepared[job[0]]
            with quiet_logs("autoscaler", "kubernetes", "urllib3"):
                rows[job] = run_live_row(sc, job[1], cfg, data)
            if done is not None:
                done(rows[job])
    return [rows[(sc.name, c)] for sc in scenarios for c in controllers]


def _run_sim_jobs(sim_jobs: Sequence[tuple[str, str]], n: int, rows: dict[tuple[str, str], dict[str, Any]],
                  done: Callable[[dict[str, Any]], None] | None) -> None:
    """Run the simulator rows (``_JOBS``) into ``rows``, ``n`` at once, each in a process of its own
    (here when ``n`` is 1); ``done`` is called with each as it ends. A row whose run raised, or whose
    worker died, is a failed row (``rows.failed_row``) and the others go on; an interrupt stops all."""
    def record(job: tuple[str, str], outcome: dict[str, Any] | Exception, since: float) -> None:
        if isinstance(outcome, Exception):
            outcome = failed_row(_JOBS[job[0]][0], job[1], outcome, time.perf_counter() - since)
            if job in _PROGRESS:  # a worker that died could not say so
                shown, i = _PROGRESS[job]
                shown.finish(i)
        rows[job] = outcome
        if done is not None:
            done(rows[job])

    if sim_jobs and n == 1:
        for job in sim_jobs:
            t0 = time.perf_counter()
            try:
                outcome: dict[str, Any] | Exception = _work(job)
            except Exception as exc:  # one row's error: the other rows still count
                outcome = exc
            record(job, outcome, t0)
    elif sim_jobs:
        t0 = time.perf_counter()
        with closing(run_each(list(sim_jobs), n, _work)) as each:  # a ``done`` that raises stops them all
            for job, outcome in each:
                record(job, outcome, t0)
