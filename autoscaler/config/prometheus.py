"""Fleet-file section ``prometheus``: where and how the loop reads a live Prometheus."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field, StrictBool, field_validator, model_validator

from autoscaler.config.base import MIN_WAIT_S, Strict, check_name
from autoscaler.promql import ROLE_LABELLINGS, RoleLabels, check_matchers, check_template
from autoscaler.urls import check_url

QuerySetName = Literal["auto", "vllm-0.11", "vllm-0.9.2", "vllm-pre-0.9.2", "sglang", "recorded", "vllm-0.33",
                       "vllm-pre-0.9"]
"""``autoscaler.promql``: ``auto`` detects each service's set; the last two are earlier names (``ALIASES``)."""


class BasicAuth(Strict):
    """HTTP basic auth for Prometheus; the password is read from a file (e.g. a mounted Secret)."""

    username: str
    password_file: Path


def _check_matchers(v: str | None) -> str | None:
    """A selector must be PromQL label matchers, else every query it is in fails (HTTP 400)."""
    return None if v is None else check_matchers(v)


class VariantSelectors(Strict):
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


class ServiceSelectors(Strict):
    """Label matchers of one service: ``service`` is ANDed into every query of the service
    (default ``model_name="<model>"``); ``variants`` by variant name."""

    service: str | None = None
    variants: dict[str, VariantSelectors] = Field(default_factory=dict)

    @field_validator("service")
    @classmethod
    def _matchers(cls, v: str | None) -> str | None:
        return _check_matchers(v)


class PrometheusConfig(Strict):
    """Where and how the loop reads a live Prometheus (``autoscaler dry-run`` / ``backtest``).

    Attributes:
        url: base URL, e.g. ``https://prometheus.monitoring:9090`` (``--prometheus-url`` overrides).
        query_set: default PromQL per signal (``autoscaler.promql``): ``auto`` (default) detects each
            service's set from the series its pods export; ``recorded`` reads vLLM 0.11+ through the
            recording rules ``autoscaler dashboards export`` writes (``rules/``).
        queries: signal -> PromQL template overriding the query set (``$sel``, ``$window``).
        namespace: Kubernetes namespace used by the default selectors (a DNS-1123 label, as
            Kubernetes requires of a namespace's name).
        pod_label: label that names a pod on the vLLM series.
        staleness_s: a pod whose newest sample is older than this is ignored, seconds (>= 1: samples
            come a scrape interval apart, seconds at the least); default 120 = two of Prometheus's
            default 1 m ``scrape_interval``. Set it to ~2 scrape intervals.
        timeout_s: per-query HTTP timeout, seconds (>= ``MIN_WAIT_S``, as ``deadline_s``).
        deadline_s: bound on all of one tick's queries together, wall seconds (default: ``timeout_s``,
            so a tick waits no longer on Prometheus than one query may); a query not answered by
            then is failed and its signal unknown (``adapters.prometheus``).
        bearer_token_file: file holding a bearer token (e.g. a service-account token).
        basic_auth: username and password file.
        ca_file: CA bundle to verify the server's certificate.
        tls_verify: False disables certificate verification.
        max_concurrency: queries in flight at once.
        batch: True (default): a source reading two or more services sends one query per query key
            (each signal, each per-pod inventory query, each gateway query) for all of them, each
            service's and variant's part tagged and split back (``adapters.prometheus``); False:
            one query per key per service and per variant, as before. One service: the same either way.
        aggregate: True (default), with ``batch``: each pod-scoped signal whose template has one of the
            shapes of ``adapters.prometheus_pods`` (every shipped query set's) is read as one per-pod
            aggregation over every valid pod of the tick, each service's and variant's value summed
            in the client from its pods' groups, so Prometheus evaluates one selector per term, not
            one per service and variant; False: each scope's query a branch of the batched ``or``.
        role_labels: how the pods of prefill/decode pools (``roles`` in the fleet file) are labelled, which
            the source selects each pool by (``autoscaler.promql.ROLE_LABELLINGS``): ``llm-d`` (default;
            ``llm_d_ai_role="prefill"|"decode"``), ``dynamo`` (Dynamo's component names,
            ``dynamo_component="prefill"|"backend"``) or ``dynamo-operator`` (Dynamo's operator pod label,
            ``nvidia_com_dynamo_sub_component_type="prefill"|"decode"``). The simulator's served metrics
            (``autoscaler.realtime``) and the exported dashboards follow it.
        selectors: service name -> label matchers (defaults above).
    """

    url: str | None = None
    query_set: QuerySetName = "auto"
    queries: dict[str, str] = Field(default_factory=dict)
    namespace: str = "default"
    pod_label: str = Field(default="pod", pattern=r"^[a-zA-Z_][a-zA-Z0-9_]*$")
    staleness_s: float = Field(default=120.0, ge=1)
    timeout_s: float = Field(default=10.0, ge=MIN_WAIT_S)
    deadline_s: float | None = Field(default=None, ge=MIN_WAIT_S, allow_inf_nan=False)
    bearer_token_file: Path | None = None
    basic_auth: BasicAuth | None = None
    ca_file: Path | None = None
    tls_verify: StrictBool = True
    max_concurrency: int = Field(default=8, ge=1)
    batch: StrictBool = True
    aggregate: StrictBool = True
    role_labels: Literal["llm-d", "dynamo", "dynamo-operator"] = "llm-d"
    selectors: dict[str, ServiceSelectors] = Field(default_factory=dict)

    @property
    def roles(self) -> RoleLabels:
        """The ``RoleLabels`` of ``role_labels``."""
        return ROLE_LABELLINGS[self.role_labels]

    @field_validator("url")
    @classmethod
    def _url(cls, v: str | None) -> str | None:
        if v is not None:
            check_url(v)
        return v

    @field_validator("namespace")
    @classmethod
    def _namespace(cls, v: str) -> str:
        return check_name(v, "namespace", label=True)

    @field_validator("queries")
    @classmethod
    def _templates(cls, v: dict[str, str]) -> dict[str, str]:
        for signal, template in v.items():
            check_template(signal, template)
        return v

    @model_validator(mode="after")
    def _one_auth(self) -> PrometheusConfig:
        if self.bearer_token_file is not None and self.basic_auth is not None:
            raise ValueError("set bearer_token_file or basic_auth, not both")
        return self

