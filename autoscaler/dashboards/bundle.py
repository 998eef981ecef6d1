"""The bundle ``autoscaler dashboards export --out DIR`` writes, and every query in it.

Layout (the interface others rely on)::

    DIR/dashboards/<uid>.json                    Grafana dashboard JSON, one per board (boards.py)
    DIR/provisioning/datasources/autoscaler.yaml a Prometheus datasource (uid ``autoscaler-prometheus``)
    DIR/provisioning/dashboards/autoscaler.yaml  a file provider reading DASHBOARDS_PATH
    DIR/rules/autoscaler-recording.yaml          recording rules (rules.py)
    DIR/rules/autoscaler-alerts.yaml             alerting rules (rules.py)
    DIR/kubernetes/prometheusrule.yaml           the same rules as a prometheus-operator PrometheusRule
    DIR/kubernetes/dashboards-configmap.yaml     the dashboards as a ConfigMap for Grafana's sidecar

A stock Grafana loads it as it is with ``DIR/provisioning`` as its provisioning directory
(``GF_PATHS_PROVISIONING``) and ``DIR/dashboards`` mounted at ``DASHBOARDS_PATH``; a Prometheus
loads ``DIR/rules/*.yaml`` from its ``rule_files``. On a cluster with prometheus-operator and
Grafana's dashboard sidecar (kube-prometheus-stack), ``kubectl apply -n monitoring -f DIR/kubernetes/``
(the PrometheusRule may need the labels the operator's ``ruleSelector`` matches, e.g. ``release``).
The provisioned datasource has its own uid (``autoscaler-prometheus``) and is not the default, so
it sits beside an existing one.
"""

from __future__ import annotations

import json
import urllib.parse
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from grafana_foundation_sdk.cog.encoder import JSONEncoder

from autoscaler.config import FleetConfig
from autoscaler.dashboards.boards import BOARDS
from autoscaler.dashboards.rules import RUNBOOKS_URL, Alert, alert_groups, alerts, recording_groups
from autoscaler.files import write_text

DASHBOARDS_PATH = "/var/lib/grafana/dashboards/autoscaler"
DEFAULT_OBJECTIVE = 0.99
"""Fraction of interactive requests within their objectives the burn-rate alerts defend (the
benchmarks rank a controller at 99 % interactive attainment)."""
SCHEMA_VERSION = 39
"""The dashboards' ``schemaVersion``: Grafana 10.4's and 11's (vLLM's own dashboards are at 39), so a
current Grafana runs no migration on them. grafana-foundation-sdk writes 36; the migrations from 36 to
39 touch no field these dashboards use (37: a legend hidden by ``displayMode`` becomes ``showLegend``,
here always shown as a list; 38: the table panel's ``displayMode``; 39: the ``timeSeriesTable``
transformation), so the number is the only change."""


@dataclass(frozen=True)
class Bundle:
    """The rendered bundle: file path (relative to DIR) -> text, and the queries to check."""

    files: dict[str, str]
    panel_queries: list[tuple[str, str, str]]
    """``(dashboard uid, panel title, PromQL with Grafana variables)`` of every panel and annotation."""
    variable_queries: list[tuple[str, str]]
    """``(dashboard uid, label_values(...) query)`` of every template variable."""
    recording: list[dict[str, Any]]
    alerts: list[Alert]


def _yaml(doc: Any) -> str:
    return yaml.safe_dump(doc, sort_keys=False, width=120)


