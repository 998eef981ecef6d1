"""A fault scenario file (``benchmarks/faults/*.yaml``): what failed for an anchor's users, the
workload and fleet that reproduce it, the faults injected and when, and what counts as harmful.

A scenario names the reports it reproduces (``reported``), says what went wrong (``failure``) and
what a harmful action is for it (``harmful``, prose; ``harm``, the rules that count them,
``autoscaler.faults.harm``). Its ``workload`` is built in code (``piecewise``: a rate curve and
request sizes) or read from a trace under the data folder (``trace``); its ``fleet`` is a patch laid
over the embedded default fleet, or over ``base_fleet`` (a fleet file of this source tree, e.g.
``examples/fleet-pd.yaml``) (mappings key by key, the ``services`` and ``variants`` lists entry
by entry on ``name``). ``faults`` are injected at simulated times (seconds from the first arrival).
``layer: live`` scenarios run the daemon against the emulated API server and a real Prometheus
(``autoscaler.faults.live``), the rest in the simulator. ``short`` ones are also tests.
"""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import Discriminator, Field, Tag, ValidationError, model_validator

from autoscaler.config import FleetConfig
from autoscaler.config.base import Strict
from autoscaler.config.loading import default_fleet_document, merged, moved_keys, parse_config
from autoscaler.errors import ConfigError
from autoscaler.workload.build import build_workload
from autoscaler.workload.piecewise import check_knots, piecewise_workload
from autoscaler.workload.types import Workload


class Piecewise(Strict):
    """A Poisson workload on a piecewise-linear rate (``autoscaler.workload.piecewise``).

    Attributes:
        knots: (time s, req/s) points, times increasing.
        input_tokens, output_tokens: (median, mean, max) of the lognormal lengths, tokens (default:
            the embedded default workload's).
        batch_fraction: share of batch requests.
    """

    knots: list[tuple[float, float]] = Field(min_length=2)
    input_tokens: tuple[float, float, int] | None = None
    output_tokens: tuple[float, float, int] | None = None
    batch_fraction: float = Field(default=0.2, ge=0, le=1)

    @model_validator(mode="after")
    def _curve(self) -> Piecewise:
        times = [t for t, _ in self.knots]
        if times[0] < 0 or any(b <= a for a, b in itertools.pairwise(times)):
            raise ValueError("knots: times must start at >= 0 s and increase")
        if any(r < 0 for _, r in self.knots) or not any(r > 0 for _, r in self.knots):
            raise ValueError("knots: rates must be >= 0 req/s, and one > 0 (no request arrives otherwise)")
        try:
            check_knots(self.knots)  # knots at 1e12 s, or a billion requests: refused when the file is read
        except ValueError as exc:
            raise ValueError(f"knots: {exc}") from None
        return self

    @property
    def end_s(self) -> float:
        """The last arrival's bound, seconds from the first knot."""
        return self.knots[-1][0] - self.knots[0][0]


class Trace(Strict):
    """A trace file under the data folder (``--data``), shaped as ``autoscaler simulate`` shapes one."""

    path: str
    rate_scale: float = Field(default=1.0, gt=0)
    span: tuple[float, float] | None = None


class WorkloadSpec(Strict):
    """Exactly one of ``piecewise`` and ``trace``."""

    piecewise: Piecewise | None = None
    trace: Trace | None = None

    @model_validator(mode="after")
    def _one(self) -> WorkloadSpec:
        if (self.piecewise is None) == (self.trace is None):
            raise ValueError("give exactly one of piecewise and trace")
        return self


class CrashFault(Strict):
    """``fraction`` of the target service's ready replicas (the oldest first; at least one) crash at
    ``time_s``: of every variant, aggregated and prefill/decode pools alike, or only of ``variant`` (an
    aggregated or a pool variant), or only of the ``role`` pool (``prefill`` or ``decode``, all its
    variants). ``fraction`` is of the replicas so chosen."""

    kind: Literal["crash"]
    time_s: float = Field(ge=0)
    fraction: float = Field(gt=0, le=1)
    variant: str | None = None
    role: Literal["prefill", "decode"] | None = None

    @model_validator(mode="after")
    def _one_target(self) -> CrashFault:
        if self.variant is not None and self.role is not None:
            raise ValueError("give variant or role, not both")
        return self


