"""The fleet file's schema (pydantic), one module per section.

``fleet`` (services, variants, SLOs, the whole ``FleetConfig``), ``engine`` (the vLLM limits of each
replica), ``control`` (the loop and its
controllers), ``prometheus`` (the live metrics source), ``kubernetes`` (where the daemon writes),
``simulator`` (the embedded simulator); reading
and validating a file is ``autoscaler.config.loading`` (``load_config``, ``parse_config``,
``default_config``), which also checks the variants against the performance profiles.
"""

from autoscaler.config.base import MAX_INT, Strict
from autoscaler.config.control import (
    ADMISSION_MODES,
    AdmissionConfig,
    ControllerConfig,
    ForecastConfig,
    GuardConfig,
    PIDConfig,
    SetpointSignal,
)
from autoscaler.config.engine import EngineConfig
from autoscaler.config.fleet import (
    SLO,
    DynamoDisagg,
    FleetConfig,
    KVTransfer,
    PDRatio,
    Roles,
    Service,
    TypicalRequest,
    Variant,
)
from autoscaler.config.kubernetes import KubernetesConfig, LeaseConfig, Workload
from autoscaler.config.prometheus import (
    BasicAuth,
    PrometheusConfig,
    QuerySetName,
    ServiceSelectors,
    VariantSelectors,
)
from autoscaler.config.simulator import ClientConfig, Crash, GatewayConfig, SimulatorConfig

__all__ = [
    "ADMISSION_MODES", "MAX_INT", "SLO", "AdmissionConfig", "BasicAuth", "ClientConfig", "ControllerConfig", "Crash",
    "DynamoDisagg", "EngineConfig", "FleetConfig", "ForecastConfig", "GatewayConfig", "GuardConfig", "KVTransfer",
    "KubernetesConfig",
    "LeaseConfig", "PDRatio", "PIDConfig", "PrometheusConfig",
    "QuerySetName", "Roles", "Service", "ServiceSelectors", "SetpointSignal",
    "SimulatorConfig", "Strict", "TypicalRequest", "Variant", "VariantSelectors", "Workload",
]
