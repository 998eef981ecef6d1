"""One connector per kind of workload behind one contract (``base.WorkloadConnector``), and the
registry the daemon picks them from.

``CONNECTORS`` maps a ``kubernetes.workloads`` kind to its class; a kind not in it is any custom
resource with a scale subresource (``scale.ScaleConnector``), which then needs ``api_version`` and
``plural`` in the fleet file. Adding a kind is one class (a ``base.Connector`` subclass with
``read_scale``, ``scale`` and ``state``) and one row here.
"""

from __future__ import annotations

from kubernetes import client

from autoscaler.adapters.workloads.apps import DeploymentConnector, StatefulSetConnector
from autoscaler.adapters.workloads.base import (
    TRANSPORT_ERRORS,
    Connector,
    Scale,
    WorkloadConnector,
    WorkloadError,
    WorkloadState,
)
from autoscaler.adapters.workloads.kserve import InferenceServiceConnector
from autoscaler.adapters.workloads.lws import LeaderWorkerSetConnector
from autoscaler.adapters.workloads.scale import ScaleConnector
from autoscaler.config import Workload

CONNECTORS: dict[str, type[Connector]] = {
    "Deployment": DeploymentConnector,
    "StatefulSet": StatefulSetConnector,
    "LeaderWorkerSet": LeaderWorkerSetConnector,
    "InferenceService": InferenceServiceConnector,
}
"""Kind -> connector class (module docstring)."""


def connector(api: client.ApiClient, workload: Workload, namespace: str, quiet_s: float = 0.0) -> Connector:
    """The connector of ``workload`` (its name filled in).

    Raises:
        WorkloadError: a known kind given another API version or plural, or an unknown kind without
            ``api_version`` and ``plural`` (one line, naming the supported kinds).
    """
    return connector_class(workload)(api, workload, namespace, quiet_s)


def connector_class(workload: Workload) -> type[Connector]:
    """The class that serves ``workload``, its API version and plural checked (``Connector.resolve``);
    no call to the API server.

    Raises:
        WorkloadError: as ``connector``.
    """
    cls = CONNECTORS.get(workload.kind)
    if cls is None:
        if workload.api_version is None or workload.plural is None:
            raise WorkloadError(f"kind {workload.kind} is not one of {', '.join(CONNECTORS)}: a custom resource with "
                                "a scale subresource needs api_version (group/version) and plural in "
                                "kubernetes.workloads")
        cls = ScaleConnector
    cls.resolve(workload)
    return cls


__all__ = ["CONNECTORS", "TRANSPORT_ERRORS", "Connector", "Scale", "WorkloadConnector", "WorkloadError",
           "WorkloadState", "connector", "connector_class"]