class LinkSlow(Strict):
    """The target service's prefill->decode KV link slows down from ``start_s`` to ``end_s``: its
    bandwidth divided by ``bandwidth_factor``, ``extra_latency_s`` added to every read that starts then
    (``autoscaler.config.simulator.LinkSlowdown``)."""

    kind: Literal["link_slowdown"]
    start_s: float = Field(ge=0)
    end_s: float
    bandwidth_factor: float = Field(default=1.0, ge=1, le=1000)
    extra_latency_s: float = Field(default=0.0, ge=0, le=60)

    @model_validator(mode="after")
    def _slower(self) -> LinkSlow:
        if self.bandwidth_factor == 1.0 and self.extra_latency_s == 0.0:
            raise ValueError("a link slowdown needs bandwidth_factor > 1 or extra_latency_s > 0")
        return self


class PrometheusDown(Strict):
    """Every metric query fails from ``start_s`` to ``end_s`` (the server is unreachable)."""

    kind: Literal["prometheus_down"]
    start_s: float = Field(ge=0)
    end_s: float


class PodMetricsMissing(Strict):
    """``pods`` ready pods of ``variant`` (the oldest) emit no metrics from ``start_s`` to ``end_s``
    (a hung exporter or GPU): they serve, but Prometheus has no fresh sample of them."""

    kind: Literal["pod_metrics_missing"]
    variant: str
    pods: int = Field(default=1, ge=1)
    start_s: float = Field(ge=0)
    end_s: float


class NewPodsSilent(Strict):
    """Every pod emits no metrics for its first ``delay_s`` after it is ready (vLLM's first scrape
    waits for the engine's first step; a ServiceMonitor picks a pod up late)."""

    kind: Literal["new_pods_silent"]
    delay_s: float = Field(gt=0)


class ExternalEdit(Strict):
    """Another writer (a person, a GitOps sync) sets ``variant``'s replicas at ``time_s``."""

    kind: Literal["external_edit"]
    time_s: float = Field(ge=0)
    variant: str
    replicas: int = Field(ge=0)


class ApiErrors(Strict):
    """Every write to the API server answers ``status`` from ``start_s`` to ``end_s`` (503: down;
    409: each write loses a race with another writer)."""

    kind: Literal["api_errors"]
    status: Literal[409, 500, 503]
    start_s: float = Field(ge=0)
    end_s: float


class SecondDaemon(Strict):
    """A second daemon (another replica of the autoscaler's Deployment) starts at ``time_s``; the
    first is killed (no Lease release) at ``kill_s``, if given. ``identity`` is the second's name in
    the Lease: ``b``, or ``a`` for two processes started with one identity (its writes are told apart
    by its client's User-Agent, ``autoscaler/a (second)``)."""

    kind: Literal["second_daemon"]
    time_s: float = Field(ge=0)
    kill_s: float | None = None
    identity: Literal["a", "b"] = "b"

    @model_validator(mode="after")
    def _kill_after_start(self) -> SecondDaemon:
        if self.kill_s is not None and self.kill_s <= self.time_s:
            raise ValueError("kill_s must be after time_s (the first daemon is killed once the second runs)")
        return self


class ApiHang(Strict):
    """Every API call of daemon ``daemon`` is held unanswered from ``start_s`` to ``end_s``, then
    answered 504 unprocessed (a hung connection, an overloaded API server): its Lease calls fail at
    their deadline while another candidate can still reach the server."""

    kind: Literal["api_hang"]
    daemon: Literal["a", "b"] = "a"
    start_s: float = Field(ge=0)
    end_s: float


