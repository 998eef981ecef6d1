"""Fleet-file top level: services (models), their SLOs and variants (one Deployment per GPU
generation), and the whole ``FleetConfig`` with its cross-section checks."""

from __future__ import annotations

import math
from typing import Literal

from pydantic import Field, field_validator, model_validator

from autoscaler.config.base import MAX_INT, Strict, check_name
from autoscaler.config.control import ControllerConfig
from autoscaler.config.engine import EngineConfig
from autoscaler.config.kubernetes import KubernetesConfig
from autoscaler.config.prometheus import PrometheusConfig
from autoscaler.config.simulator import SimulatorConfig
from autoscaler.promql import RECORDED_WINDOW, RECORDED_WINDOW_S
from autoscaler.workload.types import BATCH, INTERACTIVE

# GPU prices are a few $/GPU-hour (examples/fleet.yaml: H100-SXM $2.99); a thousand times that is a unit
# mistake (cents, per month), and unbounded values overflow the cost optimisation.
MAX_PRICE_PER_GPU_HOUR = 1000.0


class SLO(Strict):
    """Latency objectives of one request class.

    Attributes:
        ttft_s: time-to-first-token objective, seconds.
        itl_s: mean inter-token latency objective (per request), seconds.
    """

    ttft_s: float = Field(gt=0)
    itl_s: float = Field(gt=0)


class Variant(Strict):
    """One Deployment of a service on one GPU generation.

    Attributes:
        name: variant name, unique within the service (the Deployment's name suffix).
        gpu: GPU type, e.g. ``H100-SXM``.
        gpus_per_replica: GPUs one replica occupies (tensor parallel size).
        price_per_gpu_hour: $/GPU-hour, at most ``MAX_PRICE_PER_GPU_HOUR``.
        min_replicas, max_replicas: replica bounds for this variant.
        quota: extra cap on replicas (e.g. a cloud quota), or None.
        initial_replicas: replicas ready (warm) at t=0 in simulation; defaults to ``min_replicas``.
        startup_cold_s: seconds from scale-up to ready when weights are not on the node.
        startup_warm_s: seconds from scale-up to ready when weights are cached on the node.
        warm_nodes: how many replicas can start warm (nodes with weights cached); the rest start cold.
        kv_cache_tokens: KV-cache capacity of one replica, tokens.
        profile: a shipped performance profile name (``models.profiles.list_profiles()``), or a path to a
            profile file (``*.json``; ``models.profiles.profile_file``), made absolute by the loader.
    """

    name: str
    gpu: str
    gpus_per_replica: int = Field(default=1, ge=1)
    price_per_gpu_hour: float = Field(ge=0, le=MAX_PRICE_PER_GPU_HOUR)
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

    @field_validator("name")
    @classmethod
    def _dns_label(cls, v: str) -> str:
        return check_name(v, "variant name", label=True)

    @model_validator(mode="after")
    def _bounds(self) -> Variant:
        if self.min_replicas > self.cap:
            raise ValueError(f"min_replicas ({self.min_replicas}) exceeds max_replicas/quota ({self.cap})")
        if self.initial_replicas is not None and self.initial_replicas > self.cap:
            raise ValueError(f"initial_replicas ({self.initial_replicas}) exceeds max_replicas/quota ({self.cap})")
        return self


class TypicalRequest(Strict):
    """The request a service is sized for when no trace is given (dry-run, the daemon), and the
    workload the baselines' metric targets are calibrated on (``controllers.baselines.calibrate``).

    Attributes:
        input_tokens, output_tokens: mean prompt and output lengths, tokens; the capacity model
            assumes lognormal lengths around them (``models.capacity.RequestMix.from_means``). Defaults:
            1024 and 256, the reference request of the profiles' benchmarks.
        prefix_hit_rate: expected fraction of prompt tokens served from the prefix cache.
    """

    input_tokens: float = Field(default=1024.0, ge=1)
    output_tokens: float = Field(default=256.0, ge=1)
    prefix_hit_rate: float = Field(default=0.0, ge=0, lt=1)


