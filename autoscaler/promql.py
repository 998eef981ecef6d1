"""Default PromQL per signal, one query set per server release range (vLLM 0.11 and later, 0.9.2 to
0.10, before 0.9.2; SGLang 0.5.23; vLLM 0.11+ read through the recording rules, ``recorded``), how a
service's set is detected from the series its pods export (``auto``); label-matcher helpers.

A query template is a ``string.Template`` with two placeholders:

- ``$sel``: label matchers without braces that select the pods in scope (a service or one variant,
  restricted to the pods that passed the freshness and sanity checks), e.g.
  ``model_name="m",pod=~"a|b"``; for the service-wide signals (``SERVICE_SIGNALS``: the gateway's
  ``arrival_rate_rps``), the service's matchers alone, e.g. ``model_name="m"``;
- ``$window``: the signal look-back window as a PromQL duration, e.g. ``60000ms``.

Every template returns one series (aggregated with ``sum``/``avg``/``histogram_quantile``); the
signals and their units are listed in ``autoscaler.loop.observe``. Metric names come from
``shared/data/vllm-metrics/METRICS.md``: vLLM 0.33.0 ``vllm/v1/metrics/loggers.py``; its "Renamed /
removed" table for the pre-0.9 names (``vllm:gpu_cache_usage_perc``,
``vllm:gpu_prefix_cache_{queries,hits}_total``, ``vllm:time_per_output_token_seconds``); and SGLang
0.5.23 ``sglang/srt/observability/metrics_collector.py`` (``sglang_metrics_v0.5.23.csv``).

Per pod, the adapter also reads the query set's ``running``, ``waiting`` and ``kv_usage`` gauges:
the newest sample time of ``running`` tells a pod's freshness, and a pod whose gauges are negative,
not finite, or (KV usage) above 1 is ignored. Replica counts come from kube-state-metrics when its
Deployment series exist (``kube_deployment_spec_replicas``, ``kube_deployment_status_replicas_ready``);
otherwise from the number of fresh pods.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from string import Template

from autoscaler.state import SIGNALS

# kube-state-metrics v2 Deployment metrics (labels ``namespace``, ``deployment``).
ROLE_LABEL = "llm_d_ai_role"
"""The pod label ``llm-d.ai/role`` (``prefill``, ``decode``) as a Prometheus scraping the pods carries it: the
Kubernetes service discovery's ``__meta_kubernetes_pod_label_llm_d_ai_role`` (the label's name with each
character not valid in a Prometheus label name written ``_``), kept by a ``labelmap`` relabelling; llm-d's
monitoring examples select and group pods by ``llm_d_ai_role``. The Prometheus source selects a pool's pods
by it (``autoscaler.adapters.prometheus``)."""


@dataclass(frozen=True)
class RoleLabels:
    """How a deployment's pods say which pool they serve, as a Prometheus scraping them keeps it: the
    label ``name`` and its value on a prefill pod, a decode pod and an aggregated pod (``""``: no label,
    which a Prometheus stores as the label's absence).

    Attributes:
        convention: the fleet file's ``prometheus.role_labels`` (``ROLE_LABELLINGS``).
        name: the Prometheus label name.
        prefill, decode, aggregated: its value on each kind of pod.
    """

    convention: str
    name: str
    prefill: str
    decode: str
    aggregated: str

    def value(self, role: str) -> str:
        """The label's value on a pod of ``role`` (``prefill``, ``decode``; "" for an aggregated one).

        Raises:
            KeyError: any other role.
        """
        return {"prefill": self.prefill, "decode": self.decode, "": self.aggregated}[role]

    def is_(self, role: str) -> str:
        """The matcher of ``role``'s pods, e.g. ``llm_d_ai_role="decode"`` or ``dynamo_component="backend"``."""
        return f"{self.name}={quote(self.value(role))}"

    def not_prefill(self) -> str:
        """The matcher of every pod but the prefill pool's (aggregated pods included)."""
        return f"{self.name}!={quote(self.prefill)}"


ROLE_LABELLINGS: dict[str, RoleLabels] = {
    "llm-d": RoleLabels("llm-d", ROLE_LABEL, "prefill", "decode", ""),
    "dynamo": RoleLabels("dynamo", "dynamo_component", "prefill", "backend", "backend"),
    "dynamo-operator": RoleLabels("dynamo-operator", "nvidia_com_dynamo_sub_component_type", "prefill", "decode", ""),
}
"""``prometheus.role_labels`` -> its ``RoleLabels``.

- ``llm-d`` (the default): the pod label ``llm-d.ai/role`` (``ROLE_LABEL``); an aggregated pod has none.
- ``dynamo``: NVIDIA Dynamo's component name, the label ``dynamo_component`` its runtime adds to every
  series a worker exposes on its system port, the vLLM engine's ``vllm:`` series included (with
  ``dynamo_namespace``, ``dynamo_endpoint``: ai-dynamo/dynamo ``lib/runtime/src/metrics/prometheus_names.rs``
  ``labels::COMPONENT``/``NAMESPACE``/``ENDPOINT``, read at 04070c75, after the v1.7.1 release). The vLLM
  worker's component is ``prefill`` for a prefill worker (``--disaggregation-mode prefill``) and
  ``backend`` for every other, decode and aggregated alike (``components/src/dynamo/vllm/args.py``
  ``update_dynamo_config_with_engine``, read at 000a36a7); its endpoint ``generate``. A decode pod and an
  aggregated pod thus carry the same value: the source tells them apart by their variants' pod names
  (``adapters.prometheus``), as it does under llm-d.
- ``dynamo-operator``: the pod label Dynamo's Kubernetes operator puts on a prefill or decode worker,
  ``nvidia.com/dynamo-sub-component-type`` (``prefill``, ``decode``; none on an aggregated worker), as
  Kubernetes discovery names it (``__meta_kubernetes_pod_label_nvidia_com_dynamo_sub_component_type``) and
  a ``labelmap`` relabelling keeps it (ai-dynamo/dynamo ``deploy/operator/internal/consts/consts.go``
  ``KubeLabelDynamoSubComponentType``, ``ComponentTypePrefill``, ``ComponentTypeDecode``, read at 0367e404).
"""
DYNAMO_NAMESPACE_LABEL, DYNAMO_ENDPOINT_LABEL = "dynamo_namespace", "dynamo_endpoint"
DYNAMO_NAMESPACE, DYNAMO_ENDPOINT = "dynamo", "generate"
"""Dynamo's other two injected labels and a vLLM worker's values by default (its ``--namespace``
defaults to ``dynamo``, ``DYN_NAMESPACE``; the endpoint is ``generate``, ``args.py`` as above)."""

GAUGE_SIGNALS = ("kv_usage", "queue_length", "running")
"""The signals read from gauges: an in-flight request is on one pod at a time, so with prefill/decode
pools they are read over every pod, the prefill pool's included, while the service-wide counters and
histograms leave the prefill pods out (``autoscaler.adapters.prometheus``)."""
KSM_SPEC_REPLICAS = "kube_deployment_spec_replicas"
KSM_READY_REPLICAS = "kube_deployment_status_replicas_ready"
# Requests arriving at the gateway, counted by the endpoint picker (EPP) per model: completions fall
# when the fleet saturates, arrivals do not, which is what a planner sizing for demand must read. The
# name moved twice; newest first, each with labels ``model_name, target_model_name`` (+ ``priority``
# from GIE v1.1.0, + ``fairness_id`` for llm-d's):
# - ``llm_d_epp_request_total``: llm-d-router v0.10.0 ``pkg/epp/metrics/llm_d_router_metrics.go``;
# - ``inference_objective_request_total``: gateway-api-inference-extension v1.1.0 to v1.5, and still
#   registered (deprecated, counted alongside the new one) by llm-d-router v0.10.0 ``metrics.go``;
# - ``inference_model_request_total``: gateway-api-inference-extension v0.x-v1.0.
# An EPP may export two of them for the same requests, so the queries read the newest present, never a sum.
GATEWAY_REQUESTS = ("llm_d_epp_request_total", "inference_objective_request_total", "inference_model_request_total")
# The EPP's flow control (llm-d-router v0.10.0 ``pkg/epp/metrics/llm_d_router_metrics.go``; the
# ``inference_extension_`` names are GIE v1.x's, registered deprecated beside them): a histogram of the
# seconds each request spent queued, by ``priority`` and ``outcome`` (``Dispatched``, ``RejectedCapacity``,
# ``RejectedOther``, ``EvictedTTL``, ``EvictedContextCancelled``, ...), and a gauge of requests held now.
GATEWAY_QUEUE_DURATION = ("llm_d_epp_flow_control_request_queue_duration_seconds",
                          "inference_extension_flow_control_request_queue_duration_seconds")
GATEWAY_QUEUE_SIZE = ("llm_d_epp_flow_control_queue_size", "inference_extension_flow_control_queue_size")
# Signals evaluated once per service with the service's matchers only: the gateway's series carry no pod.
SERVICE_SIGNALS = frozenset({"arrival_rate_rps"})

PLACEHOLDERS = frozenset({"sel", "window"})


@dataclass(frozen=True)
class QuerySet:
    """The PromQL defaults for one server family.

    Attributes:
        name: ``vllm-0.11``, ``vllm-0.9.2``, ``vllm-pre-0.9.2``, ``sglang`` or ``recorded``.
        signals: signal name -> template; a signal absent here is always unknown (None).
        kv_usage: per-pod KV-usage gauge (fraction 0..1).
        waiting, running: per-pod queue and batch gauges (requests).
        prefix_hits, prefix_queries: per-pod prefix-cache counters in tokens (hits, and prompt tokens
            looked up), read by the cache-warmth model; None where the server has no token counters.
    """

    name: str
    signals: dict[str, str]
    kv_usage: str
    waiting: str
    running: str
    prefix_hits: str | None = None
    prefix_queries: str | None = None


def _quantile(q: float, histogram: str) -> str:
    return f"histogram_quantile({q}, sum by (le) (rate({histogram}_bucket{{$sel}}[$window])))"


def _mean(histogram: str) -> str:
    return f"sum(rate({histogram}_sum{{$sel}}[$window])) / sum(rate({histogram}_count{{$sel}}[$window]))"


def first_present(counters: tuple[str, ...], matchers: str, window: str, by: str = "") -> str:
    """``sum [by (by)] (rate(c{matchers}[window]))`` of the first of ``counters`` the scrape has, as one
    PromQL expression (``or``: a later counter's series only where no earlier one has them, so two
    names counting the same requests are never added); parenthesised, so it nests in any expression."""
    agg = f"sum by ({by})" if by else "sum"
    return "(" + " or ".join(f"{agg} (rate({c}{{{matchers}}}[{window}]))" for c in counters) + ")"


def _flow(suffix: str, outcome: str, by: str = "priority") -> str:
    return first_present(tuple(f"{h}_{suffix}" for h in GATEWAY_QUEUE_DURATION), f'outcome=~"{outcome}",$sel',
                         "$window", by=by)


_DISPATCHED = "Dispatched"
# Shed: 429 at the door (``RejectedCapacity``, ``RejectedNoEndpoints``, ``RejectedOther``), 503 at the
# deadline (``EvictedTTL``, ``EvictedNoEndpoints``: queued while the pool had no endpoint), or pushed
# out by higher priorities (``EvictedDisplaced``, ``EvictedPreempted``); not a client that gave up
# (``EvictedContextCancelled``) nor a shutdown (``EvictedOther``).
_SHED = "Rejected.*|Evicted(TTL|NoEndpoints|Displaced|Preempted)"
GATEWAY_WINDOW_S = 60.0
"""Seconds of the source's clock the per-priority gateway signals are taken over (the window, if
shorter): admission must follow a surge within a minute even under a controller whose window is five
(the PID's). A sped-up Prometheus source reads it as ``GATEWAY_WINDOW_S / speed`` wall seconds, as it
reads the window (``autoscaler.adapters.prometheus``); the simulator's source in simulated seconds."""
PRIORITY_QUERIES: dict[str, str] = {
    "arrival_rate_rps": first_present(GATEWAY_REQUESTS, "$sel", "$window", by="priority"),
    "dispatched_rps": _flow("count", _DISPATCHED),
    "waited": _flow("sum", _DISPATCHED),
    # flow control with no shed yet has no shed series: 0 per priority it dispatched
    "shed_rps": f"({_flow('count', _SHED)} or ({_flow('count', _DISPATCHED)} * 0))",
    "queue": "(" + " or ".join(f"sum by (priority) ({g}{{$sel}})" for g in GATEWAY_QUEUE_SIZE) + ")",
}
"""Signal -> a template answering one series per ``priority`` label over the service's matchers and
``GATEWAY_WINDOW_S``: what the gateway's series say per priority (``autoscaler.state.PrioritySignals``;
``waited`` is the seconds waited per second by the requests dispatched, so a priority's mean wait is
``waited / dispatched_rps`` once its labels are added up). Without flow control an EPP exports only
the arrivals, and the other fields stay unknown."""
GATEWAY_TOTALS: dict[str, str] = {
    "waited": _flow("sum", _DISPATCHED, by=""),
    "dispatched": _flow("count", _DISPATCHED, by=""),
}
"""The same over every priority and the signal window, for the mean gateway wait that the service's
``ttft_mean_s`` adds (the simulator's source takes it over the same window)."""
_PRIORITY_LABEL = re.compile(r"-?[0-9]+")


def priority_name(label: str, names: tuple[str, ...]) -> str | None:
    """The priority (one of ``names``, lowest first) an EPP's ``priority`` label stands for: the rank
    ``autoscaler admission objectives`` gives it (0 the lowest), or that rank less ``len(names)`` (a
    band shed to below every rank, ``adapters.gateway_api.SHED_OFFSET``); None for any other value."""
    if not _PRIORITY_LABEL.fullmatch(label):  # as Go's strconv.Itoa writes an int, nothing else
        return None
    rank = int(label)
    if rank < 0:
        rank += len(names)
    return names[rank] if 0 <= rank < len(names) else None


def _rate(counter: str, extra: str = "") -> str:
    # ``extra`` goes first: PromQL allows a trailing comma, so an empty ``$sel`` still parses.
    return f"sum(rate({counter}{{{extra + ',' if extra else ''}$sel}}[$window]))"


def _vllm(kv: str, hits: str, queries: str, itl: str, tpot: str, name: str, token_counters: bool) -> QuerySet:
    return QuerySet(
        name=name,
        signals={
            "request_rate_rps": _rate("vllm:e2e_request_latency_seconds_count"),
            "prompt_tokens_rps": _rate("vllm:prompt_tokens_total"),
            "generation_tokens_rps": _rate("vllm:generation_tokens_total"),
            # the lengths of the requests finished, observed with their e2e latency (vLLM 0.33.0
            # ``vllm/v1/metrics/loggers.py``; v0 engines exported the same histograms): over the requests
            # ``request_rate_rps`` counts, where the token counters count a prompt at its prefill
            "request_prompt_tokens_rps": _rate("vllm:request_prompt_tokens_sum"),
            "request_generation_tokens_rps": _rate("vllm:request_generation_tokens_sum"),
            "ttft_p50_s": _quantile(0.5, "vllm:time_to_first_token_seconds"),
            "ttft_p95_s": _quantile(0.95, "vllm:time_to_first_token_seconds"),
            "itl_p50_s": _quantile(0.5, itl),
            "itl_p95_s": _quantile(0.95, itl),
            "tpot_p95_s": _quantile(0.95, tpot),
            "ttft_mean_s": _mean("vllm:time_to_first_token_seconds"),
            "tpot_mean_s": _mean(tpot),
            "kv_usage": f"avg({kv}{{$sel}})",
            "queue_length": "sum(vllm:num_requests_waiting{$sel})",
            "running": "sum(vllm:num_requests_running{$sel})",
            "prefix_hit_rate": f"{_rate(hits)} / {_rate(queries)}",
            # finished_reason in {stop, length, abort, error, repetition} (vLLM FinishReason).
            "success_rps": _rate("vllm:request_success_total", 'finished_reason!~"abort|error"'),
            "abort_rps": _rate("vllm:request_success_total", 'finished_reason=~"abort|error"'),
            "preemptions_rps": _rate("vllm:num_preemptions_total"),
            "arrival_rate_rps": first_present(GATEWAY_REQUESTS, "$sel", "$window"),
        },
        kv_usage=kv,
        waiting="vllm:num_requests_waiting",
        running="vllm:num_requests_running",
        prefix_hits=hits if token_counters else None,
        prefix_queries=queries if token_counters else None,
    )


# Which names a vLLM exports depends on its release (vLLM's metrics/loggers.py and pull requests):
# ``kv_cache_usage_perc`` and ``prefix_cache_{queries,hits}_total`` (tokens) replaced the ``gpu_*``
# names in 0.9.2 (both exported until 0.11 hid the old ones); 0.11 added ``inter_token_latency_seconds``
# and the per-request ``request_time_per_output_token_seconds`` and deprecated the per-step
# ``time_per_output_token_seconds`` (#24110, #23919), removed in January 2026 (#32661). One set per range:
VLLM_011 = _vllm("vllm:kv_cache_usage_perc", "vllm:prefix_cache_hits_total", "vllm:prefix_cache_queries_total",
                 "vllm:inter_token_latency_seconds", "vllm:request_time_per_output_token_seconds", "vllm-0.11",
                 token_counters=True)
# 0.9.2 to 0.10: the new gauge and counters, the per-step ``time_per_output_token`` for ITL and TPOT.
VLLM_092 = _vllm("vllm:kv_cache_usage_perc", "vllm:prefix_cache_hits_total", "vllm:prefix_cache_queries_total",
                 "vllm:time_per_output_token_seconds", "vllm:time_per_output_token_seconds", "vllm-0.9.2",
                 token_counters=True)
# Before 0.9.2 there is no per-request TPOT histogram: the per-step ``time_per_output_token`` stands in
# for ITL and TPOT. Prefix-cache counters counted blocks in <= 0.8 (a ratio of the two is still a hit rate,
# but not a token count the cache-warmth model could weigh against the KV capacity).
VLLM_PRE_092 = _vllm("vllm:gpu_cache_usage_perc", "vllm:gpu_prefix_cache_hits_total",
                     "vllm:gpu_prefix_cache_queries_total", "vllm:time_per_output_token_seconds",
                     "vllm:time_per_output_token_seconds", "vllm-pre-0.9.2",
                     token_counters=False)
# SGLang 0.5.23 (``python/sglang/srt/metrics/collector.py``) has a per-request TPOT histogram as vLLM's
# (``request_time_per_output_token_seconds``), no abort split of finished requests other than
# ``num_aborted_requests_total``, and counts its preemptions as retractions
# (``num_retracted_requests_total``; ``num_retracted_reqs`` is a gauge of the last batch).
SGLANG_0523 = QuerySet(
    name="sglang",
    signals={
        "request_rate_rps": _rate("sglang:num_requests_total"),
        "prompt_tokens_rps": _rate("sglang:prompt_tokens_total"),
        "generation_tokens_rps": _rate("sglang:generation_tokens_total"),
        "ttft_p50_s": _quantile(0.5, "sglang:time_to_first_token_seconds"),
        "ttft_p95_s": _quantile(0.95, "sglang:time_to_first_token_seconds"),
        "itl_p50_s": _quantile(0.5, "sglang:inter_token_latency_seconds"),
        "itl_p95_s": _quantile(0.95, "sglang:inter_token_latency_seconds"),
        "tpot_p95_s": _quantile(0.95, "sglang:request_time_per_output_token_seconds"),
        "ttft_mean_s": _mean("sglang:time_to_first_token_seconds"),
        "tpot_mean_s": _mean("sglang:request_time_per_output_token_seconds"),
        "kv_usage": "avg(sglang:token_usage{$sel})",
        "queue_length": "sum(sglang:num_queue_reqs{$sel})",
        "running": "sum(sglang:num_running_reqs{$sel})",
        "prefix_hit_rate": f"{_rate('sglang:cached_tokens_total')} / {_rate('sglang:prompt_tokens_total')}",
        "success_rps": f"{_rate('sglang:num_requests_total')} - {_rate('sglang:num_aborted_requests_total')}",
        "abort_rps": _rate("sglang:num_aborted_requests_total"),
        "preemptions_rps": _rate("sglang:num_retracted_requests_total"),
        "arrival_rate_rps": first_present(GATEWAY_REQUESTS, "$sel", "$window"),
    },
    kv_usage="sglang:token_usage",
    waiting="sglang:num_queue_reqs",
    running="sglang:num_running_reqs",
    prefix_hits="sglang:cached_tokens_total",
    prefix_queries="sglang:prompt_tokens_total",
)

RECORDED_WINDOW = "5m"
RECORDED_WINDOW_S = 300.0
"""The window of the recording rules: the default ``controller.window_s``. A loop reading ``recorded``
must use it (``FleetConfig`` checks), and cannot read a source faster than real time."""

# Counters and histogram series the vLLM 0.33 signals take a rate of, each recorded by
# ``RECORDING_RULES`` as ``autoscaler:<name without "vllm:">:rate5m`` (the colon of ``vllm:`` becomes
# ``_``), with every label kept, so a recorded query selects pods with ``$sel`` as the raw one does.
_RATED = (
    "vllm:e2e_request_latency_seconds_count", "vllm:prompt_tokens_total", "vllm:generation_tokens_total",
    "vllm:request_prompt_tokens_sum", "vllm:request_generation_tokens_sum",
    "vllm:time_to_first_token_seconds_bucket", "vllm:time_to_first_token_seconds_sum",
    "vllm:time_to_first_token_seconds_count", "vllm:inter_token_latency_seconds_bucket",
    "vllm:request_time_per_output_token_seconds_bucket", "vllm:request_time_per_output_token_seconds_sum",
    "vllm:request_time_per_output_token_seconds_count", "vllm:prefix_cache_hits_total",
    "vllm:prefix_cache_queries_total", "vllm:request_success_total", "vllm:num_preemptions_total",
    *GATEWAY_REQUESTS,
)


def recorded_name(series: str) -> str:
    """The recording rule's name for the rate of ``series`` over ``RECORDED_WINDOW``."""
    return f"autoscaler:{series.replace('vllm:', 'vllm_')}:rate{RECORDED_WINDOW}"


RECORDING_RULES: dict[str, str] = {recorded_name(s): f"rate({s}[{RECORDED_WINDOW}])" for s in _RATED}
"""Recording rule name -> expression, one per rated series; ``autoscaler dashboards export`` writes
them (``rules/autoscaler-recording.yaml``) and the ``recorded`` query set reads them."""


_RATE = re.compile(r"rate\((?P<series>[a-zA-Z_:][a-zA-Z0-9_:]*)\{(?P<matchers>[^}]*)\}\[\$window\]\)")


def _recorded(template: str) -> str:
    """A vLLM 0.33 template with each ``rate(<series>{...}[$window])`` replaced by its recorded series
    (a series ``_RATED`` lacks is a KeyError, at import)."""
    names = {s: recorded_name(s) for s in _RATED}
    return _RATE.sub(lambda m: f"{names[m['series']]}{{{m['matchers']}}}", template)


VLLM_033_RECORDED = QuerySet(
    name="recorded",
    signals={k: _recorded(v) for k, v in VLLM_011.signals.items()},
    kv_usage=VLLM_011.kv_usage,
    waiting=VLLM_011.waiting,
    running=VLLM_011.running,
    prefix_hits=VLLM_011.prefix_hits,
    prefix_queries=VLLM_011.prefix_queries,
)

QUERY_SETS: dict[str, QuerySet] = {q.name: q for q in (VLLM_011, VLLM_092, VLLM_PRE_092, SGLANG_0523,
                                                       VLLM_033_RECORDED)}
"""Every query set by its name: the release range it fits (``recorded``: ``vllm-0.11`` through the rules)."""
ALIASES = {"vllm-0.33": "vllm-0.11", "vllm-pre-0.9": "vllm-pre-0.9.2"}
"""Earlier names of the query sets, still accepted (a set named after one release it was read from)."""
AUTO = "auto"
"""``prometheus.query_set`` that detects each service's set from the series its pods export (``detect``)."""
MARKERS: tuple[tuple[str, str], ...] = (
    ("sglang", "sglang:num_running_reqs"),
    ("vllm-0.11", "vllm:inter_token_latency_seconds_count"),
    ("vllm-0.11", "vllm:request_time_per_output_token_seconds_count"),
    ("vllm-0.9.2", "vllm:kv_cache_usage_perc"),
    ("vllm-pre-0.9.2", "vllm:gpu_cache_usage_perc"),
)
"""(query set, a series only its servers export among these; 0.11 has two), newest first: a vLLM of 0.9.2-0.10 also
exports ``gpu_cache_usage_perc``, and one of 0.11 also ``kv_cache_usage_perc``, so the first present decides."""


def query_set(name: str) -> QuerySet:
    """The query set ``name`` (or an alias) names.

    Raises:
        KeyError: ``auto`` or an unknown name.
    """
    return QUERY_SETS[ALIASES.get(name, name)]


def detection_query(sel: str) -> str:
    """An instant query answering one series per marker name (``MARKERS``) the pods ``sel`` selects export."""
    names = "|".join(re.escape(marker) for _, marker in MARKERS)
    return f'count by (__name__) ({{__name__=~"{names}"{"," + sel if sel.strip() else ""}}})'


def detect(names: set[str]) -> QuerySet | None:
    """The query set of the newest server whose marker is among ``names``; None when none is."""
    for name, marker in MARKERS:
        if marker in names:
            return QUERY_SETS[name]
    return None

RATE_SIGNALS = frozenset(s for s in SIGNALS if s.endswith("_rps"))


def check_template(signal: str, template: str) -> None:
    """Validate a user query override.

    Raises:
        ValueError: unknown signal, unknown placeholder, or no ``$sel`` (the query would ignore
            which pods are in scope).
    """
    if signal not in SIGNALS:
        raise ValueError(f"unknown signal '{signal}'; known: {', '.join(SIGNALS)}")
    found = {m.group("named") or m.group("braced") for m in Template.pattern.finditer(template)
             if m.group("named") or m.group("braced")}
    bad = sorted(found - PLACEHOLDERS)
    if bad:
        raise ValueError(f"query for {signal}: unknown placeholder(s) ${', $'.join(bad)} (use $sel and $window)")
    if "sel" not in found:
        raise ValueError(f"query for {signal}: must contain $sel (the pods in scope)")


# One PromQL label matcher: a label name (or a quoted UTF-8 name), an operator, a quoted string.
_STRING = r""""(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'|`[^`]*`"""
_MATCHER = rf"""\s*(?:[a-zA-Z_][a-zA-Z0-9_]*|"(?:[^"\\]|\\.)*")\s*(?:=~|!~|!=|=)\s*(?:{_STRING})\s*"""
_MATCHERS = re.compile(rf"(?:{_MATCHER}(?:,{_MATCHER})*,?)?\s*", re.DOTALL)


def check_matchers(text: str) -> str:
    """Validate a list of PromQL label matchers without braces, e.g. ``a="b",c=~"d.*"`` (may be empty).

    Raises:
        ValueError: not comma-separated ``name(=|!=|=~|!~)"value"`` matchers.
    """
    if not _MATCHERS.fullmatch(text):
        raise ValueError(f"'{text}' is not a list of PromQL label matchers without braces, "
                         'e.g. namespace="prod",pod=~"llm-.*"')
    return text


@functools.lru_cache(maxsize=16384)
def render(template: str, sel: str, window_s: float) -> str:
    """The template with ``$sel`` and ``$window`` (seconds, rendered in whole milliseconds) filled in.

    Kept for the last 16,384 inputs: a tick renders each signal for each service and variant over the
    same pods as the tick before (6,800 renderings at 100 services, ~0.3 s of a tick's CPU, issue 35);
    16,384 holds a 240-service daemon's (a 50-service shard's four times over), at ~1 kB each; past
    that the oldest are rendered again, the same strings.

    Raises:
        KeyError, ValueError: a placeholder other than ``$sel`` and ``$window`` (as ``Template.substitute``).
    """
    return Template(template).substitute(sel=sel, window=duration(window_s))


def duration(seconds: float) -> str:
    """A PromQL duration in milliseconds, e.g. ``2500ms`` (at least 1 ms)."""
    return f"{max(round(seconds * 1000), 1)}ms"


def quote(value: str) -> str:
    """A PromQL double-quoted string literal (Go escapes: backslash, double quote, newline, tab, CR)."""
    escaped = (value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n").replace("\t", "\\t")
               .replace("\r", "\\r"))
    return '"' + escaped + '"'


_RE2_SPECIAL = re.compile(r"([\\.+*?()|\[\]{}^$])")


def exact_alternation(values: list[str]) -> str:
    """An RE2 regex matching exactly one of ``values`` (Prometheus anchors ``=~`` matchers)."""
    return "|".join(map(escape_re2, sorted(values)))


@functools.lru_cache(maxsize=65536)
def escape_re2(value: str) -> str:
    """``value`` as an RE2 literal (its special characters backslash-escaped). Kept for the same pod names
    every tick: a 50-service tick escaped ~58,000 names one ``re.sub`` each (~0.3 s of its CPU, issue 35);
    65,536 holds a fleet's pods several times over at ~100 bytes each."""
    return _RE2_SPECIAL.sub(r"\\\1", value)


def matchers(*parts: str | None) -> str:
    """Join non-empty label-matcher lists with commas."""
    return ",".join(p.strip().strip(",") for p in parts if p and p.strip().strip(","))
