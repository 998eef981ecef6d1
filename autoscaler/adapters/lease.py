"""Leader election on a ``coordination.k8s.io/v1`` Lease: of several daemons, one actuates.

The rule is client-go's (``tools/leaderelection``), on the official client's ``CoordinationV1Api``:
a candidate takes the Lease when it is absent, held by nobody, held by itself, or not renewed for
its ``leaseDurationSeconds`` (the configured duration truncated to whole seconds, as client-go writes
it; the configuration keeps ``renew_s`` below it); a leader renews
every ``retry_s`` and leads only while its last renewal is less than ``renew_s`` old (``leads()``,
checked at each write, so a renewal that hangs or fails ends leadership in time: every call has a
timeout of ``renew_s / 2``, and ``renew_s < duration_s`` leaves the old leader silent before anyone
may take over); ``release`` (on shutdown) clears the holder so a follower takes over at its
next try instead of after the lease duration. Every write replaces the Lease with the
resourceVersion it read, so of two candidates that read the same free Lease only one's write
succeeds (the other's is a 409).

Two processes started with one identity would both renew the Lease as theirs and both write. A
candidate remembers the renew times it wrote (the last few: a write whose answer was lost may still
have landed), and a Lease held under its identity with a renew time it did not write is not its
own: it waits for that lease to run out as it would for another holder's (a restarted pod finds its
dead predecessor's Lease, which runs out, and takes it then). Seeing such a renew time change (someone
alive renews under its name), or finding one after it wrote its own, it stops leading for good
(``duplicate``), logs it as an error, and the daemon exports it; so the second process never leads,
and the first, if it finds out, stops too.

Each acquisition is a new term: the candidate that takes the Lease writes ``leaseTransitions`` one
more than it read (client-go increments it when the holder changes; here also when a restarted
process takes back a Lease held under its own name, so that no two leaderships share a term), every
renewal and the release keep it, and ``term`` is the value this candidate leads under: the admission
documents' generations are built on it, so they increase across leaders.

A follower times the lease on its own clock from the moment it saw the holder's ``renewTime``
change, never from the timestamp itself, so a leader whose clock is skewed cannot make followers
take over early (client-go does the same). The client's ``kubernetes.leaderelection`` is not used:
its loop cannot be stopped nor the lease released, and its ``LeaseLock`` needs a client release
(37) whose dependencies are above this package's floors.

Two hooks serve the sharded daemon (``autoscaler.adapters.shards``) without changing the rule:
``try_acquire_or_renew(take=False)`` reads the Lease and renews it if this candidate leads, but does
not acquire it (``takeable`` then says whether it would have: the Lease is absent, free, or run out),
so a caller may defer an acquisition; and ``annotations`` are written into the Lease's
``metadata.annotations`` with every acquisition and renewal (the same write, under the same
resourceVersion: no extra call, and nobody but the holder can write them), while ``seen_annotations``
holds those the last read found. ``try_acquire_or_renew(lease=...)`` decides on a Lease the caller
already read (one LIST of every shard's Lease: ``ShardElection``) instead of reading it itself; the
write that follows is the same, under the listed object's resourceVersion (every item of a list
carries its own), so a Lease that changed since the list is a 409, a lost race, as after a GET.
``read_failed`` records a read the caller made for it that failed, as a failed attempt.
"""

from __future__ import annotations

import enum
import logging
import time
from collections import deque
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import urllib3
from kubernetes import client
from kubernetes.client.rest import ApiException

from autoscaler.config import LeaseConfig

log = logging.getLogger(__name__)


def micro_time(t: datetime) -> datetime:
    """``t``, moved 1 us later when it falls on a whole second: the client writes a datetime with
    ``isoformat()``, which then drops the fraction, and the API server parses a Lease's times as
    ``metav1.MicroTime`` (RFC3339Micro, six fraction digits required), refusing the write with a 400."""
    return t if t.microsecond else t + timedelta(microseconds=1)


class Unread(enum.Enum):
    """``READ``: the elector reads the Lease itself (``try_acquire_or_renew``'s default)."""

    READ = 0


READ = Unread.READ