KV_LINK_GBPS = 400.0
"""Default line rate of the link a KV cache moves over from a prefill to a decode replica, Gb/s: one
400 Gb/s RDMA NIC (ConnectX-7, NDR InfiniBand or 400 GbE RoCE), the NIC an NVIDIA DGX H100 wires to each
of its GPUs (DGX H100 datasheet: 8 x single-port ConnectX-7, 400 Gb/s each), over which vLLM's
``NixlConnector`` reads the blocks with NIXL/UCX. Within one NVLink domain the link is NVLink 4
(450 GB/s a direction per H100, 3600 Gb/s): set ``bandwidth_gbps`` to it for same-node pools."""
KV_LINK_LATENCY_S = 0.11
"""Default fixed time of one P/D handover besides moving the bytes and recomputing the last prompt
token, seconds: vLLM issue #50913 (RFC, 2026-08-03, ``NixlConnector``, Qwen3-32B-FP8 TP2 3P1D on 8 x L20,
~4.9k-token prompts, ``--block-size 64``) measured the handover from the prefill's token 1 to the
client's at ~197 ms p50, of which the KV read was ~29 ms and the decode's recompute of token 1 ~58 ms with
its wait for a step boundary; ~110 ms is orchestration (the router's dispatch, the side-channel
notifications, engine-step boundaries). The simulator models the read (bytes / link) and the recompute
(a 1-token prefill step on the decode replica, waiting for its step in flight), so this default is
that remainder; one measurement of one setup, an upper-side figure for a tuned deployment."""
PD_NON_CACHED_TOKENS = 16
"""Default of ``Roles.non_cached_tokens``: llm-d-router v0.10.0's sample P/D endpoint-picker
configuration (``deploy/config/pd-epp-config.yaml``: ``prefix-based-pd-decider`` with ``nonCachedTokens:
16``); the plugin's own default, 0, turns disaggregation off."""


DYNAMO_MAX_LOCAL_PREFILL_LENGTH = 1000
"""Default of ``DynamoDisagg.max_local_prefill_length``, tokens: NVIDIA Dynamo's vLLM-v0 worker flag
``--max-local-prefill-length`` (ai-dynamo/dynamo ``examples/llm/utils/vllm.py``, ``parse_vllm_args``, at
0f42bc4; also the default of ``PyDisaggregatedRouter`` in ``examples/llm/components/disagg_router.py`` and
of the Rust ``DisaggRouterConf`` in ``lib/llm/src/disagg_router.rs``). Dynamo's shipped ``disagg.yaml``
example configs set 10 instead (PR #601: "the max-local-prefill-length is very short, so remote prefill
should be used for most requests")."""
DYNAMO_MAX_PREFILL_QUEUE_SIZE = 3
"""Default of ``DynamoDisagg.max_prefill_queue_size``, requests: Dynamo's vLLM-v0 worker flag
``--max-prefill-queue-size`` (ai-dynamo/dynamo ``examples/llm/utils/vllm.py`` at 0f42bc4). The
``PyDisaggregatedRouter`` class's own default is 2 (``examples/llm/components/disagg_router.py`` at
02e16f7), which the flag always overrides there."""


class DynamoDisagg(Strict):
    """NVIDIA Dynamo's conditional disaggregation: its parameters (``Roles.router: dynamo``; the rule is
    ``autoscaler.simulator.disagg.dynamo_remote_prefill``).

    Attributes:
        max_local_prefill_length: tokens (>= 0); a request is prefilled remotely only when the part of its
            prompt the chosen decode replica has not cached is longer than this
            (``DYNAMO_MAX_LOCAL_PREFILL_LENGTH``).
        max_prefill_queue_size: requests (>= 0); and only while the prefill queue holds fewer than this
            (``DYNAMO_MAX_PREFILL_QUEUE_SIZE``); 0 keeps every prefill local.
    """

    max_local_prefill_length: int = Field(default=DYNAMO_MAX_LOCAL_PREFILL_LENGTH, ge=0)
    max_prefill_queue_size: int = Field(default=DYNAMO_MAX_PREFILL_QUEUE_SIZE, ge=0)


