"""One wiring: how each way of running builds its metrics source and its control loop.

The loop (``autoscaler.loop.runner.ControlLoop``) is the same in every mode; what differs is said
once, in ``MODES``:

=========  ==========================  ===========================  ==================
mode       metrics source              admission policy             removal order
=========  ==========================  ===========================  ==================
simulate   the simulator (its driver)  the ``--admission`` option   the simulator's own
dry-run    Prometheus, instant         ``controller.admission``     none (no actuator)
backtest   Prometheus, range replay    none (thresholds not kept)   none (no actuator)
run        Prometheus, instant         ``controller.admission``     idle pods first
=========  ==========================  ===========================  ==================

The live modes start the loop one window before their first tick (Prometheus holds history); a
simulation starts empty. The simulator's source, actuator, sink and drainer are the simulate
driver's to pass in (this module is on the live path and never imports the simulator).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from prometheus_api_client import PrometheusConnect

from autoscaler.adapters.prometheus import LiveRunner, PrometheusSource, RangeRunner
from autoscaler.config import FleetConfig
from autoscaler.loop.actuate import Actuator, AdmissionSink, Drainer
from autoscaler.loop.observe import MetricsSource
from autoscaler.loop.runner import ControlLoop
from controllers.admission import AdmissionPolicy, build_admission
from controllers.base import Controller

Mode = Literal["simulate", "dry-run", "backtest", "run"]


@dataclass(frozen=True)
class ModeTraits:
    """What one mode does differently (module docstring).

    Attributes:
        admission: the loop runs an admission policy (the fleet file's, unless the driver names one).
        idle_first_removal: a scale-down names idle pods first when the controller names none.
        history: the source holds a window of history before the first tick.
    """

    admission: bool
    idle_first_removal: bool
    history: bool


MODES: dict[str, ModeTraits] = {
    "simulate": ModeTraits(admission=True, idle_first_removal=False, history=False),
    "dry-run": ModeTraits(admission=True, idle_first_removal=False, history=True),
    "backtest": ModeTraits(admission=False, idle_first_removal=False, history=True),
    "run": ModeTraits(admission=True, idle_first_removal=True, history=True),
}


@dataclass(frozen=True)
class Replay:
    """A backtest's grid: the first and last tick, unix seconds, ``step`` s apart (integers)."""

    start: int
    end: int
    step: int


def build_source(cfg: FleetConfig, client: PrometheusConnect, *, speed: float = 1.0,
                 window_s: float | None = None, replay: Replay | None = None,
                 measured_speed: Callable[[float], float | None] | None = None) -> PrometheusSource:
    """The Prometheus source of the live modes over ``client`` (``adapters.prometheus.connect``).

    Args:
        speed: simulated seconds per wall second behind the server (1 for a real cluster).
        window_s: the controller's window, s (default ``controller.window_s``).
        replay: a backtest's grid: queries are answered from range queries at the grid's times
            (``RangeRunner``) and the source's clock is the grid's (``start`` + loop time / ``speed``:
            the loop's time is the source's); a replay has no tick to keep, so its queries have no
            common deadline.
        measured_speed: the live source's measured seconds per wall second over a wall window, for a
            source that can fall behind ``speed`` (``PrometheusSource``; the fault suite's live
            harness); not with ``replay`` (ValueError).
    """
    window = cfg.controller.window_s if window_s is None else window_s
    if replay is None:
        prom = cfg.prometheus
        return PrometheusSource(prom, cfg.services, LiveRunner(client), window_s=window, speed=speed,
                                deadline_s=prom.timeout_s if prom.deadline_s is None else prom.deadline_s,
                                measured_speed=measured_speed)
    if measured_speed is not None:
        raise ValueError("build_source: a replay's clock is its grid's; a measured speed is for a live source")
    t0 = replay.start
    return PrometheusSource(cfg.prometheus, cfg.services, RangeRunner(client, replay.end, replay.step),
                            window_s=window, speed=speed, clock=lambda now: t0 + now / speed)


def admission_policy(cfg: FleetConfig, mode: Mode, name: str | None = None) -> AdmissionPolicy | None:
    """The admission policy the loop runs in ``mode``: ``name`` (``none``, ``pid``, ``mpc``), else the
    fleet file's ``controller.admission``; None where the mode runs none.

    Raises:
        ValueError: an unknown policy name.
    """
    if not MODES[mode].admission:
        return None
    return build_admission(cfg.controller.admission if name is None else name, cfg.controller.admission_settings)


def build_loop(cfg: FleetConfig, mode: Mode, source: MetricsSource, controller: Controller, *,
               actuator: Actuator | None = None, sink: AdmissionSink | None = None,
               policy: AdmissionPolicy | None = None, drainer: Drainer | None = None,
               writers: int = 1) -> ControlLoop:
    """The control loop of ``mode`` (``MODES``) over ``source``, deciding with ``controller``.

    Args:
        actuator: writes the replica counts; None: the loop only decides (dry-run, backtest).
        sink: where admission thresholds go (the policy's, ``admission_policy``, or the controller's own).
        drainer: takes pods out of routing before a scale-down removes them (the simulator's).
        writers: services whose scale writes run at once (``ControlLoop``); 1 (the simulator's
            actuator is not thread-safe): one after another.
    """
    traits = MODES[mode]
    loop = ControlLoop(cfg, source, actuator, controller, sink, policy,
                       idle_first_removal=traits.idle_first_removal, drainer=drainer, writers=writers)
    if traits.history:
        loop.start(-controller.window_s)
    return loop
