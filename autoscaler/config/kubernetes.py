"""Fleet-file section ``kubernetes``: where the daemon (``autoscaler run``) writes, and its lease."""

from __future__ import annotations

import re

from pydantic import Field, StrictBool, ValidationInfo, field_validator, model_validator

from autoscaler.config.base import MIN_WAIT_S, Strict, check_name

_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
DNS_LABEL = re.compile(_LABEL)
"""A Kubernetes DNS-1123 label (a namespace's name, at most 63 characters)."""
DNS_SUBDOMAIN = re.compile(rf"{_LABEL}(\.{_LABEL})*")
"""A Kubernetes DNS-1123 subdomain (most objects' names, at most 253 characters)."""


def _object_name(v: str, what: str) -> str:
    if len(v) > 253 or not DNS_SUBDOMAIN.fullmatch(v):
        raise ValueError(f"{what} '{v}' is not a valid Kubernetes object name (lower-case letters, digits, '-', '.')")
    return v


MAX_IDENTITY = 128
"""The longest leader identity: it is the Lease's ``holderIdentity`` and every Event's
``reportingInstance``, which the API server refuses beyond 128 characters (``ReportingInstanceLengthLimit``
in kubernetes ``pkg/apis/core/validation/events.go``), a label of the daemon's own metrics and part of
its User-Agent header."""
_IDENTITY = re.compile(r"[!-~]+")  # visible ASCII: a header value and a label, never a newline or a space


def check_identity(value: str, where: str) -> str:
    """``value`` if it can name the daemon (1 to ``MAX_IDENTITY`` visible ASCII characters, as a pod's
    name or HOST-PID is), else ValueError naming ``where`` it came from (``--identity``, ``$POD_NAME``)."""
    if not (_IDENTITY.fullmatch(value) and len(value) <= MAX_IDENTITY):
        shown = value if len(value) <= 60 else value[:57] + "..."
        raise ValueError(f"{where} {shown!r} cannot name the daemon: 1 to {MAX_IDENTITY} visible ASCII "
                         f"characters (no space or control character), got {len(value)} characters")
    return value


KIND = re.compile(r"[A-Z][A-Za-z0-9]{0,62}")
"""A Kubernetes kind (CamelCase)."""


class Workload(Strict):
    """The workload whose replicas are one variant's.

    Attributes:
        kind: the workload's kind. The kinds with a connector (``autoscaler.adapters.workloads``:
            ``Deployment``, ``StatefulSet``, ``LeaderWorkerSet``, ``InferenceService``) know their
            API version and plural; any other kind is a custom resource with a scale subresource and
            needs ``api_version`` and ``plural``. Which kinds are known is the connectors' registry's
            to say: an unknown kind without them is refused when the daemon starts (one line).
        name: its name; default ``<service>-<variant>`` (the default Prometheus selectors' convention).
        api_version, plural: a custom resource's ``group/version`` and plural name (a known kind's
            may be given only as they are).
    """

    kind: str = "Deployment"
    name: str | None = None
    api_version: str | None = None
    plural: str | None = None

    @field_validator("name")
    @classmethod
    def _name(cls, v: str | None) -> str | None:
        return v if v is None else _object_name(v, "name")

    @field_validator("kind")
    @classmethod
    def _kind(cls, v: str) -> str:
        if not KIND.fullmatch(v):
            raise ValueError(f"kind '{v}' is not a Kubernetes kind (CamelCase letters and digits, e.g. Deployment)")
        return v

    @model_validator(mode="after")
    def _custom(self) -> Workload:
        if self.api_version is not None and not re.fullmatch(rf"{DNS_SUBDOMAIN.pattern}/v[0-9a-z]+", self.api_version):
            raise ValueError(f"kind {self.kind}: api_version '{self.api_version}' is not group/version (lowercase, "
                             "e.g. leaderworkerset.x-k8s.io/v1)")
        if self.plural is not None and not DNS_LABEL.fullmatch(self.plural):
            raise ValueError(f"kind {self.kind}: plural '{self.plural}' is not a resource's plural name (lowercase, "
                             "e.g. leaderworkersets)")
        if (self.api_version is None) != (self.plural is None):
            raise ValueError(f"kind {self.kind}: a custom resource needs api_version (group/version, e.g. "
                             "leaderworkerset.x-k8s.io/v1) and plural (e.g. leaderworkersets), both or neither")
        return self


JITTER_FACTOR = 1.2
"""client-go ``tools/leaderelection.JitterFactor``: retries wait up to 1.2x ``retry_s``, so a renewal
deadline at or below that could pass between two tries."""