class PrometheusSlow(Strict):
    """Prometheus accepts connections and answers nothing from ``start_s`` to ``end_s`` (the process
    frozen; the kernel still completes the handshakes), then answers what waited."""

    kind: Literal["prometheus_slow"]
    start_s: float = Field(ge=0)
    end_s: float


class StaleLease(Strict):
    """Before the daemons start, the Lease is held by ``holder``, a process that is gone, renewed just
    now with ``lease_duration_seconds`` of ``duration_s`` (a day by default): a leftover of another
    installation, or a hand-made Lease."""

    kind: Literal["stale_lease"]
    holder: str = Field(default="dead", pattern=r"^[a-z0-9][a-z0-9.-]*$")
    duration_s: int = Field(default=86400, ge=1)


def _kind(value: Any) -> Any:
    return value.get("kind") if isinstance(value, dict) else getattr(value, "kind", None)


Fault = Annotated[
    Annotated[CrashFault, Tag("crash")] | Annotated[PrometheusDown, Tag("prometheus_down")]
    | Annotated[PodMetricsMissing, Tag("pod_metrics_missing")] | Annotated[NewPodsSilent, Tag("new_pods_silent")]
    | Annotated[ExternalEdit, Tag("external_edit")] | Annotated[ApiErrors, Tag("api_errors")]
    | Annotated[SecondDaemon, Tag("second_daemon")] | Annotated[ApiHang, Tag("api_hang")]
    | Annotated[PrometheusSlow, Tag("prometheus_slow")] | Annotated[StaleLease, Tag("stale_lease")]
    | Annotated[LinkSlow, Tag("link_slowdown")],
    Discriminator(_kind, custom_error_type="fault_kind",
                  custom_error_message="a fault needs a kind: crash, prometheus_down, pod_metrics_missing, "
                                       "new_pods_silent, link_slowdown, external_edit, api_errors, second_daemon, "
                                       "api_hang, prometheus_slow or stale_lease"),
]
SIM_FAULTS = ("crash", "prometheus_down", "pod_metrics_missing", "new_pods_silent", "link_slowdown")
LIVE_FAULTS = ("prometheus_down", "external_edit", "api_errors", "second_daemon", "api_hang", "prometheus_slow",
               "stale_lease")


class HarmRule(Strict):
    """One rule counting harmful actions (``autoscaler.faults.harm.RULES``) and its settings."""

    rule: Literal["down_on_missing_data", "down_while_missing_slo", "overshoot", "killed_starting",
                  "cut_generations", "held_pending", "held_idle", "flaps", "down_while_pool_lost",
                  "down_on_link_slowdown", "overwrote_other_writer",
                  "two_writers", "leaderless"]
    objective: float = Field(default=0.95, gt=0, lt=1)
    lookahead_s: float = Field(default=300.0, ge=0)
    factor: float = Field(default=2.0, ge=1)
    after_s: float | None = Field(default=None, ge=0)
    window_s: float = Field(default=600.0, gt=0)


class Scenario(Strict):
    """One fault scenario (module docstring)."""

    name: str = Field(pattern=r"^[a-z0-9][a-z0-9-]*$")
    reported: list[str] = Field(min_length=1)
    failure: str
    harmful: str
    layer: Literal["simulator", "live"] = "simulator"
    short: bool = False
    seed: int = Field(default=0, ge=0)
    workload: WorkloadSpec
    base_fleet: str | None = Field(default=None, pattern=r"^[A-Za-z0-9_][A-Za-z0-9_./-]*\.yaml$")
    """A fleet file, relative to the source tree's root, the ``fleet`` patch is laid over (None: the
    embedded default fleet)."""
    fleet: dict[str, Any] = Field(default_factory=dict)
    faults: list[Fault] = Field(default_factory=list)
    harm: list[HarmRule] = Field(min_length=1)
    admission: Literal["none", "pid", "mpc"] | None = None
    """Admission policy for our controllers (the anchors run without, as their users run them)."""

    @model_validator(mode="after")
    def _faults_fit_the_layer(self) -> Scenario:
        allowed = LIVE_FAULTS if self.layer == "live" else SIM_FAULTS
        for i, f in enumerate(self.faults):
            if f.kind not in allowed:
                raise ValueError(f"faults[{i}]: {f.kind} is not injected in the {self.layer} layer "
                                 f"(it injects {', '.join(allowed)})")
            end = getattr(f, "end_s", None)
            if end is not None and end <= f.start_s:  # type: ignore[union-attr]
                raise ValueError(f"faults[{i}]: end_s must be after start_s")
        seen: dict[tuple[Any, ...], int] = {}
        for i, f in enumerate(self.faults):
            key = fault_key(f)
            if key in seen:
                raise ValueError(f"faults[{i}]: {describe(f)} repeats faults[{seen[key]}] (same kind, target and "
                                 "time: injected once, it would be counted twice)")
            seen[key] = i
        w = self.workload
        end_s = w.piecewise.end_s if w.piecewise is not None else (
            None if w.trace is None or w.trace.span is None else w.trace.span[1] - w.trace.span[0])
        if end_s is not None:
            check_fault_times(self.faults, end_s)
        return self