class LeaderElector:
    """One candidate for the Lease ``name`` in ``namespace`` (module docstring).

    Args:
        api: a client.
        name, namespace: the Lease.
        identity: this candidate's name (the pod name in a cluster).
        cfg: durations (``kubernetes.lease``).
        clock: seconds, monotonic (tests pass their own).
    """

    def __init__(self, api: client.ApiClient, name: str, namespace: str, identity: str, cfg: LeaseConfig,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.api = client.CoordinationV1Api(api)
        self.name = name
        self.namespace = namespace
        self.identity = identity
        self.cfg = cfg
        self.clock = clock
        self.leading = False
        self.last_renewed: float | None = None
        self.timeout = cfg.renew_s / 2  # a hung call fails with time left to renew before renew_s
        self.holder: str | None = None
        self._seen: tuple[str | None, object] | None = None
        self._seen_at = 0.0
        self._mine: deque[datetime] = deque(maxlen=8)  # renew times this candidate wrote
        self.failing: str | None = None
        """Why the last attempt could not read or write the Lease (None: it could): readiness."""
        self.duplicate = False
        """Another process renews the Lease under this identity: this one never leads again."""
        self.term = 0
        """``leaseTransitions`` of the Lease as this candidate last took it (module docstring)."""
        self.takeable = False
        """The last attempt found the Lease absent, free or run out (module docstring: ``take``)."""
        self.annotations: dict[str, str] = {}
        """Written into the Lease with every acquisition and renewal (module docstring)."""
        self.seen_annotations: dict[str, str] = {}
        """The Lease's annotations as the last attempt read them."""

    def leads(self) -> bool:
        """Whether this candidate may write now: it won the Lease and renewed it less than
        ``renew_s`` ago (module docstring)."""
        return self.leading and self.last_renewed is not None and self.clock() - self.last_renewed < self.cfg.renew_s

    def lease_left_s(self) -> float:
        """Seconds this candidate may still write (``renew_s`` from its last renewal); 0 when not leading."""
        if not self.leads():
            return 0.0
        assert self.last_renewed is not None
        return self.cfg.renew_s - (self.clock() - self.last_renewed)

    def _spec(self, acquired: datetime | None, transitions: int, holder: str | None = None,
              duration: int | None = None) -> client.V1LeaseSpec:
        now = micro_time(datetime.now(UTC))
        return client.V1LeaseSpec(holder_identity=self.identity if holder is None else holder,
                                  lease_duration_seconds=duration or int(self.cfg.duration_s),
                                  acquire_time=micro_time(acquired) if acquired else now, renew_time=now,
                                  lease_transitions=transitions)

    def try_acquire_or_renew(self, take: bool = True, lease: client.V1Lease | Unread | None = READ) -> bool:
        """One attempt to take or keep the Lease; whether this candidate leads after it (an API
        server that does not answer counts as a failed renewal, never as a won election). With
        ``take`` False a Lease this candidate does not lead is only read (``takeable``). ``lease``: the
        Lease as the caller just read it (None: absent), instead of a GET (module docstring)."""
        now = self.clock()
        self.takeable = False
        try:
            won = self._try(now, take, lease)
            self.failing = None
            return won
        except (ApiException, urllib3.exceptions.HTTPError, OSError) as exc:
            return self._failed(exc, now)

    def read_failed(self, exc: ApiException | urllib3.exceptions.HTTPError | OSError) -> bool:
        """Record that the caller's read of this Lease (a LIST) failed with ``exc``: a failed attempt,
        as if this elector's own GET had failed; whether it still leads."""
        self.takeable = False
        return self._failed(exc, self.clock())

    def _failed(self, exc: ApiException | urllib3.exceptions.HTTPError | OSError, now: float) -> bool:
        if isinstance(exc, ApiException):
            self.failing = None if exc.status == 409 else f"lease {self.namespace}/{self.name}: HTTP {exc.status}"
            if exc.status in (401, 403):
                log.warning("lease %s/%s: forbidden (HTTP %s): grant get, update and create on coordination.k8s.io "
                            "leases in %s (deploy/base RBAC)", self.namespace, self.name, exc.status, self.namespace)
            elif exc.status != 409:  # a 409 is a lost race, not worth a warning
                log.warning("lease %s/%s: HTTP %s", self.namespace, self.name, exc.status)
        else:
            self.failing = f"lease {self.namespace}/{self.name}: {type(exc).__name__}"
            log.warning("lease %s/%s: %s", self.namespace, self.name, exc)
        return self._renew_failed(now)

    def _try(self, now: float, take: bool = True, listed: client.V1Lease | Unread | None = READ) -> bool:
        lease: client.V1Lease | None = None
        if not isinstance(listed, Unread):
            lease = listed
        else:
            try:
                lease = self.api.read_namespaced_lease(self.name, self.namespace, _request_timeout=self.timeout)
            except ApiException as exc:
                if exc.status != 404:
                    raise
        if lease is None:
            self.seen_annotations = {}
            if not take:
                self.takeable, self.leading = True, False
                return False
            body = client.V1Lease(metadata=client.V1ObjectMeta(name=self.name, namespace=self.namespace),
                                  spec=self._spec(None, 0))
            if self.annotations:
                body.metadata.annotations = dict(self.annotations)
            self._mine.append(body.spec.renew_time)
            self.api.create_namespaced_lease(self.namespace, body, _request_timeout=self.timeout)
            return self._won(now, 0)
        spec = lease.spec or client.V1LeaseSpec()
        self.seen_annotations = dict((lease.metadata and lease.metadata.annotations) or {})
        holder = spec.holder_identity or None
        seen = (holder, spec.renew_time)
        renewed_as_us = self._seen is not None and self._seen[0] == holder == self.identity and seen != self._seen
        if seen != self._seen:  # the holder renewed (or changed): its lease runs from now on our clock
            self._seen, self._seen_at = seen, now
        self.holder = holder
        ours = holder == self.identity and spec.renew_time in self._mine
        if holder == self.identity and not ours and (self._mine or renewed_as_us):
            if not self.duplicate:
                log.error("lease %s/%s: renewed as %s by another process (renew time %s, not ours): two daemons "
                          "share this identity; this one stops leading for good", self.namespace, self.name,
                          self.identity, spec.renew_time)
            self.duplicate = True
        if self.duplicate:
            self.leading = False
            return False
        # a dead holder's Lease of a day would leave no leader for a day: no longer than ours
        duration = min(float(spec.lease_duration_seconds or self.cfg.duration_s), self.cfg.duration_s)
        if holder is not None and not ours and now - self._seen_at < duration:
            self.leading = False
            return False
        renewing = self.leading and holder == self.identity
        if not renewing and not take:
            self.takeable, self.leading = True, False
            return False
        if self.annotations:
            lease.metadata.annotations = {**self.seen_annotations, **self.annotations}
        transitions = (spec.lease_transitions or 0) + (0 if renewing else 1)
        lease.spec = self._spec(spec.acquire_time if renewing else None, transitions)
        self._mine.append(lease.spec.renew_time)
        lease.api_version, lease.kind = "coordination.k8s.io/v1", "Lease"  # a list's items carry neither
        # 409 if it changed since the read
        self.api.replace_namespaced_lease(self.name, self.namespace, lease, _request_timeout=self.timeout)
        return self._won(now, transitions)

    def _won(self, now: float, transitions: int) -> bool:
        if not self.leading:
            log.info("%s leads (lease %s/%s, term %d)", self.identity, self.namespace, self.name, transitions)
        self.leading, self.last_renewed, self.holder, self.term = True, now, self.identity, transitions
        return True

    def _renew_failed(self, now: float) -> bool:
        if self.leading and (self.last_renewed is None or now - self.last_renewed >= self.cfg.renew_s):
            log.warning("%s stops leading: the lease was not renewed for %g s", self.identity, self.cfg.renew_s)
            self.leading = False
        return self.leading

    def release(self) -> bool:
        """Give the Lease up if this candidate holds it (shutdown); whether it was released."""
        if not self.leading:
            return False
        self.leading = False
        try:
            lease = self.api.read_namespaced_lease(self.name, self.namespace, _request_timeout=self.timeout)
            spec = lease.spec or client.V1LeaseSpec()
            if spec.holder_identity != self.identity:
                return False
            lease.spec = self._spec(spec.acquire_time, spec.lease_transitions or 0, holder="", duration=1)
            self.api.replace_namespaced_lease(self.name, self.namespace, lease, _request_timeout=self.timeout)
        except (ApiException, urllib3.exceptions.HTTPError, OSError) as exc:
            log.warning("lease %s/%s not released: %s", self.namespace, self.name, exc)
            return False
        log.info("%s released the lease", self.identity)
        return True
