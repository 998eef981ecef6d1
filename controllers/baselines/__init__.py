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
``hpa:metric=queue:target=5`` or ``dynamo:ttft=2:itl=0.1:predictor=constant``. Metric targets left
unset default to one replica's load at 70 % of its SLO rate on the workload's mean request
(``calibrate.py``), or to the anchors' thresholds for queue metrics (HPA 5, KEDA 10).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
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


def _params(cls: type, *skip: str) -> list[str]:
    """Constructor parameters a spec may set (the engine settings come from the fleet file)."""
    return [p for p in inspect.signature(cls).parameters if p not in ("engine", *skip)]


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


_BASELINES: dict[str, tuple[list[str], _Factory]] = {
    "hpa": (_params(HPAController), _hpa),
    "keda": (_params(KedaController), _keda),
    "kpa": (_params(KnativeKPAController), _kpa),
    "aibrix": (_params(AIBrixController, "strategy"), _aibrix("kpa")),
    "aibrix-apa": (_params(AIBrixController, "strategy"), _aibrix("apa")),
    "dynamo": (_params(DynamoPlanner), lambda kw, cfg, wl, s: DynamoPlanner(cfg.simulator.engine, **kw)),
    "wva": ([], lambda kw, cfg, wl, s: WVAController()),
    "static-ilp": ([], lambda kw, cfg, wl, s: static_ilp_controller(cfg.service(s), wl, cfg.simulator.engine)),
}
BASELINE_NAMES = tuple(_BASELINES)


def _value(text: str) -> int | float | str:
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            continue
    return text


def parse_spec(spec: str) -> tuple[str, dict[str, int | float | str]]:
    """Split ``name:key=value:...`` into the name and its parameters (numbers parsed).

    Raises:
        ValueError: unknown name, a parameter without ``=``, or one the controller does not take.
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
        params[key] = _value(text)
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