def fault_times(f: Any) -> dict[str, float]:
    """The times a fault is scheduled at (``time_s``, ``start_s``, ``kill_s``: whichever it has), seconds."""
    return {k: v for k in ("time_s", "start_s", "kill_s") if (v := getattr(f, k, None)) is not None}


def fault_key(f: Any) -> tuple[Any, ...]:
    """What makes two faults the same: kind, target (a variant, a daemon, a second daemon's identity) and
    first scheduled time."""
    times = fault_times(f)
    target = tuple(getattr(f, k, None) for k in ("variant", "role", "daemon", "identity"))
    return (f.kind, target, times.get("time_s", times.get("start_s")))


def describe(f: Any) -> str:
    """A fault in a few words for a message: ``crash at time_s 2400``."""
    target = getattr(f, "variant", None) or getattr(f, "role", None) or getattr(f, "daemon", None)
    times = ", ".join(f"{k} {v:g}" for k, v in fault_times(f).items())
    return f.kind + (f" of {target}" if target else "") + (f" at {times}" if times else "")


def check_fault_times(faults: list[Any], end_s: float) -> None:
    """ValueError naming the first fault scheduled after ``end_s``, the workload's last arrival (seconds
    from the first): nothing would be running for it to act on, and the scenario would report no harm.
    """
    for i, f in enumerate(faults):
        late = {k: v for k, v in fault_times(f).items() if v > end_s}
        if late:
            raise ValueError(f"faults[{i}]: {describe(f)} is after the workload's end ({end_s:g} s)")


