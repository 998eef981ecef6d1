"""The bundle ``autoscaler dashboards export --out DIR`` writes, and every query in it.

Layout (the interface others rely on)::

    DIR/dashboards/<uid>.json                    Grafana dashboard JSON, one per board (boards.py)
    DIR/provisioning/datasources/autoscaler.yaml a Prometheus datasource (uid ``prometheus``)
    DIR/provisioning/dashboards/autoscaler.yaml  a file provider reading DASHBOARDS_PATH
    DIR/rules/autoscaler-recording.yaml          recording rules (rules.py)
    DIR/rules/autoscaler-alerts.yaml             alerting rules (rules.py)

A stock Grafana loads it as it is with ``DIR/provisioning`` as its provisioning directory
(``GF_PATHS_PROVISIONING``) and ``DIR/dashboards`` mounted at ``DASHBOARDS_PATH``; a Prometheus
loads ``DIR/rules/*.yaml`` from its ``rule_files``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from grafana_foundation_sdk.cog.encoder import JSONEncoder

from autoscaler.config import FleetConfig
from autoscaler.dashboards.boards import BOARDS
from autoscaler.dashboards.rules import Alert, alert_groups, alerts, recording_groups

DASHBOARDS_PATH = "/var/lib/grafana/dashboards/autoscaler"
DEFAULT_OBJECTIVE = 0.99
"""Fraction of interactive requests within their objectives the burn-rate alerts defend (the
benchmarks rank a controller at 99 % interactive attainment)."""


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


def render(cfg: FleetConfig, objective: float = DEFAULT_OBJECTIVE,
           prometheus_url: str = "http://prometheus:9090") -> Bundle:
    """The bundle for the fleet ``cfg`` (SLO lines and error ratios from its services).

    Raises:
        ValueError: an objective outside (0.9306, 1), or a query set the bundle does not read.
    """
    files: dict[str, str] = {}
    panel_queries: list[tuple[str, str, str]] = []
    variable_queries: list[tuple[str, str]] = []
    for make in BOARDS:
        board = make(cfg)
        model = board.builder.build()
        uid = model.uid
        files[f"dashboards/{uid}.json"] = json.dumps(model, cls=JSONEncoder, indent=2, sort_keys=True) + "\n"
        panel_queries += [(uid, title, expr) for title, expr in board.queries]
        variable_queries += [(uid, v.query) for v in (model.templating.list_val or [])
                             if v.type_val == "query" and isinstance(v.query, str)]
    files["provisioning/datasources/autoscaler.yaml"] = _yaml({"apiVersion": 1, "datasources": [{
        "name": "Prometheus", "type": "prometheus", "uid": "prometheus", "access": "proxy", "url": prometheus_url,
        "isDefault": True}]})
    files["provisioning/dashboards/autoscaler.yaml"] = _yaml({"apiVersion": 1, "providers": [{
        "name": "autoscaler", "folder": "Autoscaler", "type": "file", "disableDeletion": False,
        "allowUiUpdates": False, "options": {"path": DASHBOARDS_PATH, "foldersFromFilesStructure": False}}]})
    recording = recording_groups(cfg)
    files["rules/autoscaler-recording.yaml"] = _yaml({"groups": recording})
    files["rules/autoscaler-alerts.yaml"] = _yaml({"groups": alert_groups(objective, cfg)})
    return Bundle(files, panel_queries, variable_queries,
                  [r for g in recording for r in g["rules"]], alerts(objective, cfg))


def write(bundle: Bundle, out: Path) -> list[Path]:
    """Write every file of ``bundle`` under ``out``; the paths written.

    Raises:
        OSError: ``out`` cannot be written.
    """
    paths = []
    for rel, text in bundle.files.items():
        path = out / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        paths.append(path)
    return paths
