"""KServe InferenceService (``serving.kserve.io/v1beta1``, ``inferenceservices``): the replicas are its
predictor's, ``spec.predictor.minReplicas`` and ``maxReplicas`` (``ComponentExtensionSpec``). The
CRD has no scale subresource, so a write reads the object and replaces it (PUT) with both set to the
decided count and the resourceVersion the caller read: the predictor's own autoscaler (HPA, KPA,
KEDA) is pinned to it, and a write that raced another is HTTP 409. KServe reads ``maxReplicas`` 0 as
"no limit" (``validateReplicas``: minReplicas may exceed maxReplicas only when it is 0), so a scale
to 0 writes ``minReplicas: 0, maxReplicas: 1``: scale-to-zero allowed, at most one replica.
``minReplicas`` unset is 1 (``constants.DefaultMinReplicas``). A predictor pinned that way has that
many replicas; one that is not (``minReplicas`` below ``maxReplicas``, or either unset: KServe's own
autoscaler picks) has as many as its pods not being deleted, at least ``minReplicas``. A predictor
that is not an object, or bounds that are not counts, make the variant unknown for the tick
(``ObjectError``), never 0.

Readiness: ``InferenceServiceStatus`` carries conditions (``PredictorReady``, ``Ready``: all or
nothing) and ``modelStatus.copies.totalCopies``, whose meaning changed between releases (the
predictor's pods in every state up to v0.15, its Running and Ready pods from v0.16, whatever the
field's comment says), and no other count of ready replicas. Ready is therefore counted as KServe
v0.16+ counts it (``countReadyPods``), from the pods themselves: the predictor's pods (labels
``serving.kserve.io/inferenceservice=<name>`` and ``component=predictor``) that are Running with
their ``Ready`` condition True, not being deleted; pending pods are read from the same pods.

Source: kserve/kserve v0.20.0 (the latest release in the mirror read):
``pkg/apis/serving/v1beta1/component.go`` (``ComponentExtensionSpec.MinReplicas`` /
``MaxReplicas``, ``validateReplicas``), ``inference_service.go`` (``+kubebuilder:subresource:status``
only: no scale subresource), ``inference_service_status.go`` (``PropagateModelStatus``,
``countReadyPods``; v0.15.0 for the older ``totalCopies``) and ``pkg/constants/constants.go``
(``InferenceServicePodLabelKey``, ``KServiceComponentLabel``, ``DefaultMinReplicas``; the predictor's
objects carry both labels: ``pkg/controller/v1beta1/inferenceservice/components/predictor.go``).
"""

from __future__ import annotations

import copy
from typing import Any, ClassVar

from autoscaler.adapters.workloads.base import ObjectError, Scale, WorkloadState
from autoscaler.adapters.workloads.scale import ScaleConnector

ISVC_LABEL = "serving.kserve.io/inferenceservice"
"""``constants.InferenceServicePodLabelKey``: the InferenceService's name, on its pods."""
COMPONENT_LABEL = "component"
"""``constants.KServiceComponentLabel``: ``predictor``, ``transformer`` or ``explainer``."""
DEFAULT_MIN_REPLICAS = 1
"""``constants.DefaultMinReplicas``: the predictor's replicas when ``minReplicas`` is unset."""


def predictor(obj: dict[str, Any]) -> dict[str, Any]:
    """``spec.predictor`` of an InferenceService.

    Raises:
        ObjectError: ``spec`` or ``spec.predictor`` is not an object (KServe requires a predictor).
    """
    spec = obj.get("spec")
    found = spec.get("predictor") if isinstance(spec, dict) else None
    if not isinstance(found, dict):
        raise ObjectError(f"spec.predictor is {found!r}, not an object")
    return found


def _count(spec: dict[str, Any], key: str, default: int | None) -> int | None:
    x = spec.get(key)
    if x is None:
        return default
    if isinstance(x, bool) or not isinstance(x, int) or x < 0:
        raise ObjectError(f"spec.predictor.{key} is {x!r}, not a replica count")
    return x


