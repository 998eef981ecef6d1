"""Fleet file schema (YAML, validated with pydantic) and its loader.

A fleet file describes the services (served models) the autoscaler manages, their SLOs per
request class, their variants (one Deployment per GPU generation), the embedded simulator's engine
settings, and the controller settings. ``load_config`` raises ``ConfigError`` naming the file, the
key and the problem.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from autoscaler.errors import ConfigError
from autoscaler.workload.types import BATCH, INTERACTIVE

SetpointSignal = Literal[
    "slo_mean_ratio", "ttft_mean_ratio", "tpot_mean_ratio", "ttft_p95_ratio", "tpot_p95_ratio", "slo_p95_ratio",
    "kv_usage", "queue_per_replica",
]


MAX_INT = 2**53  # integers beyond this lose precision as floats; no replica count or token limit is near it


class _Strict(BaseModel):
    # NaN and Infinity are never meaningful here (prices, times, gains) and would leak into results.
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    @field_validator("*", mode="before")
    @classmethod
    def _no_bool_as_number(cls, value: object, info: ValidationInfo) -> object:
        # pydantic's lax mode reads YAML's true/false as 1/0 wherever a number is expected.
        if isinstance(value, bool) and info.field_name and cls.model_fields[info.field_name].annotation is not bool:
            raise ValueError(f"the boolean {str(value).lower()} is not a valid value here")
        # a 400-digit integer validates as int but overflows the float arithmetic of the controllers
        if isinstance(value, int) and not isinstance(value, bool) and abs(value) > MAX_INT:
            raise ValueError(f"an integer of {len(str(abs(value)))} digits is too large (at most 2**53)")
        return value


class _UniqueKeyLoader(yaml.SafeLoader):
    """PyYAML's safe loader, except that a key written twice in one mapping is an error (PyYAML keeps
    the last). Keys brought in by a merge key (``<<: *anchor``) may be overridden, as YAML allows."""

    def construct_mapping(self, node: yaml.Node, deep: bool = False) -> dict[object, object]:
        seen: set[object] = set()
        for key_node, _ in getattr(node, "value", []):
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue
            key = self.construct_object(key_node, deep=deep)
            try:
                repeated = key in seen
            except TypeError:  # unhashable: PyYAML's own check reports it
                continue
            if repeated:
                raise yaml.constructor.ConstructorError(
                    None, None, f"duplicate key '{key}'", key_node.start_mark
                )
            seen.add(key)
        return super().construct_mapping(node, deep=deep)  # type: ignore[arg-type]


class SLO(_Strict):
    """Latency objectives of one request class.

    Attributes:
        ttft_s: time-to-first-token objective, seconds.
        itl_s: mean inter-token latency objective (per request), seconds.
    """

    ttft_s: float = Field(gt=0)
    itl_s: float = Field(gt=0)


class Variant(_Strict):
    """One Deployment of a service on one GPU generation.

    Attributes:
        name: variant name, unique within the service (the Deployment's name suffix).
        gpu: GPU type, e.g. ``H100-SXM``.
        gpus_per_replica: GPUs one replica occupies (tensor parallel size).
        price_per_gpu_hour: $/GPU-hour.
        min_replicas, max_replicas: replica bounds for this variant.
        quota: extra cap on replicas (e.g. a cloud quota), or None.
        initial_replicas: replicas ready (warm) at t=0 in simulation; defaults to ``min_replicas``.
        startup_cold_s: seconds from scale-up to ready when weights are not on the node.
        startup_warm_s: seconds from scale-up to ready when weights are cached on the node.
        warm_nodes: how many replicas can start warm (nodes with weights cached); the rest start cold.
        kv_cache_tokens: KV-cache capacity of one replica, tokens.
        profile: performance profile name (see ``models.profiles.list_profiles()``).
    """

    name: str
    gpu: str
    gpus_per_replica: int = Field(default=1, ge=1)
    price_per_gpu_hour: float = Field(ge=0)
    min_replicas: int = Field(default=0, ge=0)
    max_replicas: int = Field(ge=0)
    quota: int | None = Field(default=None, ge=0)
    initial_replicas: int | None = Field(default=None, ge=0)
    startup_cold_s: float = Field(default=300.0, ge=0)
    startup_warm_s: float = Field(default=90.0, ge=0)
    warm_nodes: int = Field(default=0, ge=0)
    kv_cache_tokens: int = Field(gt=0)
    profile: str

    @property
    def cap(self) -> int:
        """Largest replica count allowed: ``min(max_replicas, quota)``."""
        return self.max_replicas if self.quota is None else min(self.max_replicas, self.quota)

    @property
    def start_replicas(self) -> int:
        """Replicas ready at t=0 in simulation."""
        n = self.min_replicas if self.initial_replicas is None else self.initial_replicas
        return min(max(n, self.min_replicas), self.cap)

    @property
    def price_per_replica_hour(self) -> float:
        """$/replica-hour = GPUs per replica x $/GPU-hour."""
        return self.gpus_per_replica * self.price_per_gpu_hour

    @model_validator(mode="after")
    def _bounds(self) -> Variant:
        if self.min_replicas > self.cap:
            raise ValueError(f"min_replicas ({self.min_replicas}) exceeds max_replicas/quota ({self.cap})")
        return self


class Service(_Strict):
    """A served model and the variants that serve it.

    Attributes:
        name: service name.
        model: served model name (vLLM ``model_name`` label).
        max_model_len: longest prompt + output accepted, tokens; longer requests are rejected
            (vLLM answers HTTP 400), counted as ``rejected``.
        slo: objectives per request class; must define ``interactive`` and ``batch``.
        variants: at least one.
    """

    name: str
    model: str
    max_model_len: int = Field(default=32768, gt=0)
    slo: dict[str, SLO]
    variants: list[Variant] = Field(min_length=1)

    @field_validator("slo")
    @classmethod
    def _classes(cls, v: dict[str, SLO]) -> dict[str, SLO]:
        missing = [c for c in (INTERACTIVE, BATCH) if c not in v]
        if missing:
            raise ValueError(f"missing SLO class(es): {', '.join(missing)}")
        return v

    @model_validator(mode="after")
    def _unique(self) -> Service:
        if all(v.cap == 0 for v in self.variants):
            raise ValueError("every variant has max_replicas (or quota) 0: the service could never serve")
        names = [v.name for v in self.variants]
        dup = {n for n in names if names.count(n) > 1}
        if dup:
            raise ValueError(f"duplicate variant name(s): {', '.join(sorted(dup))}")
        return self


class EngineConfig(_Strict):
    """vLLM scheduler settings the simulator reproduces (per replica).

    Attributes:
        max_num_seqs: running-batch bound (vLLM ``--max-num-seqs``; its default is 256 on GPUs).
        max_num_batched_tokens: token budget per engine step (vLLM ``--max-num-batched-tokens``;
            8192 is vLLM V1's default for online serving on data-centre GPUs).
        block_size: KV-cache block size in tokens (vLLM default 16).
    """

    max_num_seqs: int = Field(default=256, ge=1)
    max_num_batched_tokens: int = Field(default=8192, ge=16)
    block_size: int = Field(default=16, ge=1)


class SimulatorConfig(_Strict):
    """Embedded fleet simulator settings.

    Attributes:
        router: ``least_outstanding`` (default) or ``prefix_affinity``.
        engine: per-replica vLLM scheduler settings.
        gateway_timeout_s: a request waiting at the gateway (no replica ready) longer than this fails.
        crashes: replica crashes to inject, as ``{time_s, variant}``; the oldest ready replica of
            that variant crashes.
    """

    router: Literal["least_outstanding", "prefix_affinity"] = "least_outstanding"
    engine: EngineConfig = EngineConfig()
    gateway_timeout_s: float = Field(default=600.0, gt=0)
    crashes: list[Crash] = Field(default_factory=list)


class Crash(_Strict):
    """One injected replica crash."""

    time_s: float = Field(ge=0)
    service: str | None = None
    variant: str


class PIDConfig(_Strict):
    """PID gains and shaping (see ``controllers.pid``).

    The error is ``measured/setpoint - 1`` on the chosen signal, so gains are in replicas per unit of
    relative error (``kp``) and per unit of relative error-second (``ki``), scaled by the current
    replica count when ``scale_with_replicas`` is on.
    """

    setpoint_signal: SetpointSignal = "slo_mean_ratio"
    setpoint: float = Field(default=0.3, gt=0)
    kp: float = Field(default=0.2, ge=0)
    ki: float = Field(default=0.005, ge=0)
    kd: float = Field(default=0.0, ge=0)
    derivative_filter_s: float = Field(default=30.0, gt=0)
    deadband: float = Field(default=0.25, ge=0, lt=1)
    down_gain: float = Field(default=0.5, gt=0)
    error_clip: float = Field(default=3.0, gt=0)
    scale_with_replicas: StrictBool = True

    @model_validator(mode="after")
    def _band(self) -> PIDConfig:
        # The error is clipped to [-1, error_clip]; a band that wide would zero every error on that side.
        if self.deadband >= self.error_clip:
            raise ValueError(f"deadband ({self.deadband}) must be below error_clip ({self.error_clip}): "
                             "no error would ever leave the band")
        return self


class GuardConfig(_Strict):
    """Safety rules applied to every decision.

    Attributes:
        max_step_up: most replicas added per service per tick.
        max_step_down: most replicas removed per service per tick.
        scale_down_cooldown_s: no scale-down for this long after any scale-up.
        idle_ticks_to_min: consecutive idle ticks before an idle service scales toward its minimum.
    """

    max_step_up: int = Field(default=8, ge=1)
    max_step_down: int = Field(default=2, ge=1)
    scale_down_cooldown_s: float = Field(default=180.0, ge=0)
    idle_ticks_to_min: int = Field(default=8, ge=1)


class ForecastConfig(_Strict):
    """The loop's forecast stages (``autoscaler.loop.forecast`` for load, ``autoscaler.loop.warmth`` for
    the prefix-cache hit rate; off by default: no controller uses them yet).

    Attributes:
        enabled: forecast request rate, token mix and prefix-cache hit rate every tick.
        horizon_s: how far ahead, seconds (about a cold replica start).
        step_s: forecast step, seconds; ticks within a step are averaged.
        router: how the gateway places requests, for the cache-warmth model: ``least_outstanding``
            (placement ignores the cache) or ``prefix_affinity``; None = ``simulator.router``.
    """

    enabled: StrictBool = False
    horizon_s: float = Field(default=300.0, gt=0)
    step_s: float = Field(default=60.0, gt=0, le=3600.0)
    router: Literal["least_outstanding", "prefix_affinity"] | None = None


class ControllerConfig(_Strict):
    """Control-loop settings.

    Attributes:
        tick_s: seconds between loop ticks.
        window_s: look-back window of rate/quantile signals (PromQL ``rate(...[window])``), seconds.
        pid: PID settings.
        guard: safety rules.
        forecast: the forecast stage.
    """

    tick_s: float = Field(default=15.0, ge=1.0)
    window_s: float = Field(default=300.0, gt=0, le=86400.0)
    pid: PIDConfig = PIDConfig()
    guard: GuardConfig = GuardConfig()
    forecast: ForecastConfig = ForecastConfig()

    @model_validator(mode="after")
    def _window(self) -> ControllerConfig:
        if self.window_s < self.tick_s:
            raise ValueError(f"window_s ({self.window_s}) is shorter than tick_s ({self.tick_s})")
        return self


QuerySetName = Literal["vllm-0.33", "vllm-pre-0.9", "sglang"]


class BasicAuth(_Strict):
    """HTTP basic auth for Prometheus; the password is read from a file (e.g. a mounted Secret)."""

    username: str
    password_file: Path


def _check_matchers(v: str | None) -> str | None:
    """A selector must be PromQL label matchers, else every query it is in fails (HTTP 400)."""
    from autoscaler.promql import check_matchers

    return None if v is None else check_matchers(v)


class VariantSelectors(_Strict):
    """PromQL label matchers (without braces) of one variant.

    Attributes:
        pods: matchers of the variant's pods' vLLM series; default
            ``namespace="<namespace>",pod=~"<service>-<variant>-.*"``.
        deployment: matchers of its kube-state-metrics Deployment series; default
            ``namespace="<namespace>",deployment="<service>-<variant>"``.
    """

    pods: str | None = None
    deployment: str | None = None

    @field_validator("pods", "deployment")
    @classmethod
    def _matchers(cls, v: str | None) -> str | None:
        return _check_matchers(v)


class ServiceSelectors(_Strict):
    """Label matchers of one service: ``service`` is ANDed into every query of the service
    (default ``model_name="<model>"``); ``variants`` by variant name."""

    service: str | None = None
    variants: dict[str, VariantSelectors] = Field(default_factory=dict)

    @field_validator("service")
    @classmethod
    def _matchers(cls, v: str | None) -> str | None:
        return _check_matchers(v)


class PrometheusConfig(_Strict):
    """Where and how the loop reads a live Prometheus (``autoscaler dry-run`` / ``backtest``).

    Attributes:
        url: base URL, e.g. ``https://prometheus.monitoring:9090`` (``--prometheus-url`` overrides).
        query_set: default PromQL per signal (``autoscaler.promql``).
        queries: signal -> PromQL template overriding the query set (``$sel``, ``$window``).
        namespace: Kubernetes namespace used by the default selectors.
        pod_label: label that names a pod on the vLLM series.
        staleness_s: a pod whose newest sample is older than this is ignored, seconds; default 120 =
            two of Prometheus's default 1 m ``scrape_interval``. Set it to ~2 scrape intervals.
        timeout_s: per-query HTTP timeout, seconds.
        bearer_token_file: file holding a bearer token (e.g. a service-account token).
        basic_auth: username and password file.
        ca_file: CA bundle to verify the server's certificate.
        tls_verify: False disables certificate verification.
        max_concurrency: queries in flight at once.
        selectors: service name -> label matchers (defaults above).
    """

    url: str | None = None
    query_set: QuerySetName = "vllm-0.33"
    queries: dict[str, str] = Field(default_factory=dict)
    namespace: str = "default"
    pod_label: str = Field(default="pod", pattern=r"^[a-zA-Z_][a-zA-Z0-9_]*$")
    staleness_s: float = Field(default=120.0, gt=0)
    timeout_s: float = Field(default=10.0, gt=0)
    bearer_token_file: Path | None = None
    basic_auth: BasicAuth | None = None
    ca_file: Path | None = None
    tls_verify: StrictBool = True
    max_concurrency: int = Field(default=8, ge=1)
    selectors: dict[str, ServiceSelectors] = Field(default_factory=dict)

    @field_validator("queries")
    @classmethod
    def _templates(cls, v: dict[str, str]) -> dict[str, str]:
        from autoscaler.promql import check_template

        for signal, template in v.items():
            check_template(signal, template)
        return v

    @model_validator(mode="after")
    def _one_auth(self) -> PrometheusConfig:
        if self.bearer_token_file is not None and self.basic_auth is not None:
            raise ValueError("set bearer_token_file or basic_auth, not both")
        return self


class FleetConfig(_Strict):
    """The whole fleet file."""

    services: list[Service] = Field(min_length=1)
    simulator: SimulatorConfig = SimulatorConfig()
    controller: ControllerConfig = ControllerConfig()
    prometheus: PrometheusConfig = PrometheusConfig()

    @model_validator(mode="after")
    def _unique(self) -> FleetConfig:
        names = [s.name for s in self.services]
        dup = {n for n in names if names.count(n) > 1}
        if dup:
            raise ValueError(f"duplicate service name(s): {', '.join(sorted(dup))}")
        return self

    @model_validator(mode="after")
    def _kv_holds_max_model_len(self) -> FleetConfig:
        # vLLM refuses to start when one max_model_len sequence cannot fit in the KV cache; the
        # simulator also keeps one block of rounding slack per sequence (simulator.engine).
        block = self.simulator.engine.block_size
        for s in self.services:
            for v in s.variants:
                if v.kv_cache_tokens < s.max_model_len + block:
                    raise ValueError(
                        f"services[{s.name}].variants[{v.name}].kv_cache_tokens ({v.kv_cache_tokens}) cannot hold "
                        f"one max_model_len ({s.max_model_len}) sequence plus one {block}-token block"
                    )
        return self

    @model_validator(mode="after")
    def _crash_targets(self) -> FleetConfig:
        variants = {s.name: {v.name for v in s.variants} for s in self.services}
        for i, c in enumerate(self.simulator.crashes):
            svc = c.service or self.services[0].name
            if svc not in variants:
                raise ValueError(f"simulator.crashes[{i}].service: unknown service '{svc}'")
            if c.variant not in variants[svc]:
                raise ValueError(
                    f"simulator.crashes[{i}].variant: unknown variant '{c.variant}' of service '{svc}' "
                    f"(known: {', '.join(sorted(variants[svc]))})"
                )
        return self

    @model_validator(mode="after")
    def _selector_names(self) -> FleetConfig:
        variants = {s.name: {v.name for v in s.variants} for s in self.services}
        for name, sel in self.prometheus.selectors.items():
            if name not in variants:
                raise ValueError(f"prometheus.selectors: unknown service '{name}'")
            unknown = sorted(set(sel.variants) - variants[name])
            if unknown:
                raise ValueError(f"prometheus.selectors[{name}]: unknown variant(s) {', '.join(unknown)}")
        return self

    def service(self, name: str | None = None) -> Service:
        """The named service (the first when ``name`` is None); KeyError if unknown."""
        if name is None:
            return self.services[0]
        for s in self.services:
            if s.name == name:
                return s
        raise KeyError(name)


SimulatorConfig.model_rebuild()


def _key_path(loc: tuple[int | str, ...], data: object) -> str:
    """Render a pydantic error location as a YAML key path, naming list items by their ``name``."""
    parts: list[str] = []
    node = data
    for item in loc:
        if isinstance(item, int) and isinstance(node, list) and 0 <= item < len(node):
            node = node[item]
            label = node.get("name") if isinstance(node, dict) else None
            parts.append(f"[{label}]" if label else f"[{item}]")
        else:
            node = node.get(item) if isinstance(node, dict) else None
            parts.append(f".{item}" if parts else str(item))
    return "".join(parts) or "<root>"


def parse_config(data: object, source: str = "<fleet>") -> FleetConfig:
    """Validate a parsed YAML document; raises ``ConfigError`` '<source>: <key>: <problem>'."""
    if not isinstance(data, dict):
        raise ConfigError(f"{source}: top level must be a mapping with a 'services' list")
    try:
        cfg = FleetConfig.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        more = f" (and {exc.error_count() - 1} more)" if exc.error_count() > 1 else ""
        msg = err["msg"].removeprefix("Value error, ")
        key = f"{_key_path(tuple(err['loc']), data)}: " if err["loc"] else ""
        raise ConfigError(f"{source}: {key}{msg}{more}") from None
    _check_profiles(cfg, source)
    return cfg


def _check_profiles(cfg: FleetConfig, source: str) -> None:
    """Every variant names a known profile, and every ITL objective is above its fixed step time."""
    from models.capacity import marginal_costs
    from models.profiles import get_profile, list_profiles

    known = list_profiles()
    for s in cfg.services:
        for v in s.variants:
            if v.profile not in known:
                raise ConfigError(
                    f"{source}: services[{s.name}].variants[{v.name}].profile: unknown performance "
                    f"profile '{v.profile}' (GPU {v.gpu}); known: {', '.join(known)}"
                )
            t0 = marginal_costs(get_profile(v.profile))[0]
            for cls, slo in s.slo.items():
                if slo.itl_s <= t0:
                    raise ConfigError(
                        f"{source}: services[{s.name}].slo.{cls}.itl_s: {slo.itl_s} s is at or below the "
                        f"fixed step time {t0:.4f} s of variant {v.name} ({v.profile}); no batch can meet it"
                    )


def load_config(path: str | Path) -> FleetConfig:
    """Read and validate a fleet YAML file.

    Raises:
        ConfigError: the file is missing, is not YAML, or fails validation; the message names the
            file and the key.
    """
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"{p}: cannot read fleet file: {exc.strerror}") from None
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{p}: not a UTF-8 text file (byte {exc.start})") from None
    try:
        data = yaml.load(text, Loader=_UniqueKeyLoader)
    except RecursionError:
        raise ConfigError(f"{p}: YAML nested too deeply") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" line {mark.line + 1}:" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc)
        context = getattr(exc, "context", None)
        what = f"{context}; {problem}" if context and problem != str(exc) else problem
        raise ConfigError(f"{p}:{where} invalid YAML: {' '.join(what.split())}") from None
    except (ValueError, OverflowError) as exc:  # a scalar PyYAML cannot convert (!!int abc, 2024-13-45)
        raise ConfigError(f"{p}: invalid YAML value: {' '.join(str(exc).split())}") from None
    return parse_config(data, str(p))


def default_config() -> FleetConfig:
    """The embedded example fleet (same content as ``examples/fleet.yaml``), shipped in the package."""
    from importlib.resources import files

    text = files("autoscaler").joinpath("default_fleet.yaml").read_text()
    return parse_config(yaml.load(text, Loader=_UniqueKeyLoader), "<embedded default fleet>")