class KVTransfer(Strict):
    """How a prompt's KV cache moves from a prefill replica to a decode replica.

    Attributes:
        bandwidth_gbps: the link's line rate, Gb/s (``KV_LINK_GBPS``); one transfer uses it whole.
        latency_s: fixed seconds added to each transfer (``KV_LINK_LATENCY_S``).

    A transfer of ``t`` tokens takes ``t x kv_bytes_per_token x 8 / (bandwidth_gbps x 1e9) + latency_s``.
    """

    bandwidth_gbps: float = Field(default=KV_LINK_GBPS, gt=0, le=100_000)
    latency_s: float = Field(default=KV_LINK_LATENCY_S, ge=0, le=60)

    def seconds(self, tokens: int, kv_bytes_per_token: int, bandwidth_factor: float = 1.0,
                extra_latency_s: float = 0.0) -> float:
        """Seconds to move ``tokens`` tokens of ``kv_bytes_per_token`` bytes each (>= 0), on a link whose
        bandwidth is divided by ``bandwidth_factor`` and latency raised by ``extra_latency_s`` (a
        ``simulator.link_slowdowns`` window; 1 and 0: as configured)."""
        bits_per_s = self.bandwidth_gbps * 1e9 / bandwidth_factor
        return tokens * kv_bytes_per_token * 8 / bits_per_s + self.latency_s + extra_latency_s


class PDRatio(Strict):
    """Bounds on a service's prefill:decode replica ratio (prefill replicas / decode replicas, each summed
    over its pool's variants), kept by the PID (``controllers.roles.enforce_ratio``) and the MPC's plan
    (``models.planning.PlanService.pd_ratio``).

    Volcano Kthena's ``RoleRatioConstraint`` (volcano-sh/kthena at 3cc0572,
    ``pkg/apis/workload/v1alpha1/autoscalingpolicy_types.go``: ``numeratorRole``, ``denominatorRole``,
    ``minRatio``, ``maxRatio``), its numerator the prefill role and its denominator the decode role.

    Attributes:
        min_ratio: the smallest prefill / decode allowed (>= 0).
        max_ratio: the largest (> 0, >= ``min_ratio``).
    """

    min_ratio: float = Field(ge=0, le=1000)
    max_ratio: float = Field(gt=0, le=1000)

    @model_validator(mode="after")
    def _ordered(self) -> PDRatio:
        if self.min_ratio > self.max_ratio:
            raise ValueError(f"min_ratio ({self.min_ratio}) exceeds max_ratio ({self.max_ratio})")
        return self



def ratio_reachable(ratio: PDRatio, prefill_bounds: tuple[int, int], decode_bounds: tuple[int, int]) -> bool:
    """Whether some whole ``(P, D)`` within each pool's ``(min, max)`` replicas keeps ``min_ratio x D <= P
    <= max_ratio x D`` (both at zero included): what a plan that keeps the ratio as a constraint
    (``models.planning.PlanService.pd_ratio``) needs to have a plan at all; ``Roles`` refuses a ratio
    without one.

    Only the decode counts whose ratio interval ``[min_ratio x D, max_ratio x D]`` can meet ``[P_min,
    P_max]`` are tried, and of those no more than ``1 / (max_ratio - min_ratio)`` past the first: from
    there the interval is at least one replica wide, so it holds a whole count or an end of ``[P_min,
    P_max]`` (``max_replicas`` has no upper bound: a loop over every decode count up to a max of 10^9
    ran for minutes on a fleet file's ratio no count keeps)."""
    (p_lo, p_hi), (d_lo, d_hi) = prefill_bounds, decode_bounds
    lo_r, hi_r = ratio.min_ratio, ratio.max_ratio
    first = max(d_lo, math.ceil((p_lo - 1e-9) / hi_r) - 1)  # below, max_ratio x D < P_min
    last = d_hi if lo_r == 0 else min(d_hi, math.floor((p_hi + 1e-9) / lo_r) + 1)  # above, min_ratio x D > P_max
    if hi_r > lo_r:
        last = min(last, max(first, math.ceil(1.0 / (hi_r - lo_r))) + 2)
    for d in range(first, last + 1):
        lo, hi = max(p_lo, math.ceil(lo_r * d - 1e-9)), min(p_hi, math.floor(hi_r * d + 1e-9))
        if lo <= hi:
            return True
    return False


