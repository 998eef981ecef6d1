"""Any custom resource with a ``/scale`` subresource (``CustomObjectsApi``): the fleet file gives its
``api_version`` (``group/version``) and ``plural``. The scale is read and replaced with
``get/replace_namespaced_custom_object_scale``; counts come from the object (``spec.replicas``, 1
when unset; ``status.readyReplicas``, 0 when unset: the field apps/v1 and most scalable custom
resources use), its pods from the Scale's ``status.selector`` (the CRD's ``labelSelectorPath``),
read when an equality selector is there."""

from __future__ import annotations

from typing import Any, ClassVar

from kubernetes import client

from autoscaler.adapters.workloads.apps import scale_body
from autoscaler.adapters.workloads.base import Connector, Scale, WorkloadState, parse_selector
from autoscaler.config import Workload


def _int(x: Any, default: int) -> int:
    return int(x) if isinstance(x, int | float) and not isinstance(x, bool) else default


class ScaleConnector(Connector):
    """A custom resource with a scale subresource (module docstring)."""

    kind: ClassVar[str] = "*"

    def __init__(self, api: client.ApiClient, workload: Workload, namespace: str, quiet_s: float = 0.0) -> None:
        super().__init__(api, workload, namespace, quiet_s)
        self.custom = client.CustomObjectsApi(api)

    def _scale(self) -> dict[str, Any]:
        raw = self.custom.get_namespaced_custom_object_scale(self.group, self.version, self.namespace, self.plural,
                                                             self.name)
        return raw if isinstance(raw, dict) else {}

    def read_scale(self, fresh: bool = False) -> Scale:
        """``spec.replicas`` and resourceVersion of the scale subresource."""
        raw = self._scale()
        replicas = _int((raw.get("spec") or {}).get("replicas"), 0)
        return Scale(replicas, (raw.get("metadata") or {}).get("resourceVersion"))

    def scale(self, replicas: int, resource_version: str | None) -> None:
        """Replace the scale subresource (409 when ``resource_version`` is stale)."""
        body = scale_body(self.name, self.namespace, replicas, resource_version)
        self.custom.replace_namespaced_custom_object_scale(self.group, self.version, self.namespace, self.plural,
                                                           self.name, body)

    def object(self) -> dict[str, Any]:
        """The object as the API server holds it."""
        raw = self.custom.get_namespaced_custom_object(self.group, self.version, self.namespace, self.plural,
                                                       self.name)
        return raw if isinstance(raw, dict) else {}

    def selector(self, obj: dict[str, Any]) -> dict[str, str] | None:
        """The labels of the workload's pods: the Scale's ``status.selector``."""
        return parse_selector((self._scale().get("status") or {}).get("selector"))

    def state(self) -> WorkloadState:
        """Counts from the object, pods from ``selector``."""
        obj = self.object()
        meta, spec, status = (obj.get(k) or {} for k in ("metadata", "spec", "status"))
        return WorkloadState(_int(spec.get("replicas"), 1), _int(status.get("readyReplicas"), 0),
                             meta.get("resourceVersion"), meta.get("uid"), self.selector(obj))
