"""LeaderWorkerSet (``leaderworkerset.x-k8s.io/v1``, ``leaderworkersets``): one replica is one group
(a leader pod and ``size - 1`` workers). Its CRD has a scale subresource (specpath
``.spec.replicas``, statuspath ``.status.replicas``, selectorpath ``.status.hpaPodSelector``, which
selects the leader pods only); ready counts are ``status.readyReplicas`` (groups ready); the pods of
every group carry the label ``leaderworkerset.sigs.k8s.io/name=<name>`` (``SetNameLabelKey``), so a
worker that cannot be placed counts as pending too, not only a leader.

Source: kubernetes-sigs/lws v0.9.0 (the same in v0.7.0 and v0.8.0):
``api/leaderworkerset/v1/leaderworkerset_types.go`` (``SetNameLabelKey``, ``LeaderWorkerSetStatus``,
the ``+kubebuilder:subresource:scale`` marker), ``groupversion_info.go`` (group and version) and
``config/crd/bases/leaderworkerset.x-k8s.io_leaderworkersets.yaml`` (plural, ``labelSelectorPath``).
"""

from __future__ import annotations

from typing import Any, ClassVar

from autoscaler.adapters.workloads.scale import ScaleConnector

NAME_LABEL = "leaderworkerset.sigs.k8s.io/name"
"""``SetNameLabelKey``: on every pod (leader and workers) of the LeaderWorkerSet."""


class LeaderWorkerSetConnector(ScaleConnector):
    """A LeaderWorkerSet (module docstring)."""

    kind: ClassVar[str] = "LeaderWorkerSet"
    default_api_version: ClassVar[str | None] = "leaderworkerset.x-k8s.io/v1"
    default_plural: ClassVar[str | None] = "leaderworkersets"
    removal_order: ClassVar[str] = "the groups of the highest index first (its leaders are a StatefulSet's pods)"

    def selector(self, obj: dict[str, Any]) -> dict[str, str] | None:
        """Every pod of every group: ``leaderworkerset.sigs.k8s.io/name=<name>``."""
        return {NAME_LABEL: self.name}