def render(cfg: FleetConfig, objective: float = DEFAULT_OBJECTIVE, prometheus_url: str | None = None,
           runbooks: str = RUNBOOKS_URL) -> Bundle:
    """The bundle for the fleet ``cfg`` (SLO lines and error ratios from its services) and the SLO
    ``objective`` (the alerts' error budget, the attainment panel's line); the datasource points at
    ``prometheus_url``, default the fleet's ``prometheus.url``, else ``http://prometheus:9090``; each
    alert's ``runbook_url`` at its heading in the page ``runbooks``.

    Raises:
        ValueError: an objective outside (0.9306, 1), a query set the bundle does not read, or a
            runbooks URL that is not an absolute http(s) URL.
    """
    url = prometheus_url or cfg.prometheus.url or "http://prometheus:9090"
    files: dict[str, str] = {}
    boards: dict[str, str] = {}
    panel_queries: list[tuple[str, str, str]] = []
    variable_queries: list[tuple[str, str]] = []
    for make in BOARDS:
        board = make(cfg, objective)
        model = board.builder.build()
        model.schema_version = SCHEMA_VERSION
        uid = model.uid
        assert uid is not None, board  # every board of boards.py sets its uid
        boards[f"{uid}.json"] = files[f"dashboards/{uid}.json"] = json.dumps(
            model, cls=JSONEncoder, indent=2, sort_keys=True) + "\n"
        panel_queries += [(uid, title, expr) for title, expr in board.queries]
        variable_queries += [(uid, v.query) for v in (model.templating.list_val or [])
                             if v.type_val == "query" and isinstance(v.query, str)]
    files["provisioning/datasources/autoscaler.yaml"] = _yaml({"apiVersion": 1, "datasources": [{
        "name": "Prometheus (autoscaler)", "type": "prometheus", "uid": "autoscaler-prometheus", "access": "proxy",
        **datasource_access(url), "isDefault": False}]})
    files["provisioning/dashboards/autoscaler.yaml"] = _yaml({"apiVersion": 1, "providers": [{
        "name": "autoscaler", "folder": "Autoscaler", "type": "file", "disableDeletion": False,
        "allowUiUpdates": False, "options": {"path": DASHBOARDS_PATH, "foldersFromFilesStructure": False}}]})
    recording = recording_groups(cfg)
    alerting = alert_groups(objective, cfg, runbooks)
    files["rules/autoscaler-recording.yaml"] = _yaml({"groups": recording})
    files["rules/autoscaler-alerts.yaml"] = _yaml({"groups": alerting})
    labels = {"app.kubernetes.io/name": "autoscaler", "app.kubernetes.io/component": "monitoring"}
    files["kubernetes/prometheusrule.yaml"] = _yaml({
        "apiVersion": "monitoring.coreos.com/v1", "kind": "PrometheusRule",
        "metadata": {"name": "autoscaler", "labels": labels}, "spec": {"groups": recording + alerting}})
    files["kubernetes/dashboards-configmap.yaml"] = _yaml({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "autoscaler-dashboards", "labels": {**labels, "grafana_dashboard": "1"}},
        "data": boards})
    return Bundle(files, panel_queries, variable_queries,
                  [r for g in recording for r in g["rules"]], alerts(objective, cfg))


BASIC_AUTH_ENV = ("PROMETHEUS_BASIC_AUTH_USER", "PROMETHEUS_BASIC_AUTH_PASSWORD")
"""The environment variables Grafana reads the datasource's basic-auth user and password from when
the Prometheus URL carried them (Grafana expands ``${VAR}`` in provisioning files)."""


def datasource_access(url: str) -> dict[str, Any]:
    """The datasource's ``url`` and, for a URL with ``user:password@``, basic auth read from the
    environment (``BASIC_AUTH_ENV``): a credential is never written into the bundle."""
    parts = urllib.parse.urlsplit(url)
    if parts.username is None and parts.password is None:
        return {"url": url}
    host = parts.hostname or ""
    host = f"[{host}]" if ":" in host else host
    netloc = host + (f":{parts.port}" if parts.port is not None else "")
    user, password = BASIC_AUTH_ENV
    return {"url": urllib.parse.urlunsplit(parts._replace(netloc=netloc)), "basicAuth": True,
            "basicAuthUser": f"${{{user}}}", "secureJsonData": {"basicAuthPassword": f"${{{password}}}"}}


MANIFEST = ".autoscaler-bundle"
"""The list of files the last export wrote under its folder, so the next one removes those it no
longer writes (and nothing else in the folder)."""


def write(bundle: Bundle, out: Path) -> list[Path]:
    """Write every file of ``bundle`` under ``out``, each atomically (``autoscaler.files.atomic``),
    after removing the files an earlier export listed in ``MANIFEST`` that this one does not write;
    the paths written.

    Raises:
        OSError: ``out`` cannot be written.
    """
    manifest = out / MANIFEST
    before = manifest.read_text().split("\n") if manifest.is_file() else []
    for rel in before:
        stale = out / rel
        # only a relative path inside ``out``: a manifest edited by hand must not delete elsewhere
        if (rel and rel not in bundle.files and not Path(rel).is_absolute() and ".." not in Path(rel).parts
                and stale.is_file()):
            stale.unlink()
    paths = []
    for rel, text in bundle.files.items():
        path = out / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        write_text(path, text)
        paths.append(path)
    write_text(manifest, "\n".join(sorted(bundle.files)) + "\n")
    return paths