class LeaseConfig(Strict):
    """Leader election on a ``coordination.k8s.io/v1`` Lease: one daemon of several actuates.

    Attributes:
        name: the Lease's name, in ``KubernetesConfig.namespace_self``.
        duration_s: how long a leader's claim lasts without renewal; a follower takes over after it.
        renew_s: a leader that could not renew for this long stops leading (< duration_s).
        retry_s: how often candidates try to acquire and the leader renews (< renew_s).

    Defaults are client-go's ``LeaderElectionConfig`` usual 15 / 10 / 2 s. ``duration_s`` is at least
    1 s, the others at least ``MIN_WAIT_S``. As client-go's ``NewLeaderElector`` (tools/leaderelection)
    requires, ``renew_s`` exceeds ``JITTER_FACTOR`` x ``retry_s``; and since the Lease holds the duration
    as whole seconds, truncated as client-go writes it, ``renew_s`` is below ``int(duration_s)``: the
    old leader stops writing before a follower may take over.
    """

    name: str = "autoscaler-leader"
    duration_s: float = Field(default=15.0, ge=1, le=3600)
    renew_s: float = Field(default=10.0, ge=MIN_WAIT_S, le=3600)
    retry_s: float = Field(default=2.0, ge=MIN_WAIT_S, le=3600)

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        return _object_name(v, "lease name")

    @model_validator(mode="after")
    def _order(self) -> LeaseConfig:
        if not JITTER_FACTOR * self.retry_s < self.renew_s < int(self.duration_s):
            raise ValueError(f"need {JITTER_FACTOR:g} x retry_s < renew_s < duration_s in whole seconds "
                             f"(client-go's rule; the Lease holds {int(self.duration_s)} s), got retry_s "
                             f"{self.retry_s:g}, renew_s {self.renew_s:g}, duration_s {self.duration_s:g}")
        return self


MAX_SHARDS = 1024
"""The most shards: each is a Lease every daemon reads every ``lease.retry_s``, so a thousand of them
is already a few hundred reads a second per daemon at the default 2 s."""