def replica_bounds(obj: dict[str, Any]) -> tuple[int, int | None]:
    """``(minReplicas, maxReplicas)`` of the predictor: 1 for an unset minimum, None for an unset maximum.

    Raises:
        ObjectError: either is not a non-negative integer, or the predictor is not an object.
    """
    p = predictor(obj)
    lo = _count(p, "minReplicas", DEFAULT_MIN_REPLICAS)
    assert lo is not None
    return lo, _count(p, "maxReplicas", None)


def pinned_replicas(obj: dict[str, Any]) -> int | None:
    """The count the predictor is pinned to: ``minReplicas`` when ``maxReplicas`` equals it, or is 1
    over a minimum of 0 (a scale to zero as ``InferenceServiceConnector.scale`` writes it); None
    while KServe's own autoscaler picks a count between them."""
    lo, hi = replica_bounds(obj)
    return lo if hi == lo or (lo == 0 and hi == 1) else None


class InferenceServiceConnector(ScaleConnector):
    """A KServe InferenceService's predictor (module docstring)."""

    kind: ClassVar[str] = "InferenceService"
    default_api_version: ClassVar[str | None] = "serving.kserve.io/v1beta1"
    default_plural: ClassVar[str | None] = "inferenceservices"
    scale_subresource: ClassVar[bool] = False

    def where(self) -> str:
        """E.g. ``inferenceservices llm/x (API group serving.kserve.io)``: the object itself is written."""
        return f"{self.plural} {self.namespace}/{self.name} (API group {self.group})"

    def read_scale(self, fresh: bool = False) -> Scale:
        """The predictor's replicas (``replicas``) and the object's resourceVersion."""
        obj = self.object()
        return Scale(self.replicas(obj), (obj.get("metadata") or {}).get("resourceVersion"))

    def replicas(self, obj: dict[str, Any]) -> int:
        """The count it is pinned to (``pinned_replicas``); while KServe's autoscaler picks, its
        predictor pods that are not being deleted, at least ``minReplicas`` (what KServe runs now:
        the minimum alone would read a fleet KServe grew as the minimum, and a write below it as a
        scale-up).

        Raises:
            ObjectError: the predictor's bounds are malformed.
        """
        pinned = pinned_replicas(obj)
        if pinned is not None:
            return pinned
        selector = self.selector(obj)
        assert selector is not None
        live = sum(1 for pod in self.pods(selector) if pod.metadata.deletion_timestamp is None)
        return max(replica_bounds(obj)[0], live)

    def scale(self, replicas: int, resource_version: str | None) -> None:
        """Replace the object with the predictor's minReplicas and maxReplicas set (module docstring);
        409 when ``resource_version`` is stale."""
        obj = copy.deepcopy(self.object())
        obj.setdefault("metadata", {})["resourceVersion"] = resource_version
        spec = predictor(obj)
        spec["minReplicas"] = replicas
        spec["maxReplicas"] = max(replicas, 1)
        self.custom.replace_namespaced_custom_object(self.group, self.version, self.namespace, self.plural,
                                                     self.name, obj)

    def selector(self, obj: dict[str, Any]) -> dict[str, str] | None:
        """The predictor's pods."""
        return {ISVC_LABEL: self.name, COMPONENT_LABEL: "predictor"}

    def state(self) -> WorkloadState:
        """Desired from the spec, ready from the predictor's Ready pods (module docstring)."""
        obj = self.object()
        meta = obj.get("metadata") or {}
        selector = self.selector(obj)
        assert selector is not None
        ready = 0
        for pod in self.pods(selector):
            if pod.metadata.deletion_timestamp is not None or pod.status is None or pod.status.phase != "Running":
                continue
            if any(c.type == "Ready" and c.status == "True" for c in pod.status.conditions or []):
                ready += 1
        return WorkloadState(self.replicas(obj), ready, meta.get("resourceVersion"), meta.get("uid"), selector)
