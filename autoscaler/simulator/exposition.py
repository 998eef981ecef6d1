"""The simulator as a Prometheus scrape target, and as backfilled history.

``SimCollector`` (a ``prometheus_client`` custom collector) yields, for every replica that serves
(ready or draining: a pod still loading weights has no metrics endpoint yet), the vLLM 0.33
metrics of ``autoscaler.simulator.metrics`` (names, help texts and buckets of vLLM 0.33.0
``vllm/v1/metrics/loggers.py``, METRICS.md) with the labels ``model_name``, ``engine="0"``,
``namespace``, ``pod`` (``<service>-<variant>-<replica id>``) and ``variant``, and in a fleet with
prefill/decode roles ``llm_d_ai_role`` (``prefill``, ``decode``, "" for an aggregated pod: ``ROLE_LABEL``),
or, when asked (``role_labels``), another convention's role label (``autoscaler.promql.ROLE_LABELLINGS``;
Dynamo's adds ``dynamo_namespace`` and ``dynamo_endpoint`` as its runtime does, on every pod);
and for every variant (of the roles' pools too)
the kube-state-metrics v2 Deployment series ``kube_deployment_spec_replicas`` (ready + starting)
and ``kube_deployment_status_replicas_ready`` (labels ``namespace``, ``deployment`` =
``<service>-<variant>``), as a cluster running kube-state-metrics exposes them; and for every
service the gateway's request counters as a current endpoint picker (llm-d-router v0.10.0,
``pkg/epp/metrics``) exports them, both counting every request: ``llm_d_epp_request_total`` (labels
``model_name``, ``target_model_name``, ``fairness_id`` = ``default-flow``, ``priority``) and its
deprecated ``inference_objective_request_total`` (``model_name``, ``target_model_name``,
``priority``); ``priority`` is the class's rank (sheddable 0, standard 1, critical 2: an
``InferenceObjective``'s priority with no threshold, ``adapters.gateway_api``). A service under
flow control (``simulator.gateway``) also exports the EPP's flow-control series (same file):
``llm_d_epp_flow_control_request_queue_duration_seconds`` (histogram, labels ``fairness_id``,
``priority``, ``outcome``, ``inference_pool`` = the service, ``model_name``, ``target_model_name``: the
seconds each request spent in flow control until its outcome, ``gateway.OUTCOMES``) and
``llm_d_epp_flow_control_queue_size`` (gauge, the same labels less ``outcome``: requests held now).

``OpenMetricsHistory`` records the collector at chosen unix times and writes one OpenMetrics file
with timestamps, grouped by series and in time order as ``promtool tsdb create-blocks-from
openmetrics`` requires, so a backtest can read hours of history without waiting for them.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.openmetrics.exposition import ALLOWUTF8, generate_latest
from prometheus_client.registry import Collector
from prometheus_client.samples import Sample
from prometheus_client.utils import floatToGoString

from autoscaler.promql import (
    DYNAMO_ENDPOINT,
    DYNAMO_ENDPOINT_LABEL,
    DYNAMO_NAMESPACE,
    DYNAMO_NAMESPACE_LABEL,
    GATEWAY_QUEUE_DURATION,
    GATEWAY_QUEUE_SIZE,
    GATEWAY_REQUESTS,
    KSM_READY_REPLICAS,
    KSM_SPEC_REPLICAS,
    ROLE_LABELLINGS,
    RoleLabels,
)
from autoscaler.promql import ROLE_LABEL as _ROLE_LABEL
from autoscaler.simulator.engine import DRAINING, READY
from autoscaler.simulator.fleet import FleetSimulator
from autoscaler.simulator.gateway import OUTCOMES
from autoscaler.simulator.metrics import (
    CACHE_CONFIG_INFO,
    E2E_SECONDS,
    GENERATION_TOKENS,
    ITERATION_TOKENS,
    ITL_SECONDS,
    KV_CACHE_USAGE_PERC,
    NUM_PREEMPTIONS,
    NUM_REQUESTS_RUNNING,
    NUM_REQUESTS_WAITING,
    PREFIX_CACHE_HITS,
    PREFIX_CACHE_QUERIES,
    PROMPT_TOKENS,
    REQUEST_GENERATION_TOKENS,
    REQUEST_PROMPT_TOKENS,
    REQUEST_SUCCESS,
    TPOT_SECONDS,
    TTFT_SECONDS,
    Histogram,
)

POD_LABELS = ("model_name", "engine", "namespace", "pod", "variant")
ROLE_LABEL = _ROLE_LABEL
"""The pod label ``llm-d.ai/role`` (``simulator.disagg``) as a Prometheus scraping the pods carries it
(``autoscaler.promql.ROLE_LABEL``, which the Prometheus source selects a pool's pods by)."""
RELEASE_NAMES: dict[str, dict[str, str]] = {
    "0.11": {name: name for name in (KV_CACHE_USAGE_PERC, PREFIX_CACHE_QUERIES, PREFIX_CACHE_HITS, ITL_SECONDS,
                                     TPOT_SECONDS)},
    "0.9.2": {ITL_SECONDS: "vllm:time_per_output_token_seconds", TPOT_SECONDS: ""},
    "pre-0.9.2": {ITL_SECONDS: "vllm:time_per_output_token_seconds", TPOT_SECONDS: "",
                  KV_CACHE_USAGE_PERC: "vllm:gpu_cache_usage_perc",
                  PREFIX_CACHE_QUERIES: "vllm:gpu_prefix_cache_queries_total",
                  PREFIX_CACHE_HITS: "vllm:gpu_prefix_cache_hits_total"},
}
"""vLLM release range -> the names its replicas export where they differ from 0.11's (``autoscaler.promql``
has the history): before 0.11 the per-step histogram was ``time_per_output_token_seconds`` and there was
no per-request one ("" : not exported); before 0.9.2 the KV gauge and prefix counters had ``gpu_`` names.
A test harness for ``prometheus.query_set: auto``; the default is 0.11's."""
DEFAULT_FAIRNESS_ID = "default-flow"
"""The flow a request without a fairness header joins (llm-d-router v0.10.0 ``pkg/epp/metadata/consts.go``)."""


def _histogram(name: str, doc: str, labels: tuple[str, ...] = POD_LABELS) -> HistogramMetricFamily:
    return HistogramMetricFamily(name, doc, labels=labels)


def _add_histogram(fam: HistogramMetricFamily, labels: list[str], h: Histogram, created: float | None = None) -> None:
    cum = h.cumulative()
    buckets = [(floatToGoString(b), c) for b, c in zip(h.bounds, cum, strict=False)]
    buckets.append(("+Inf", cum[-1]))
    fam.add_metric(labels, buckets, h.total)
    if created is not None:  # ``HistogramMetricFamily.add_metric`` takes no ``created``, as a counter's does
        fam.samples.append(Sample(fam.name + "_created", dict(zip(fam._labelnames, labels, strict=True)), created))


class SimCollector(Collector):
    """Metrics of a ``FleetSimulator``'s serving replicas (see the module docstring).

    Args:
        sim: the simulator.
        lock: held while reading ``sim`` (the simulation advances in another thread).
        namespace: value of the ``namespace`` label.
        release: the vLLM release range whose names the replicas export (``RELEASE_NAMES``).
        created: whether each pod's counters and histograms carry a ``_created`` sample, as a vLLM's
            do (``prometheus_client``'s default): the unix time, by ``clock``, at which the collector
            first saw the replica serve (a live scrape's view; a history recorded at chosen times has none).
        clock: unix seconds now.
        role_labels: how the pods say their role (``autoscaler.promql.ROLE_LABELLINGS``); None: llm-d's,
            and only in a fleet with prefill/decode roles (a fleet without keeps the label set it always
            had). Another convention labels every pod (an aggregated one with its ``aggregated`` value,
            "" leaving the label out), and Dynamo's adds ``dynamo_namespace="dynamo"`` and
            ``dynamo_endpoint="generate"`` (a vLLM worker's defaults), as Dynamo's runtime labels a
            worker's series.

    Raises:
        ValueError: an unknown ``release``.
    """

    def __init__(self, sim: FleetSimulator, lock: threading.Lock | None = None, namespace: str = "default",
                 release: str = "0.11", created: bool = False, clock: Callable[[], float] = time.time,
                 role_labels: RoleLabels | None = None) -> None:
        if release not in RELEASE_NAMES:
            raise ValueError(f"vLLM release '{release}' not exported (known: {', '.join(RELEASE_NAMES)})")
        self.sim = sim
        self.lock = lock or threading.Lock()
        self.namespace = namespace
        self.names = {**RELEASE_NAMES["0.11"], **RELEASE_NAMES[release]}
        self.created = created
        self.clock = clock
        self._first_seen: dict[int, float] = {}
        # a fleet with prefill/decode roles labels every pod with its role ("" for an aggregated one, which
        # a Prometheus stores without the label); a fleet without keeps the label set it always had
        self.role_labels = role_labels or ROLE_LABELLINGS["llm-d"]
        self.roles = role_labels not in (None, ROLE_LABELLINGS["llm-d"]) or any(
            svc.pd is not None for svc in sim.services.values())
        self.dynamo = self.role_labels.convention == "dynamo"
        extra = (DYNAMO_NAMESPACE_LABEL, DYNAMO_ENDPOINT_LABEL) if self.dynamo else ()
        self.pod_labels = (*POD_LABELS, self.role_labels.name, *extra) if self.roles else POD_LABELS

    def _created(self, rid: int) -> float | None:
        """The ``_created`` value of replica ``rid``'s series (None: not exported)."""
        if not self.created:
            return None
        return self._first_seen.setdefault(rid, self.clock())

    def describe(self) -> Iterable[Metric]:
        """Nothing up front: families depend on the fleet's state at scrape time."""
        return []

    def collect(self) -> Iterable[Metric]:
        """All families, read atomically under ``lock``."""
        with self.lock:
            return list(self._families())

    def _families(self) -> Iterator[Metric]:
        running = GaugeMetricFamily(NUM_REQUESTS_RUNNING, "Number of requests in model execution batches.",
                                    labels=self.pod_labels)
        waiting = GaugeMetricFamily(NUM_REQUESTS_WAITING, "Number of requests waiting to be processed.",
                                    labels=self.pod_labels)
        names = self.names
        kv = GaugeMetricFamily(names[KV_CACHE_USAGE_PERC], "KV-cache usage. 1 means 100 percent usage.",
                               labels=self.pod_labels)
        counters = {
            "prompt_tokens": CounterMetricFamily(PROMPT_TOKENS, "Number of prefill tokens processed.",
                                                 labels=self.pod_labels),
            "generation_tokens": CounterMetricFamily(GENERATION_TOKENS, "Number of generation tokens processed.",
                                                     labels=self.pod_labels),
            "prefix_queries": CounterMetricFamily(
                names[PREFIX_CACHE_QUERIES], "Prefix cache queries, in terms of number of queried tokens.",
                labels=self.pod_labels),
            "prefix_hits": CounterMetricFamily(names[PREFIX_CACHE_HITS], "Prefix cache hits, in terms of number of "
                                               "cached tokens.", labels=self.pod_labels),
            "preemptions": CounterMetricFamily(NUM_PREEMPTIONS, "Cumulative number of preemption from the engine.",
                                               labels=self.pod_labels),
        }
        success = CounterMetricFamily(REQUEST_SUCCESS, "Count of successfully processed requests.",
                                      labels=(*self.pod_labels, "finished_reason"))
        hists = {key: _histogram(name, doc, self.pod_labels) for key, (name, doc) in {
            "ttft": (TTFT_SECONDS, "Histogram of time to first token in seconds."),
            "itl": (names[ITL_SECONDS], "Histogram of inter-token latency in seconds."),
            "tpot": (names[TPOT_SECONDS], "Histogram of time_per_output_token_seconds per request."),
            "e2e": (E2E_SECONDS, "Histogram of e2e request latency in seconds."),
            "iteration_tokens": (ITERATION_TOKENS, "Histogram of number of tokens per engine_step."),
            "request_prompt_tokens": (REQUEST_PROMPT_TOKENS, "Number of prefill tokens processed."),
            "request_generation_tokens": (REQUEST_GENERATION_TOKENS, "Number of generation tokens processed."),
        }.items() if name}  # a name the release does not export is ""
        # vLLM labels its CacheConfig info with the config's fields and ``engine``, no ``model_name``
        # (vLLM 0.33 ``vllm/v1/metrics/loggers.py``); ``namespace``, ``pod`` and ``variant`` are the
        # scrape's target labels, on every series of the pod.
        cache_config = GaugeMetricFamily(CACHE_CONFIG_INFO, "Information of the LLMEngine CacheConfig",
                                         labels=(*self.pod_labels[1:], "block_size", "num_gpu_blocks"))
        spec = GaugeMetricFamily(KSM_SPEC_REPLICAS, "Number of desired pods for a deployment.",
                                 labels=("namespace", "deployment"))
        ready = GaugeMetricFamily(KSM_READY_REPLICAS, "The number of ready replicas per deployment.",
                                  labels=("namespace", "deployment"))
        newest, deprecated = GATEWAY_REQUESTS[0], GATEWAY_REQUESTS[1]
        gateway = CounterMetricFamily(newest.removesuffix("_total"), "Total number of processed requests.",
                                      labels=("model_name", "target_model_name", "fairness_id", "priority"))
        gateway_old = CounterMetricFamily(deprecated.removesuffix("_total"), "[Deprecated: Use "
                                          f"{newest}] Counter of inference objective requests broken out for "
                                          "each model and target model.",
                                          labels=("model_name", "target_model_name", "priority"))
        flow_labels = ("fairness_id", "priority", "inference_pool", "model_name", "target_model_name")
        queue_duration = HistogramMetricFamily(
            GATEWAY_QUEUE_DURATION[0],
            "Distribution of total time requests spend in the Flow Control layer (from enqueue to final outcome).",
            labels=(*flow_labels[:2], "outcome", *flow_labels[2:]))
        queue_size = GaugeMetricFamily(GATEWAY_QUEUE_SIZE[0], "Current number of requests actively held in the "
                                       "Flow Control queue.", labels=flow_labels)
        for svc in self.sim.services.values():
            if svc.flow is not None:
                pool = [svc.cfg.name, svc.cfg.model, svc.cfg.model]
                for rank in range(len(svc.flow.queued)):
                    queue_size.add_metric([DEFAULT_FAIRNESS_ID, str(rank), *pool], svc.flow.queued[rank])
                    for outcome in OUTCOMES:
                        h = svc.flow.queue_duration[outcome][rank]
                        if h.count:  # a labelled histogram's series appears with its first observation
                            _add_histogram(queue_duration, [DEFAULT_FAIRNESS_ID, str(rank), outcome, *pool], h)
            for rank, received in enumerate(svc.arrivals_by_priority):
                if received:  # as a labelled counter, a series appears with its first request
                    gateway.add_metric([svc.cfg.model, svc.cfg.model, DEFAULT_FAIRNESS_ID, str(rank)], received)
                    gateway_old.add_metric([svc.cfg.model, svc.cfg.model, str(rank)], received)
            for vname in svc.all_variants:
                c = svc.counts(vname)
                dep = [self.namespace, f"{svc.cfg.name}-{vname}"]
                spec.add_metric(dep, c.current)
                ready.add_metric(dep, c.ready)
            for r in svc.replicas:
                if r.state not in (READY, DRAINING):
                    continue
                r.refresh_gauges()
                m = r.metrics
                labels = [svc.cfg.model, "0", self.namespace, f"{svc.cfg.name}-{r.variant}-{r.rid}", r.variant]
                if self.roles:
                    labels.append(self.role_labels.value(r.role))
                if self.dynamo:
                    labels += [DYNAMO_NAMESPACE, DYNAMO_ENDPOINT]
                running.add_metric(labels, m.running)
                waiting.add_metric(labels, m.waiting)
                kv.add_metric(labels, m.kv_usage)
                cache_config.add_metric([*labels[1:], str(r.block), str(r.kv_cap // r.block)], 1.0)
                created = self._created(r.rid)
                for key, fam in counters.items():
                    fam.add_metric(labels, getattr(m, key), created=created)
                for reason, n in m.success.items():
                    success.add_metric([*labels, reason], n, created=created)
                for key, hist in hists.items():
                    _add_histogram(hist, labels, getattr(m, key), created)
        yield from (running, waiting, kv, cache_config, *counters.values(), success, *hists.values(), spec, ready,
                    gateway, gateway_old, queue_duration, queue_size)


class OpenMetricsHistory:
    """Samples of a collector at many unix times, written as one timestamped OpenMetrics file."""

    def __init__(self, collector: Collector) -> None:
        self.collector = collector
        # family name -> (type, help, series key -> [(unix time, samples of that series then)])
        self._families: dict[str, tuple[str, str, dict[tuple[tuple[str, str], ...], list[tuple[float, list]]]]] = {}

    def record(self, unix_s: float) -> None:
        """Take one scrape of the collector, stamped ``unix_s`` (seconds)."""
        for fam in self.collector.collect():
            _, _, series = self._families.setdefault(fam.name, (fam.type, fam.documentation, {}))
            now: dict[tuple[tuple[str, str], ...], list] = {}
            for s in fam.samples:
                key = tuple(sorted((k, v) for k, v in s.labels.items() if k != "le"))
                now.setdefault(key, []).append(s)
            for key, samples in now.items():
                series.setdefault(key, []).append((unix_s, samples))

    def write(self, path: Path) -> None:
        """Write every recorded sample (OpenMetrics text, ``# EOF`` terminated) to ``path``."""
        metrics = []
        for name, (typ, doc, series) in self._families.items():
            m = Metric(name, doc, typ)
            for key in sorted(series):
                for t, samples in series[key]:
                    for s in samples:
                        m.add_sample(s.name, s.labels, s.value, timestamp=t)
            metrics.append(m)

        class _Frozen(Collector):
            def collect(self) -> Iterable[Metric]:
                return metrics

        registry = CollectorRegistry()
        registry.register(_Frozen())
        # The default escaping rewrites the colon of ``vllm:`` sample names to ``_`` (prometheus_client 0.26).
        path.write_bytes(generate_latest(registry, escaping=ALLOWUTF8))