class Roles(Strict):
    """A service's prefill/decode disaggregation (llm-d's P/D "well-lit path"): pools of prefill and
    decode replicas, each a list of variants as ``Service.variants`` (GPU, TP, price, profile, start-up).

    Attributes:
        prefill: variants of the prefill pool (pods labelled ``llm-d.ai/role: prefill``), at least one.
        decode: variants of the decode pool (``llm-d.ai/role: decode``), at least one.
        non_cached_tokens: llm-d's ``prefix-based-pd-decider`` threshold, tokens: a request is prefilled
            remotely when its prompt, and the part of it the chosen decode replica has not cached, are
            both at least this long; else the decode replica prefills it itself. 0 turns remote
            prefill off, as in the plugin (default ``PD_NON_CACHED_TOKENS``).
        router: which rule decides, per request, whether a prefill replica prefills it: ``llm-d`` (the
            default: ``non_cached_tokens``, ``autoscaler.simulator.disagg.remote_prefill``) or ``dynamo``
            (NVIDIA Dynamo's conditional disaggregation, by the uncached prompt and the prefill queue:
            ``dynamo``, ``autoscaler.simulator.disagg.dynamo_remote_prefill``).
        dynamo: Dynamo's parameters (``DynamoDisagg``), read only with ``router: dynamo``; giving them
            with ``router: llm-d``, or ``non_cached_tokens`` with ``router: dynamo``, is refused
            (``ValueError``: the other rule's setting would be silently ignored).
        kv_transfer: the link between the pools (``KVTransfer``).
        ratio: bounds on prefill / decode replicas the PID keeps by Kthena's rule and the MPC keeps as a
            constraint of its plan (``PDRatio``; ``dynamo-pd`` does not read it); None: no bound. A
            ``min_ratio`` above 0 needs a prefill variant with room.
    """

    prefill: list[Variant] = Field(min_length=1)
    decode: list[Variant] = Field(min_length=1)
    non_cached_tokens: int = Field(default=PD_NON_CACHED_TOKENS, ge=0)
    router: Literal["llm-d", "dynamo"] = "llm-d"
    dynamo: DynamoDisagg = DynamoDisagg()
    kv_transfer: KVTransfer = KVTransfer()
    ratio: PDRatio | None = None

    @property
    def remote_threshold(self) -> int:
        """The uncached prompt, tokens, from which the routing rule prefills remotely, as llm-d's threshold
        (``models.capacity_roles.remote_points``): ``non_cached_tokens`` under llm-d's rule; under Dynamo's,
        ``max_local_prefill_length + 1`` (its test is ``>``; a prompt is never shorter than its uncached
        part), 0 (never) when its queue limit is 0. Dynamo's queue half is not static: the capacity models
        read the length half only, as if the prefill queue stayed under ``max_prefill_queue_size``."""
        if self.router == "llm-d":
            return self.non_cached_tokens
        return self.dynamo.max_local_prefill_length + 1 if self.dynamo.max_prefill_queue_size > 0 else 0

    @model_validator(mode="after")
    def _one_rules_settings(self) -> Roles:
        if self.router == "llm-d" and "dynamo" in self.model_fields_set:
            raise ValueError("dynamo (Dynamo's conditional-disaggregation parameters) is read only with "
                             "router: dynamo, and router is llm-d")
        if self.router == "dynamo" and "non_cached_tokens" in self.model_fields_set:
            raise ValueError("non_cached_tokens is llm-d's threshold, not read with router: dynamo (set "
                             "dynamo.max_local_prefill_length instead)")
        return self

    @model_validator(mode="after")
    def _ratio_reachable(self) -> Roles:
        # Kthena's rule lowers the decode pool to floor(prefill / min_ratio) when the prefill pool is at its
        # cap: with that cap 0 it would hold the decode pool at its minimum whatever the load
        if self.ratio is not None and self.ratio.min_ratio > 0 and all(v.cap == 0 for v in self.prefill):
            raise ValueError(f"ratio.min_ratio ({self.ratio.min_ratio:g}) > 0 but every prefill variant has "
                             "max_replicas (or quota) 0: the ratio would hold the decode pool at its minimum")
        if self.ratio is not None:
            # no whole (P, D) within the pools' bounds keeps it: the MPC's plan would leave it out and the PID
            # clamp to the bounds, both silently
            p_lo, p_hi = sum(v.min_replicas for v in self.prefill), sum(v.cap for v in self.prefill)
            d_lo, d_hi = sum(v.min_replicas for v in self.decode), sum(v.cap for v in self.decode)
            r = self.ratio
            if not ratio_reachable(r, (p_lo, p_hi), (d_lo, d_hi)):
                raise ValueError(f"ratio ({r.min_ratio:g} to {r.max_ratio:g} prefill per decode replica) cannot hold "
                                 f"within the pools' bounds (prefill {p_lo} to {p_hi}, decode {d_lo} to {d_hi} "
                                 "replicas: min_replicas to max_replicas or quota, summed)")
        return self

    def variants(self) -> list[tuple[str, Variant]]:
        """(role, variant) of every pool's variants, prefill first."""
        return [("prefill", v) for v in self.prefill] + [("decode", v) for v in self.decode]


