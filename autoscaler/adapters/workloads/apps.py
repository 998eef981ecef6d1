"""apps/v1 Deployments and StatefulSets (``AppsV1Api``): the scale subresource is read and replaced
(``read/replace_namespaced_{deployment,stateful_set}_scale``); counts come from the object
(``spec.replicas``, 1 when unset as the API server defaults it; ``status.readyReplicas``, 0 when
unset), its pods from ``spec.selector.matchLabels``. With a watch cache attached (``Connector.attach``,
``kubernetes.watch``) the object and its pods are read from it, the Scale is the object's
``spec.replicas`` (1 when unset) at its resourceVersion (a Scale's resourceVersion is its object's),
and a write's answer goes back to the cache (``ObjectCache.wrote``)."""

from __future__ import annotations

from typing import Any, ClassVar

from kubernetes import client

from autoscaler.adapters.workloads.base import Connector, ObjectError, Scale, WorkloadState, selector_of
from autoscaler.config import Workload


def scale_body(name: str, namespace: str, replicas: int, resource_version: str | None) -> dict[str, Any]:
    """An ``autoscaling/v1`` Scale setting ``replicas`` at ``resource_version``."""
    return {"apiVersion": "autoscaling/v1", "kind": "Scale",
            "metadata": {"name": name, "namespace": namespace, "resourceVersion": resource_version},
            "spec": {"replicas": replicas}}


def v1_scale(name: str, namespace: str, replicas: int, resource_version: str | None) -> client.V1Scale:
    """``scale_body`` as the apps/v1 client's model."""
    return client.V1Scale(api_version="autoscaling/v1", kind="Scale",
                          metadata=client.V1ObjectMeta(name=name, namespace=namespace,
                                                       resource_version=resource_version),
                          spec=client.V1ScaleSpec(replicas=replicas))


def scale_of(s: client.V1Scale) -> Scale:
    """A ``Scale`` from the apps/v1 client's model (0 replicas when the spec has none)."""
    replicas = s.spec.replicas if s.spec is not None else None
    return Scale(int(replicas or 0), s.metadata.resource_version if s.metadata is not None else None)


def state_of_raw(obj: dict[str, Any]) -> WorkloadState:
    """``state_of`` from an apps/v1 object as served (JSON).

    Raises:
        ObjectError: its spec, status or metadata is not an object, or a count not an integer.
    """
    parts: list[dict[str, Any]] = []
    for key in ("metadata", "spec", "status"):
        part = obj.get(key)
        if part is not None and not isinstance(part, dict):
            raise ObjectError(f"{key} is {part!r}, not an object")
        parts.append(part or {})
    meta, spec, status = parts
    wanted, ready = spec.get("replicas", 1), status.get("readyReplicas") or 0
    if wanted is None:
        wanted = 1
    if not all(isinstance(x, int) and not isinstance(x, bool) for x in (wanted, ready)):
        raise ObjectError(f"spec.replicas {wanted!r} or status.readyReplicas {ready!r} is not a count")
    labels = (spec.get("selector") or {}).get("matchLabels")
    return WorkloadState(wanted, ready, meta.get("resourceVersion"), meta.get("uid"), selector_of(labels))


def state_of(obj: Any) -> WorkloadState:
    """A ``WorkloadState`` from an apps/v1 object as the client returns it."""
    wanted = int(obj.spec.replicas if obj.spec and obj.spec.replicas is not None else 1)
    ready = int((obj.status.ready_replicas if obj.status else None) or 0)
    labels = obj.spec.selector.match_labels if obj.spec and obj.spec.selector else None
    meta = obj.metadata
    return WorkloadState(wanted, ready, meta.resource_version if meta else None, meta.uid if meta else None,
                         selector_of(labels))


class DeploymentConnector(Connector):
    """A Deployment (module docstring)."""

    kind: ClassVar[str] = "Deployment"
    default_api_version: ClassVar[str | None] = "apps/v1"
    default_plural: ClassVar[str | None] = "deployments"
    removal_order: ClassVar[str] = ""  # its ReplicaSet removes the lowest pod-deletion-cost first (1.22+)

    def __init__(self, api: client.ApiClient, workload: Workload, namespace: str, quiet_s: float = 0.0) -> None:
        super().__init__(api, workload, namespace, quiet_s)
        self.apps = client.AppsV1Api(api)

    def read_scale(self, fresh: bool = False) -> Scale:
        """``spec.replicas`` and resourceVersion of the Deployment's scale subresource (from the cache
        unless ``fresh``)."""
        if self.cached is not None and not fresh:
            st = state_of_raw(self.cached_object())
            return Scale(st.desired, st.resource_version)
        return scale_of(self._read_scale())

    def _read_scale(self) -> client.V1Scale:
        return self.apps.read_namespaced_deployment_scale(self.name, self.namespace)

    def _replace_scale(self, body: client.V1Scale) -> client.V1Scale:
        return self.apps.replace_namespaced_deployment_scale(self.name, self.namespace, body)

    def _read(self) -> Any:
        return self.apps.read_namespaced_deployment(self.name, self.namespace)

    def scale(self, replicas: int, resource_version: str | None) -> None:
        """Replace the scale subresource (409 when ``resource_version`` is stale); the answer goes to
        the cache, when attached."""
        answer = self._replace_scale(v1_scale(self.name, self.namespace, replicas, resource_version))
        if self.cached is not None:
            meta = getattr(answer, "metadata", None)
            self.cached.wrote(self.name, getattr(meta, "resource_version", None), {"spec": {"replicas": replicas}})

    def state(self) -> WorkloadState:
        """One read of the Deployment (from the cache, when attached)."""
        if self.cached is not None:
            return state_of_raw(self.cached_object())
        return state_of(self._read())


class StatefulSetConnector(DeploymentConnector):
    """A StatefulSet (module docstring)."""

    kind: ClassVar[str] = "StatefulSet"
    default_plural: ClassVar[str | None] = "statefulsets"
    removal_order: ClassVar[str] = "the highest ordinal first (the StatefulSet controller reads no pod-deletion-cost)"

    def _read_scale(self) -> client.V1Scale:
        return self.apps.read_namespaced_stateful_set_scale(self.name, self.namespace)

    def _replace_scale(self, body: client.V1Scale) -> client.V1Scale:
        return self.apps.replace_namespaced_stateful_set_scale(self.name, self.namespace, body)

    def _read(self) -> Any:
        return self.apps.read_namespaced_stateful_set(self.name, self.namespace)
