"""Actuate stage: the interfaces to whatever runs the replicas and whatever admits the requests.

An ``Actuator`` sets a variant's replica count (the Kubernetes scale subresource, the simulator) and
says what happened, as the HPA records ``AbleToScale`` / ``FailedRescale``: ``applied``, or why not
(``conflict``: the object changed under us, HTTP 409, or another writer's change is being left alone;
``not_leader``: not written because this daemon may no longer lead by the time the write lands (the
write fence); ``forbidden``: no permission, HTTP 403;
``unreachable``: the API did not answer; ``invalid``: the request was refused as malformed; ``error``:
not a result the actuator gave but the loop's record of a write that raised, a bug: ``loop.runner``). An
``AdmissionSink`` publishes a service's admission thresholds to the gateway (priority -> longest
estimated queue wait, seconds, None for no limit) and answers the same way; a malformed set is
``invalid`` and the gateway keeps the last good one. The loop records every result
(``ServiceTick.actuation``), counts the failures and exports them
(``autoscaler_actuation_errors_total``); a failed write leaves the variant at its current count.

A result also says what the write found and did, so whoever records it (the daemon's Events) reads
it from the result: ``before`` / ``after`` (replicas, set when the write changed the workload's
replica count) and ``external`` (an ``ExternalChange``: another writer changed the count since this
actuator last wrote or read it).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Protocol


class ActuationStatus(StrEnum):
    """Outcome of one write (module docstring)."""

    APPLIED = "applied"
    CONFLICT = "conflict"
    NOT_LEADER = "not_leader"
    FORBIDDEN = "forbidden"
    UNREACHABLE = "unreachable"
    INVALID = "invalid"
    ERROR = "error"


@dataclass(frozen=True)
class ExternalChange:
    """Another writer's change of a variant's replica count, found by a read.

    Attributes:
        ours: replicas the actuator last wrote (or found at its first read).
        theirs: replicas the workload holds now.
        quiet_s: how long the actuator now leaves the variant alone, seconds.
    """

    ours: int
    theirs: int
    quiet_s: float


@dataclass(frozen=True)
class ActuationResult:
    """What one write did: its status and, when it failed, a one-line why; ``before`` and ``after``
    (replicas) when it changed the workload's count; ``external`` when the read before it found
    another writer's change (module docstring)."""

    status: ActuationStatus
    message: str = ""
    before: int | None = None
    after: int | None = None
    external: ExternalChange | None = None

    @property
    def ok(self) -> bool:
        """True when the write was applied."""
        return self.status is ActuationStatus.APPLIED

    @property
    def changed(self) -> bool:
        """True when the write changed the replica count (``before`` -> ``after``)."""
        return self.ok and self.before is not None and self.after is not None and self.before != self.after


APPLIED = ActuationResult(ActuationStatus.APPLIED)


class Actuator(Protocol):
    """Sets replica counts of a service's variants (one Deployment per variant)."""

    def scale(self, service: str, variant: str, replicas: int, remove_first: Sequence[str] = ()) -> ActuationResult:
        """Set the variant's desired replica count (the workload's scale subresource); on a scale-down,
        the pods named in ``remove_first`` go first, in order, where the platform allows a choice."""
        ...


class AdmissionSink(Protocol):
    """Publishes admission thresholds to the gateway of a service."""

    def publish(self, service: str, thresholds: Mapping[str, float | None],
                itl_budget: Mapping[str, int] | None = None) -> ActuationResult:
        """Make ``thresholds`` (priority -> longest estimated queue wait, seconds; None: no limit) the
        gateway's for ``service``, with ``itl_budget`` (variant -> requests in flight per replica,
        ``Decision.itl_budget``) where the controller learned one."""
        ...


class Drainer(Protocol):
    """Takes pods out of the routing of new requests (and back), so a scale-down can remove a pod
    once it holds nothing."""

    def cordon(self, service: str, pods: Sequence[str]) -> list[str]:
        """Stop routing new requests to ``pods``; returns those it could (a pod it cannot, it leaves)."""
        ...

    def uncordon(self, service: str, pods: Sequence[str]) -> None:
        """Route to ``pods`` again. The loop names one pod a call (``loop.drain``), so a call that raises
        says which pod did not go back."""
        ...