class Service(Strict):
    """A served model and the variants that serve it.

    Attributes:
        name: service name.
        model: served model name (vLLM ``model_name`` label).
        max_model_len: longest prompt + output accepted, tokens; longer requests are rejected
            (vLLM answers HTTP 400), counted as ``rejected``.
        slo: objectives per request class; must define ``interactive`` and ``batch``.
        variants: its aggregated variants (each replica prefills and decodes); may be empty when
            ``roles`` is given.
        roles: prefill and decode pools beside (or instead of) the aggregated variants (``Roles``;
            scaled by the controllers that declare ``scales_roles``: the PID, the MPC, ``dynamo-pd``, ``wva-pd``, and
            the oracle beside aggregated variants; the others hold them).
        typical_request: the request it is sized for without a trace.
    """

    name: str
    model: str
    max_model_len: int = Field(default=32768, gt=0)
    slo: dict[str, SLO]
    variants: list[Variant] = Field(default_factory=list)
    roles: Roles | None = None
    typical_request: TypicalRequest = TypicalRequest()

    def role_variants(self) -> list[tuple[str, Variant]]:
        """(role, variant) of its prefill and decode pools; empty without ``roles``."""
        return [] if self.roles is None else self.roles.variants()

    @field_validator("name")
    @classmethod
    def _dns_subdomain(cls, v: str) -> str:
        return check_name(v, "service name", label=False)

    @field_validator("slo")
    @classmethod
    def _classes(cls, v: dict[str, SLO]) -> dict[str, SLO]:
        missing = [c for c in (INTERACTIVE, BATCH) if c not in v]
        if missing:
            raise ValueError(f"missing SLO class(es): {', '.join(missing)}")
        return v

    @model_validator(mode="after")
    def _unique(self) -> Service:
        if not self.variants and self.roles is None:
            raise ValueError("variants: at least one variant is required (or roles with prefill and decode pools)")
        decode_capable = self.variants + ([] if self.roles is None else self.roles.decode)
        if all(v.cap == 0 for v in decode_capable):
            which = "every variant" if self.roles is None else (
                "every decode pool variant" if not self.variants else "every aggregated and decode pool variant")
            raise ValueError(f"{which} has max_replicas (or quota) 0: the service could never serve")
        names = [v.name for v in self.variants] + [v.name for _, v in self.role_variants()]
        dup = {n for n in names if names.count(n) > 1}
        if dup:
            raise ValueError(f"duplicate variant name(s): {', '.join(sorted(dup))}")
        for n in names:  # the variant's Deployment is "<service>-<variant>"
            check_name(f"{self.name}-{n}", "Deployment name", label=False)
        return self



class GPULimits(Strict):
    """GPUs the whole fleet may hold, across services (a cloud quota, a reservation, a budget).

    Attributes:
        quota: GPU type (a variant's ``gpu``) -> the most GPUs of that type all services together hold.
        budget: the most GPUs of any type all services together hold, or None.

    The MPC plans every service in one problem within them (``controllers.mpc``); the other
    controllers decide per service and do not read them.
    """

    quota: dict[str, int] = Field(default_factory=dict)
    budget: int | None = Field(default=None, ge=0)

    @field_validator("quota", mode="before")
    @classmethod
    def _whole_non_negative(cls, v: object) -> object:
        # each count is checked as the scalar fields are: no boolean, string or fraction read as a number
        if isinstance(v, dict):
            for k, n in v.items():
                if isinstance(n, bool) or not isinstance(n, int) or not 0 <= n <= MAX_INT:
                    raise ValueError(f"quota[{k}] must be a whole number of GPUs >= 0, got {n!r}")
        return v