def _yaml_mapping(path: Path, where: str, what: str) -> dict[str, Any]:
    """The YAML mapping in ``path``; ``where`` starts each error message, ``what`` names the document.

    Raises:
        ConfigError: unreadable, not YAML, or not a mapping.
    """
    try:
        doc = yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigError(f"{where}: cannot read {what}: {exc.strerror}") from None
    except (yaml.YAMLError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{where}: not a YAML {what}: {str(exc).splitlines()[0]}") from None
    if not isinstance(doc, dict):
        raise ConfigError(f"{where}: a {what} is a mapping")
    return doc


def load_scenario(path: Path) -> Scenario:
    """Read one scenario file.

    Raises:
        ConfigError: unreadable, not YAML, or invalid; the message names the file and the key.
    """
    doc = _yaml_mapping(path, str(path), "scenario")
    try:
        return Scenario.model_validate(doc)
    except ValidationError as exc:
        err = exc.errors()[0]
        key = ".".join(str(x) for x in err["loc"])
        raise ConfigError(f"{path}: {key + ': ' if key else ''}{err['msg'].removeprefix('Value error, ')}") from None


def source_root() -> Path:
    """The source tree this package runs from (``base_fleet`` is relative to it)."""
    return Path(__file__).resolve().parents[2]


def base_fleet_document(sc: Scenario) -> dict[str, Any]:
    """The fleet document ``sc``'s patch is laid over: its ``base_fleet``, else the embedded default.

    Raises:
        ConfigError: ``base_fleet`` is outside the source tree, unreadable or not a YAML mapping.
    """
    if sc.base_fleet is None:
        return default_fleet_document()
    root = source_root()
    path = (root / sc.base_fleet).resolve()
    if not path.is_relative_to(root):
        raise ConfigError(f"scenario {sc.name}: base_fleet: {sc.base_fleet} is outside the source tree")
    return _yaml_mapping(path, f"scenario {sc.name}: base_fleet: {path}", "fleet")


def scenario_fleet(sc: Scenario) -> FleetConfig:
    """The embedded default fleet (or the scenario's ``base_fleet``) with the scenario's patch.

    Raises:
        ConfigError: the patched fleet does not validate.
    """
    # a base_fleet that is no fleet reads "services: Field required": say which file was patched
    where = f"scenario {sc.name}: fleet" + ("" if sc.base_fleet is None else f" (base_fleet {sc.base_fleet}, patched)")
    cfg = parse_config(merged(base_fleet_document(sc), moved_keys(sc.fleet, where)), where)
    svc = cfg.service(None)  # the workload's service (``FleetSimulator``'s default target)
    pools = {v.name for _, v in svc.role_variants()}
    variants = {v.name for s in cfg.services for v in s.variants}
    for i, f in enumerate(sc.faults):
        name = getattr(f, "variant", None)
        if isinstance(f, CrashFault):
            # a crash hits the target service's replicas only (``inject.crash_victims``): another service's
            # variant would crash nothing, silently
            known = {v.name for v in svc.variants} | pools
            if name is not None and name not in known:
                raise ConfigError(f"scenario {sc.name}: faults[{i}].variant: no variant '{name}' in service "
                                  f"'{svc.name}', the one a crash hits (it has {', '.join(sorted(known))})")
        # the simulator's faults may name a pool variant; the live layer's Deployments are aggregated only
        known = variants | pools if sc.layer == "simulator" else variants
        if name is not None and name not in known:
            raise ConfigError(f"scenario {sc.name}: faults[{i}].variant: no variant '{name}' in its fleet "
                              f"(it has {', '.join(sorted(known))})")
        role = getattr(f, "role", None)
        if role is not None and not any(r == role for r, _ in svc.role_variants()):
            raise ConfigError(f"scenario {sc.name}: faults[{i}].role: service '{svc.name}' has no {role} pool")
        if isinstance(f, LinkSlow) and svc.roles is None:
            raise ConfigError(f"scenario {sc.name}: faults[{i}]: service '{svc.name}' has no prefill/decode "
                              "roles, hence no KV-transfer link to slow down")
    return cfg


def scenario_workload(sc: Scenario, data: Path) -> Workload:
    """The scenario's requests.

    Raises:
        ConfigError: its trace is not under ``data``, its request lengths cannot be drawn, or a fault
            is scheduled after the whole trace's last arrival (named with the scenario).
    """
    spec = sc.workload
    if spec.piecewise is not None:
        p = spec.piecewise
        sizes = {k: v for k, v in (("input_tokens", p.input_tokens), ("output_tokens", p.output_tokens)) if v}
        try:
            return piecewise_workload(p.knots, sc.seed, sc.name, batch_fraction=p.batch_fraction, **sizes)
        except ValueError as exc:
            raise ConfigError(f"scenario {sc.name}: workload.piecewise: {exc}") from None
    assert spec.trace is not None
    path = data / spec.trace.path
    if not path.exists():
        raise ConfigError(f"scenario {sc.name}: trace {path} not found (--data names the folder holding "
                          f"{spec.trace.path})")
    wl = build_workload(path, None, spec.trace.rate_scale, 1.0, sc.seed, 0.2, spec.trace.span)
    if spec.trace.span is None:  # a whole trace's end is known once it is read
        try:
            check_fault_times(sc.faults, wl.duration_s)
        except ValueError as exc:
            raise ConfigError(f"scenario {sc.name}: {exc}") from None
    return wl
