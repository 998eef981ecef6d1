"""The anchors' autoscalers, re-implemented with their own rules and constants (ANCHORS.md §7).

Each baseline is a ``controllers.base.Controller`` that runs in the same ``ControlLoop`` as the PID,
so it can later run against Prometheus unchanged. It keeps its own state (windows, stabilisation
history, panic mode), declares its period ``tick_s`` (and ``window_s`` when it needs a signal window
other than the fleet file's), and sets ``own_guard = True``: the loop then applies only the variants'
min/max bounds, so it is measured with its own rules, not ours.

Names for ``make_baseline`` (and ``autoscaler simulate/compare --controller(s)``):
``hpa`` (``hpa.py``), ``keda`` (``keda.py``), ``kpa`` (Knative, ``knative.py``), ``aibrix`` and
``aibrix-apa`` (``aibrix.py``), ``dynamo`` (``dynamo.py``), ``wva`` (``wva.py``), ``static-ilp``
(``static_ilp.py``). A spec may set constructor parameters, ``name:key=value[:key=value...]``, e.g.
``hpa:metric=queue:target=5`` or ``dynamo:ttft=2:itl=0.1:predictor=constant``; ``parse_spec`` checks
each value against the parameter's ``Param`` (text, or a finite number in range: targets and windows
> 0, tolerances and thresholds >= 0) and names the controller and parameter when one is wrong. Metric targets left
unset default to one replica's load at 70 % of its SLO rate on the workload's mean request
(``calibrate.py``), or to the anchors' thresholds for queue metrics (HPA 5, KEDA 10).
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from autoscaler.config import FleetConfig
from autoscaler.workload.types import Workload
from controllers.base import Controller
from controllers.baselines.aibrix import AIBrixController
from controllers.baselines.calibrate import OperatingPoint, workload_operating_point
from controllers.baselines.dynamo import DynamoPlanner
from controllers.baselines.hpa import DEFAULT_QUEUE_TARGET, HPAController
from controllers.baselines.keda import DEFAULT_QUEUE_THRESHOLD, KedaController
from controllers.baselines.knative import KnativeKPAController
from controllers.baselines.static_ilp import static_ilp_controller
from controllers.baselines.wva import WVAController

_Factory = Callable[[dict[str, Any], FleetConfig, Workload, str | None], Controller]


@dataclass(frozen=True)
class Param:
    """What a spec may set one constructor parameter to.

    ``kind`` is ``str`` (passed as written; the controller checks the choice), ``float`` (a finite
    number) or ``int`` (a whole number); numbers must be ``> low`` (``>= low`` when ``closed``) and,
    with ``high``, ``<= high``.
    """

    kind: type
    low: float | None = None
    closed: bool = False
    high: float | None = None

    def bounds(self) -> str:
        """The range as text: ``> 0``, ``>= 1``, ``in (0, 100]``."""
        low = "" if self.low is None else format(self.low, "g")
        if self.high is None:
            return f"{'>=' if self.closed else '>'} {low}"
        if self.low is None:
            return f"<= {self.high:g}"
        return f"in {'[' if self.closed else '('}{low}, {self.high:g}]"

    def parse(self, name: str, key: str, text: str) -> int | float | str:
        """``text`` as this parameter's value.

        Raises:
            ValueError: one line naming ``name`` and ``key``: not a number, not finite, out of range.
        """
        if self.kind is str:
            return text
        what = f"{name} {key}"
        try:
            value: int | float = int(text) if self.kind is int else float(text)
        except ValueError:
            kind = "a whole number" if self.kind is int else "a number"
            raise ValueError(f"{what} must be {kind}, got '{text}'") from None
        if not math.isfinite(value):
            raise ValueError(f"{what} must be a finite number, got '{text}'")
        below = self.low is not None and (value < self.low if self.closed else value <= self.low)
        above = self.high is not None and value > self.high
        if below or above:
            raise ValueError(f"{what} must be {self.bounds()}, got {text}")
        return value


TEXT = Param(str)
POSITIVE = Param(float, 0.0)
NON_NEGATIVE = Param(float, 0.0, closed=True)


def _params(cls: type, *skip: str, **schema: Param) -> dict[str, Param]:
    """Constructor parameters a spec may set (the engine settings come from the fleet file), in
    signature order, each with its ``Param``; ``schema`` must cover exactly those parameters."""
    names = [p for p in inspect.signature(cls).parameters if p not in ("engine", *skip)]
    if set(names) != set(schema):
        raise TypeError(f"{cls.__name__}: spec schema {sorted(schema)} != constructor parameters {sorted(names)}")
    return {n: schema[n] for n in names}


def _op(cfg: FleetConfig, wl: Workload, service: str | None) -> OperatingPoint:
    return workload_operating_point(cfg.service(service), wl)


def _hpa(kw: dict[str, Any], cfg: FleetConfig, wl: Workload, s: str | None) -> Controller:
    if "target" not in kw:
        kw = {**kw, "target": DEFAULT_QUEUE_TARGET if kw.get("metric") == "queue" else _op(cfg, wl, s).kv_usage}
    return HPAController(**kw)


def _keda(kw: dict[str, Any], cfg: FleetConfig, wl: Workload, s: str | None) -> Controller:
    if "threshold" not in kw:
        queue = kw.get("metric") == "queue"
        kw = {**kw, "threshold": DEFAULT_QUEUE_THRESHOLD if queue else _op(cfg, wl, s).concurrency}
    return KedaController(**kw)


def _kpa(kw: dict[str, Any], cfg: FleetConfig, wl: Workload, s: str | None) -> Controller:
    return KnativeKPAController(**{"target": _op(cfg, wl, s).concurrency, **kw})


def _aibrix(strategy: str) -> _Factory:
    def build(kw: dict[str, Any], cfg: FleetConfig, wl: Workload, s: str | None) -> Controller:
        return AIBrixController(**{"target": _op(cfg, wl, s).kv_usage, "strategy": strategy, **kw})
    return build


_AIBRIX = _params(AIBrixController, "strategy", target=POSITIVE)
_BASELINES: dict[str, tuple[dict[str, Param], _Factory]] = {
    "hpa": (_params(HPAController, target=POSITIVE, metric=TEXT, tolerance=NON_NEGATIVE,
                    downscale_window_s=NON_NEGATIVE), _hpa),
    "keda": (_params(KedaController, threshold=POSITIVE, metric=TEXT, activation_threshold=NON_NEGATIVE,
                     fallback_failures=Param(int, 1, closed=True), fallback_replicas=Param(int, 0, closed=True)),
             _keda),
    "kpa": (_params(KnativeKPAController, target=POSITIVE, stable_window_s=POSITIVE,
                    panic_window_percentage=Param(float, 0.0, high=100.0)), _kpa),
    "aibrix": (_AIBRIX, _aibrix("kpa")),
    "aibrix-apa": (_AIBRIX, _aibrix("apa")),
    "dynamo": (_params(DynamoPlanner, predictor=TEXT, ttft=POSITIVE, itl=POSITIVE),
               lambda kw, cfg, wl, s: DynamoPlanner(cfg.simulator.engine, **kw)),
    "wva": ({}, lambda kw, cfg, wl, s: WVAController()),
    "static-ilp": ({}, lambda kw, cfg, wl, s: static_ilp_controller(cfg.service(s), wl, cfg.simulator.engine)),
}
BASELINE_NAMES = tuple(_BASELINES)


def parse_spec(spec: str) -> tuple[str, dict[str, int | float | str]]:
    """Split ``name:key=value:...`` into the name and its parameters (numbers parsed and checked).

    Raises:
        ValueError: one line: unknown name, a parameter without ``=``, one the controller does not take
            or given twice, a number that is not one, not finite or out of range (``Param``).
    """
    name, *parts = spec.split(":")
    if name not in _BASELINES:
        raise ValueError(f"unknown baseline '{name}'; choose one of: {', '.join(BASELINE_NAMES)}")
    allowed = _BASELINES[name][0]
    params: dict[str, int | float | str] = {}
    for part in parts:
        key, eq, text = part.partition("=")
        if not eq or key not in allowed:
            raise ValueError(f"bad parameter '{part}' for {name}; it takes: {', '.join(allowed) or 'none'}")
        if key in params:
            raise ValueError(f"{name} {key} given twice in '{spec}'")
        params[key] = allowed[key].parse(name, key, text)
    return name, params


def make_baseline(spec: str, cfg: FleetConfig, workload: Workload, service: str | None) -> Controller:
    """Build the baseline named by ``spec`` (module docstring); its ``name`` is the spec.

    Raises:
        ValueError: unknown name or bad parameter.
    """
    name, params = parse_spec(spec)
    ctrl = _BASELINES[name][1](params, cfg, workload, service)
    ctrl.name = spec
    return ctrl