class KubernetesConfig(Strict):
    """Where ``autoscaler run`` writes.

    Attributes:
        namespace: the namespace of the serving workloads, their pods and the admission ConfigMaps.
        namespace_self: the daemon's own namespace (its Lease and Events about itself); default: the
            pod's namespace in-cluster, else ``namespace``. Both are DNS-1123 labels (at most 63
            characters), as Kubernetes requires of a namespace's name.
        workloads: service -> variant -> ``Workload``; a variant left out is the Deployment
            ``<service>-<variant>``.
        conflict_retries: how many times a write that met a 409 (the object changed since it was
            read) is re-read and retried within one tick.
        lease: leader election (``LeaseConfig``).
        admission_configmap: the name of a service's admission ConfigMap, ``{service}`` replaced.
        admission_heartbeat_s: a service's admission ConfigMap is written when its thresholds or ITL
            budget change, and otherwise once this long after its last write, seconds (60: the
            document's ``updated_unix_s`` is then at most this plus one tick old while a leader lives;
            a steady fleet of N services sends ~N * tick_s / 60 ConfigMap writes a tick instead of N
            GETs and N PUTs). 0 writes it at every publish (every tick), as before issue 35.
        pending_timeout_s: a variant whose pods have stayed unschedulable (Pending, no node fits:
            no GPU of its kind free) this long is marked unavailable: the loop caps it at its ready
            replicas and its demand goes to the other variants.
        pending_retry_s: how long the mark lasts; then the variant may be scaled up again (and is
            marked again if its pods still cannot be placed).
        other_writer_quiet_s: when a workload's replicas were changed by another writer (a person,
            a GitOps sync, another autoscaler) since the daemon's last write, the daemon leaves that
            variant alone until this long has passed without another such change, seconds.
        stop_grace_s: after SIGTERM, how long the tick in progress may take to finish, seconds;
            then the daemon releases the Lease and exits without it (10 s: with the Lease's and the
            server's own calls, each bounded by ``lease.renew_s / 2``, the exit fits in a pod's
            default ``terminationGracePeriodSeconds`` of 30 s).
        pod_deletion_cost: before a scale-down, annotate the pods the controller would remove first
            with ``controller.kubernetes.io/pod-deletion-cost`` (lowest first) so the ReplicaSet
            removes those; it needs ``patch`` on pods, which also permits changing a pod's image or
            labels, so a fleet may turn it off (the ReplicaSet then picks by its own rules).
        watch: read Deployments, StatefulSets and their pods from a watch cache (one LIST, then a
            WATCH per resource, in a thread: ``autoscaler.adapters.workloads.cache``) instead of GETs
            every tick, so a tick sends the API server its writes alone; off (the default): a GET per
            workload and a pod list per variant each tick, as before. Off by default because it needs
            ``list`` and ``watch`` on the namespace's Deployments (StatefulSets) and pods, which RBAC
            cannot restrict by name: more than the shipped least-privilege Role grants (docs/deploy.md).
        watch_stale_s: how long the watch may be down (a failed or hung connection, retried with
            backoff) before the workloads read from it count as unknown (the loop holds them),
            seconds. 30 s: two default ticks (``controller.tick_s`` 15), so one failed reconnect
            (the backoff starts at 0.8 s) never holds the fleet, while the loop never decides on
            counts more than two ticks behind what a GET would read.
        watch_timeout_s: each watch request's ``timeoutSeconds``: the server ends it then and it is
            opened again from the last resourceVersion (cheap: no list). It bounds how long a
            connection that went silent (a hung server) goes unnoticed: the read deadline is this
            plus 5 s. client-go's reflector picks 5 to 10 minutes; 60 s notices a hang sooner.
        shards: how many shards the services are split into (``autoscaler.adapters.shards``); each
            shard has its own Lease ``<lease.name>-shard-<i>`` and the daemons share them. 1 (the
            default): one Lease, ``lease.name`` itself, as before sharding.
        service_shards: service -> the shard it belongs to (0 to ``shards`` - 1), overriding the
            hash of its name (``autoscaler.adapters.shards.hash_shard``).
    """

    namespace: str = "default"
    namespace_self: str | None = None
    workloads: dict[str, dict[str, Workload]] = Field(default_factory=dict)
    conflict_retries: int = Field(default=3, ge=0, le=10)
    lease: LeaseConfig = LeaseConfig()
    admission_configmap: str = "autoscaler-admission-{service}"
    admission_heartbeat_s: float = Field(default=60.0, ge=0, le=86400)
    other_writer_quiet_s: float = Field(default=600.0, ge=0)
    pending_timeout_s: float = Field(default=300.0, gt=0)
    pending_retry_s: float = Field(default=900.0, gt=0)
    stop_grace_s: float = Field(default=10.0, gt=0, le=3600)
    pod_deletion_cost: StrictBool = True
    watch: StrictBool = False
    watch_stale_s: float = Field(default=30.0, gt=0)
    watch_timeout_s: int = Field(default=60, ge=1, le=3600)
    shards: int = Field(default=1, ge=1, le=MAX_SHARDS)
    service_shards: dict[str, int] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _shard_names(self) -> KubernetesConfig:
        for service, shard in self.service_shards.items():
            if isinstance(shard, bool) or not 0 <= shard < self.shards:
                raise ValueError(f"service_shards[{service}]: shard {shard!r} is not one of 0 to {self.shards - 1} "
                                 f"(kubernetes.shards is {self.shards})")
        if self.shards > 1:  # the derived Lease names must be object names too
            for suffix in (f"-shard-{self.shards - 1}", "-coordinator", "-members"):
                _object_name(self.lease.name + suffix, "lease name (with its shard suffix)")
        return self

    @field_validator("namespace", "namespace_self")
    @classmethod
    def _namespace(cls, v: str | None, info: ValidationInfo) -> str | None:
        return v if v is None else check_name(v, str(info.field_name), label=True)

    @field_validator("admission_configmap")
    @classmethod
    def _configmap(cls, v: str) -> str:
        try:
            name = v.format(service="svc")
        except (KeyError, IndexError, ValueError):
            raise ValueError(f"'{v}' may hold only the placeholder {{service}}") from None
        _object_name(name, "admission_configmap")
        return v

    def workload(self, service: str, variant: str) -> Workload:
        """The workload of ``variant`` of ``service`` (its name filled in)."""
        w = self.workloads.get(service, {}).get(variant, Workload())
        return w if w.name is not None else w.model_copy(update={"name": self.workload_name(service, variant)})

    def workload_name(self, service: str, variant: str) -> str:
        """The name of the workload of ``variant`` of ``service``: its ``name``, else ``<service>-<variant>``."""
        name = self.workloads.get(service, {}).get(variant, Workload()).name
        return f"{service}-{variant}" if name is None else name
