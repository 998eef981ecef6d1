"""Shared fixtures: small fleets built with ``parse_config`` and the path of the shared real data."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from support.paths import DATA_DIR

from autoscaler.config import FleetConfig
from autoscaler.config.loading import parse_config

SLO = {"interactive": {"ttft_s": 2.0, "itl_s": 0.1}, "batch": {"ttft_s": 20.0, "itl_s": 0.25}}


def _fleet(
    replicas: int = 1,
    *,
    min_replicas: int | None = None,
    max_replicas: int | None = None,
    kv_cache_tokens: int = 400_000,
    price_per_gpu_hour: float = 2.0,
    gpus_per_replica: int = 1,
    startup_s: float = 10.0,
    crashes: list[dict[str, Any]] | None = None,
    client_timeout_s: float = 600.0,
    max_model_len: int | None = None,
    profile: str = "llama-3-8b/h100-sxm",
    controller: dict[str, Any] | None = None,
    simulator: dict[str, Any] | None = None,
    engine: dict[str, Any] | None = None,
) -> FleetConfig:
    """One service ``svc`` with one variant ``h100``; ``replicas`` ready at t=0; every start is cold.

    ``max_model_len`` defaults to the smaller of 32768 and the KV capacity less one 16-token block
    (a longer one is invalid: config requires room for one max-length sequence plus a block);
    ``simulator`` adds keys to the ``simulator`` section (``clients``, ``gateway``...), ``engine`` is the
    ``engine`` section.
    """
    if max_model_len is None:
        max_model_len = min(32768, kv_cache_tokens - 16)
    v = {
        "name": "h100",
        "gpu": "H100-SXM",
        "gpus_per_replica": gpus_per_replica,
        "price_per_gpu_hour": price_per_gpu_hour,
        "min_replicas": replicas if min_replicas is None else min_replicas,
        "max_replicas": replicas if max_replicas is None else max_replicas,
        "initial_replicas": replicas,
        "startup_cold_s": startup_s,
        "startup_warm_s": startup_s,
        "warm_nodes": 0,
        "kv_cache_tokens": kv_cache_tokens,
        "profile": profile,
    }
    doc: dict[str, Any] = {
        "services": [{"name": "svc", "model": "m", "max_model_len": max_model_len, "slo": SLO, "variants": [v]}],
        "simulator": {"client_timeout_s": client_timeout_s, "crashes": crashes or [], **(simulator or {})},
    }
    if controller is not None:
        doc["controller"] = controller
    if engine is not None:
        doc["engine"] = engine
    return parse_config(doc, "<test fleet>")


INTEGRATION = Path(__file__).resolve().parent / "integration"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark every test under ``tests/integration/`` ``integration`` (the folder is the marker's definition)."""
    for item in items:
        if INTEGRATION in Path(str(item.path)).parents:
            item.add_marker(pytest.mark.integration)


def pytest_report_header() -> list[str]:
    """Say up front when the real-Prometheus tests cannot run here (they fail, naming what is missing)."""
    from autoscaler.faults.promserver import MISSING, PROMETHEUS, PROMTOOL

    return [MISSING.format(binary=b) for b in (PROMETHEUS, PROMTOOL) if not Path(b).is_file()]


@pytest.fixture
def make_fleet() -> Callable[..., FleetConfig]:
    """Factory for a one-service, one-variant fleet (see ``_fleet``)."""
    return _fleet


@pytest.fixture
def data_dir() -> Path:
    """The shared real data; it is always present in CI, so its absence is a failure, not a skip."""
    assert DATA_DIR.is_dir(), f"shared data directory missing: {DATA_DIR}"
    return DATA_DIR