class FleetConfig(Strict):
    """The whole fleet file."""

    services: list[Service] = Field(min_length=1)
    gpu_limits: GPULimits = GPULimits()
    engine: EngineConfig = EngineConfig()
    simulator: SimulatorConfig = SimulatorConfig()
    controller: ControllerConfig = ControllerConfig()
    prometheus: PrometheusConfig = PrometheusConfig()
    kubernetes: KubernetesConfig = KubernetesConfig()

    def gateway_cap(self) -> int | None:
        """The most requests in flight the gateway lets each replica hold when that is a fixed number:
        ``controller.admission_settings.gateway_max_concurrency``, else (simulation: the simulated
        gateway is the deployed one) the simulated gateway's numeric ``max_concurrency`` under its
        concurrency detector in ``requests`` or ``hybrid`` mode; None when neither is set."""
        cap = self.controller.admission_settings.gateway_max_concurrency
        g = self.simulator.gateway
        if cap is None and g.saturation == "concurrency" and g.concurrency_mode != "tokens" \
                and isinstance(g.max_concurrency, int):
            cap = g.max_concurrency
        return cap

    def planning_engine(self) -> EngineConfig:
        """``engine`` as the capacity model should see a replica: ``max_num_seqs`` at most the gateway's
        fixed cap (``gateway_cap``), since the requests past it wait at the gateway (a queue in front
        of the replica, as vLLM's own waiting queue is past ``max_num_seqs``)."""
        cap = self.gateway_cap()
        if cap is None or cap >= self.engine.max_num_seqs:
            return self.engine
        return self.engine.model_copy(update={"max_num_seqs": cap})

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
        # simulator also keeps one block of rounding slack per sequence (engine).
        block = self.engine.block_size
        for s in self.services:
            for where, v in [("variants", v) for v in s.variants] + [(f"roles.{r}", v) for r, v in s.role_variants()]:
                if v.kv_cache_tokens < s.max_model_len + block:
                    raise ValueError(
                        f"services[{s.name}].{where}[{v.name}].kv_cache_tokens ({v.kv_cache_tokens}) cannot hold "
                        f"one max_model_len ({s.max_model_len}) sequence plus one {block}-token block"
                    )
        return self

    @model_validator(mode="after")
    def _crash_targets(self) -> FleetConfig:
        # a fault may name an aggregated variant or a prefill/decode pool's (their names are unique
        # within a service, ``Service._unique``)
        variants = {s.name: {v.name for v in s.variants} | {v.name for _, v in s.role_variants()}
                    for s in self.services}
        known = {v for names in variants.values() for v in names}
        for name in self.simulator.slowdown:
            if name not in known:
                raise ValueError(f"simulator.slowdown: unknown variant '{name}' "
                                 f"(fleet has: {', '.join(sorted(known))})")
        targets: list[tuple[str, int, str | None, str | None]] = [
            ("crashes", i, c.service, c.variant) for i, c in enumerate(self.simulator.crashes)]
        targets += [("unschedulable", i, u.service, u.variant) for i, u in enumerate(self.simulator.unschedulable)]
        targets += [("link_slowdowns", i, w.service, None) for i, w in enumerate(self.simulator.link_slowdowns)]
        for key, i, service, variant in targets:
            if service is None and len(self.services) > 1:
                raise ValueError(f"simulator.{key}[{i}].service: required when the fleet has more than one "
                                 f"service ({', '.join(variants)})")
            svc = service or self.services[0].name
            if svc not in variants:
                raise ValueError(f"simulator.{key}[{i}].service: unknown service '{svc}'")
            if variant is None:
                if self.service(svc).roles is None:
                    raise ValueError(f"simulator.{key}[{i}].service: '{svc}' has no prefill/decode roles, "
                                     "hence no KV-transfer link to slow down")
                continue
            if variant not in variants[svc]:
                raise ValueError(
                    f"simulator.{key}[{i}].variant: unknown variant '{variant}' of service '{svc}' "
                    f"(known: {', '.join(sorted(variants[svc]))})"
                )
        return self

    @model_validator(mode="after")
    def _saturation_filter_has_pools(self) -> FleetConfig:
        # the filter acts in the P/D router only (``FleetSimulator._route_pd``): on a fleet without pools it
        # would be read by nothing, and a run said to spill bursts would route exactly as with it off
        if self.simulator.pd_saturation_filter and all(s.roles is None for s in self.services):
            raise ValueError("simulator.pd_saturation_filter: no service has prefill/decode roles, so no "
                             "prefill pool to be saturated (set roles on a service, or leave the filter off)")
        # prefill_priority orders prefill replicas' queues only (``disagg.enqueue``): read by nothing without pools
        if self.simulator.prefill_priority and all(s.roles is None for s in self.services):
            raise ValueError("simulator.prefill_priority: no service has prefill/decode roles, so no prefill "
                             "queue to order (set roles on a service, or leave it off)")
        return self

    @model_validator(mode="after")
    def _one_workload_per_variant(self) -> FleetConfig:
        # two variants scaling one object would each undo the other's writes: the second write of a
        # tick scales the first variant's replicas away with no warning
        seen: dict[tuple[str, str], str] = {}
        for s in self.services:
            for where, v in [("variants", v) for v in s.variants] + [(f"roles.{r}", v) for r, v in s.role_variants()]:
                key = (self.kubernetes.workload(s.name, v.name).kind, self.kubernetes.workload_name(s.name, v.name))
                here = f"services[{s.name}].{where}[{v.name}]"
                if key in seen:
                    raise ValueError(f"kubernetes.workloads: {seen[key]} and {here} both scale {key[0]} '{key[1]}' "
                                     "(give each variant its own workload name)")
                seen[key] = here
        return self

    @model_validator(mode="after")
    def _limits_hold_the_minimum(self) -> FleetConfig:
        # a fleet whose minimum (or starting) replicas already break a shared limit has no valid plan
        gpus = {v.gpu for s in self.services for v in s.variants} | {v.gpu for s in self.services
                                                                    for _, v in s.role_variants()}
        for gpu in self.gpu_limits.quota:
            if gpu not in gpus:
                raise ValueError(f"gpu_limits.quota: no variant runs on '{gpu}' (GPUs: {', '.join(sorted(gpus))})")
        for attr, what in (("min_replicas", "min_replicas"), ("start_replicas", "initial_replicas")):
            held: dict[str, int] = {}
            for s in self.services:
                for v in s.variants + [v for _, v in s.role_variants()]:
                    held[v.gpu] = held.get(v.gpu, 0) + getattr(v, attr) * v.gpus_per_replica
            for gpu, cap in self.gpu_limits.quota.items():
                if held.get(gpu, 0) > cap:
                    raise ValueError(f"gpu_limits.quota: {gpu} {cap} is below the {held[gpu]} GPUs the "
                                     f"services' {what} hold")
            budget = self.gpu_limits.budget
            if budget is not None and sum(held.values()) > budget:
                raise ValueError(f"gpu_limits.budget: {budget} is below the {sum(held.values())} GPUs the "
                                 f"services' {what} hold")
        return self

    @model_validator(mode="after")
    def _recorded_window(self) -> FleetConfig:
        if self.prometheus.query_set == "recorded" and self.controller.window_s != RECORDED_WINDOW_S:
            raise ValueError(f"prometheus.query_set recorded reads rates the recording rules take over "
                             f"{RECORDED_WINDOW}: controller.window_s must be {RECORDED_WINDOW_S:g}, "
                             f"not {self.controller.window_s:g}")
        return self

    @model_validator(mode="after")
    def _workload_names(self) -> FleetConfig:
        # a pool's variant is scaled through its own workload too (``Controller.scales_roles``)
        variants = {s.name: {v.name for v in s.variants} | {v.name for _, v in s.role_variants()}
                    for s in self.services}
        for name, by_variant in self.kubernetes.workloads.items():
            if name not in variants:
                raise ValueError(f"kubernetes.workloads: unknown service '{name}'")
            unknown = sorted(set(by_variant) - variants[name])
            if unknown:
                raise ValueError(f"kubernetes.workloads[{name}]: unknown variant(s) {', '.join(unknown)}")
        for name in self.kubernetes.service_shards:
            if name not in variants:
                raise ValueError(f"kubernetes.service_shards: unknown service '{name}'")
        return self

    @model_validator(mode="after")
    def _selector_names(self) -> FleetConfig:
        variants = {s.name: {v.name for v in s.variants} | {v.name for _, v in s.role_variants()}
                    for s in self.services}
        for name, sel in self.prometheus.selectors.items():
            if name not in variants:
                raise ValueError(f"prometheus.selectors: unknown service '{name}'")
            unknown = sorted(set(sel.variants) - variants[name])
            if unknown:
                raise ValueError(f"prometheus.selectors[{name}]: unknown variant(s) {', '.join(unknown)}")
        return self

    def variant_names(self) -> dict[str, set[str]]:
        """Variant names per service name."""
        return {s.name: {v.name for v in s.variants} for s in self.services}

    def service(self, name: str | None = None) -> Service:
        """The named service (the first when ``name`` is None); KeyError if unknown."""
        if name is None:
            return self.services[0]
        for s in self.services:
            if s.name == name:
                return s
        raise KeyError(name)

