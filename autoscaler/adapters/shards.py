"""The daemon sharded on Leases: services split into ``kubernetes.shards`` shards, each led by one of
several daemons, and the fleet's shared GPU limits split between the shards.

**Assignment.** A service belongs to the shard ``kubernetes.service_shards`` names for it, else to
``hash_shard(name, shards)``: the first 8 bytes of the SHA-256 of its UTF-8 name, big-endian, modulo
the shard count. SHA-256 does not depend on Python's hash seed, so every daemon (and every restart)
agrees, and a service's shard depends on its own name and the shard count only: adding or removing a
service never moves another one. Changing ``shards`` moves most services (as any modulo does).

**Leases.** With ``shards`` 1 the one Lease is ``kubernetes.lease.name`` itself, exactly as before
sharding (no other object is read or written). With N > 1, shard ``i`` has the Lease
``<name>-shard-<i>``, each led through ``LeaderElector`` (the client-go rule, one elector per shard:
whoever leads a shard's Lease is the only daemon that may write its services' workloads); besides,
``<name>-members`` (nobody holds it) carries one annotation per live daemon (``autoscaler.dev/member-
<sha256(identity)[:16]>``: the identity and a counter it bumps every round, merged in with a JSON
merge patch, so daemons never conflict on it), and, when the fleet has ``gpu_limits``,
``<name>-coordinator`` is led like any Lease by one daemon, the coordinator.

**One read a round.** A round reads every shard Lease and the coordinator's with one LIST of the
Leases in the namespace (no selector: a Lease written before this version, or by hand, carries no
label a selector could match; the names are picked out here), then hands each elector its own
(``LeaderElector.try_acquire_or_renew(lease=...)``): the renewals and takes that follow write with the
resourceVersion the list gave each item, so one that changed since is a 409 and lost, as after a GET.
So a round makes the members' PATCH, one LIST, and one write per Lease this daemon holds or takes;
before, it made a GET per shard (N + 1 reads), and under load its renewals came more than
``renew_s / 2`` apart (docs/benchmarks.md, fleet_scale). A LIST refused with 401/403 (a Role that
grants ``get`` by name and no ``list``, as before this version) falls back to a GET per Lease, with a
warning; a LIST that fails otherwise is a failed attempt of every elector (``read_failed``).

**Spread (who takes which shard).** Every ``lease.retry_s`` a daemon renews the shards it leads and
reads the others (``try_acquire_or_renew(take=False)``: the elector's own rule says whether a shard
is free, i.e. absent, released, or not renewed for its duration on this daemon's clock). Members are
live while their counter moved within ``lease.renew_s`` on this daemon's clock (it is bumped every
retry, and ``renew_s`` is below the Lease's duration, so a dead daemon has left the members before
its shards run out). With ``k`` live members leading ``L`` shards (this daemon) and at least ``lo``
(the least any other live member leads; 0 for a member that leads none):

- a free shard is taken at once when ``L <= lo`` (no other live daemon leads fewer), up to
  ``max(1, ceil(N / k) - L)`` shards a round, in this daemon's rendezvous order (shards sorted by
  SHA-256 of ``identity/shard``, so two daemons racing for free shards mostly try different ones;
  of two that try the same one, the resourceVersion lets one win);
- otherwise it is deferred: a less loaded daemon should take it in its next round. One that is still
  free ``DEFER_RETRIES`` retries after this daemon first saw it free is taken anyway (liveness over
  balance: the less loaded one may be failing);
- a daemon leading ``L >= lo + 2`` shards releases one a round (the last in its rendezvous order):
  the less loaded member takes it at its next round. Before the release the shard's new writes are
  refused and the ones in flight are waited for (``writing``; at most ``handoff_wait_s``, else the
  release waits for a later round), so no write of its own is in flight once the Lease is free.

So with ``k`` live daemons each leads ``floor(N / k)`` or ``ceil(N / k)`` shards once settled (a
daemon with ``lo + 2`` releases, one at or below ``lo`` takes), and a dead daemon's shards are taken
at the first round after they run out by the survivors, which all lead fewer than ``ceil(N / (k -
1))`` then and so take at once: within ``duration_s`` plus one retry (plus one more round when two
survivors raced for the same shard). A daemon that starts while the others lead every shard gets
its share through the releases, one shard a round per daemon over ``lo + 1``.

**Shared GPU limits.** ``gpu_limits.budget`` (key ``budget``) and each ``gpu_limits.quota[gpu]``
(key ``quota/<gpu>``) is split into one share per shard. Each shard's leader writes a report on its
own shard Lease (annotation ``autoscaler.dev/gpu-report``, JSON: ``generation`` of the shares it
plans with, ``held`` and ``demand`` GPUs per key), carried by its renewal. The coordinator reads
every shard Lease (each daemon reads them all every round anyway) and writes the shares as an
annotation of its own Lease (``autoscaler.dev/gpu-shares``, JSON: ``generation`` and, per key, one
share per shard), with its renewal. The coordinator Lease, not a ConfigMap: every daemon reads it
every round as a candidate (no extra call, no extra RBAC), only its holder can write it (the write
carries the resourceVersion read), and a deposed coordinator's write fails.

How a share is computed (``target_split``): a shard's floor is the GPUs it holds now or its services'
``min_replicas`` hold, whichever is more; the limit less the floors goes to the shards in proportion
to their demand above their floor (largest remainders); what demand leaves over goes in proportion to
demand, or equally. A shard's demand is the GPUs its last plan wanted; a shard whose plan used its
whole share (it may have wanted more: a plan made within a share cannot say) asks for half as much
again (at least one GPU more, at most what its variants' caps allow and the limit). So a share
follows demand up by half of itself a generation as far as the others' floors allow, and down to
what the shard holds (never below while the floors together fit the limit: a share never forces a
scale-down; the shard gives GPUs back as its own plan lets replicas go, and the coordinator then
hands them on). A shard whose plan sits
exactly at its share asks for more, gets it and then wants less than its share: its share may move
back and forth by a GPU or so between generations, which moves none of its replicas.

The split stays within the limit while it moves (``next_shares``): the coordinator publishes a new
generation only once every shard that has a holder reports planning with the current one, so no
shard plans with an older one (a shard's new leader writes no report until its first tick, and
the coordinator writes no new generation until it has one: the new leader plans with the current
generation or the one before, as every other shard); and a new generation lowers shares at once
but raises a share only by what the current generation leaves free, ``limit - sum(current)``. So whichever of the two
generations each shard plans with, the shares sum to at most the limit; a move from one shard to
another takes two generations (down, then up), a few retries. Without a published split (no
coordinator yet) a shard plans within ``fallback_split``: its floor of ``min_replicas`` and an equal
part of the rest, never the whole limit, as generation 0. A coordinator that dies leaves its last
split on its Lease, which the shards keep planning with until a new coordinator continues from it.

Only controllers that plan under the limits read their share (the MPC: ``gpu_limits`` of the
controller); the others do not read the limits, sharded or not (docs/controllers.md).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import math
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field

import urllib3
from kubernetes import client
from kubernetes.client.rest import ApiException

from autoscaler.adapters.lease import READ, LeaderElector
from autoscaler.config import FleetConfig, LeaseConfig
from autoscaler.config.fleet import GPULimits, Service
from autoscaler.config.kubernetes import JITTER_FACTOR

log = logging.getLogger(__name__)

DOMAIN = "autoscaler.dev"
REPORT = f"{DOMAIN}/gpu-report"
SHARES = f"{DOMAIN}/gpu-shares"
MEMBER = f"{DOMAIN}/member-"
DEFER_RETRIES = 2
"""How many retry periods a daemon that leads more than another live daemon leaves a free shard to
it before taking it anyway (module docstring)."""
BUDGET = "budget"


def hash_shard(name: str, shards: int) -> int:
    """The shard of the service ``name`` among ``shards``: SHA-256 of its UTF-8 name, first 8 bytes
    big-endian, modulo ``shards`` (module docstring)."""
    return int.from_bytes(hashlib.sha256(name.encode()).digest()[:8], "big") % shards


def shard_of(cfg: FleetConfig, service: str) -> int:
    """The shard of ``service``: ``kubernetes.service_shards``, else its hash."""
    kube = cfg.kubernetes
    return kube.service_shards.get(service, hash_shard(service, kube.shards))


def shard_services(cfg: FleetConfig) -> list[list[Service]]:
    """The services of each shard, in the fleet file's order."""
    out: list[list[Service]] = [[] for _ in range(cfg.kubernetes.shards)]
    for svc in cfg.services:
        out[shard_of(cfg, svc.name)].append(svc)
    return out


def lease_name(base: str, shards: int, shard: int) -> str:
    """Shard ``shard``'s Lease: ``base`` itself with one shard, else ``<base>-shard-<shard>``."""
    return base if shards == 1 else f"{base}-shard-{shard}"


def limit_keys(limits: GPULimits) -> dict[str, int]:
    """The fleet's shared limits by key: ``budget`` and ``quota/<gpu>``."""
    out = {f"quota/{gpu}": n for gpu, n in limits.quota.items()}
    if limits.budget is not None:
        out[BUDGET] = limits.budget
    return out


def gpus(services: Sequence[Service], replicas: Mapping[tuple[str, str], int], key: str) -> int:
    """GPUs that ``replicas`` ((service, variant) -> count) of ``services`` take under limit ``key``."""
    total = 0
    for svc in services:
        for v in svc.variants:
            if key == BUDGET or key == f"quota/{v.gpu}":
                total += replicas.get((svc.name, v.name), 0) * v.gpus_per_replica
    return total


def largest_remainder(total: int, weights: Sequence[float]) -> list[int]:
    """``total`` split in proportion to ``weights`` into whole numbers summing to ``total`` (Hamilton's
    method: floors, then one more to the largest remainders, the lower index first on a tie); equal
    parts when every weight is 0."""
    n = len(weights)
    if n == 0:
        return []
    w = list(weights) if sum(weights) > 0 else [1.0] * n
    s = sum(w)
    exact = [total * x / s for x in w]
    out = [math.floor(x) for x in exact]
    for i in sorted(range(n), key=lambda i: (-(exact[i] - out[i]), i))[:total - sum(out)]:
        out[i] += 1
    return out


def target_split(limit: int, demand: Sequence[int], floor: Sequence[int]) -> list[int]:
    """Shares of ``limit`` by ``demand`` with ``floor`` (module docstring); they sum to ``limit``.
    Floors above the limit together are cut in proportion to themselves."""
    if sum(floor) >= limit:
        return largest_remainder(limit, floor)
    rest = limit - sum(floor)
    above = [max(0, d - f) for d, f in zip(demand, floor, strict=True)]
    if sum(above) > rest:
        return [f + g for f, g in zip(floor, largest_remainder(rest, above), strict=True)]
    left = largest_remainder(rest - sum(above), demand)
    return [f + a + g for f, a, g in zip(floor, above, left, strict=True)]


def next_shares(limit: int, current: Sequence[int], target: Sequence[int]) -> list[int]:
    """The next generation's shares toward ``target`` from ``current`` (module docstring): a share
    goes down to its target at once and up only by what ``current`` leaves free, the largest
    shortfall first; so ``sum(max(current, next)) <= limit`` whenever ``sum(current) <= limit``."""
    new = [min(t, c) for t, c in zip(target, current, strict=True)]
    free = max(0, limit - sum(current))
    for i in sorted(range(len(new)), key=lambda i: (-(target[i] - current[i]), i)):
        g = min(max(0, target[i] - current[i]), free)
        new[i] += g
        free -= g
    return new


def fallback_split(limit: int, floors: Sequence[int]) -> list[int]:
    """Shares without a coordinator: each shard's ``min_replicas`` floor, and the rest of ``limit``
    in equal parts (the lower shards one more on a remainder)."""
    rest = max(0, limit - sum(floors))
    n = len(floors)
    return [f + rest // n + (1 if i < rest % n else 0) for i, f in enumerate(floors)]


@dataclass
class Report:
    """What a shard's leader reports on its Lease: the share generation it plans with, and per limit
    key the GPUs it holds and wants."""

    generation: int = 0
    held: dict[str, int] = field(default_factory=dict)
    demand: dict[str, int] = field(default_factory=dict)

    def annotation(self) -> str:
        """As written on the shard Lease."""
        return json.dumps({"generation": self.generation, "held": self.held, "demand": self.demand},
                          sort_keys=True)

    @classmethod
    def parse(cls, text: str | None) -> Report | None:
        """A report read from a Lease; None when absent or malformed."""
        try:
            d = json.loads(text or "")
            return cls(int(d["generation"]), {str(k): int(v) for k, v in d["held"].items()},
                       {str(k): int(v) for k, v in d["demand"].items()})
        except (ValueError, TypeError, KeyError, AttributeError):
            return None


def parse_shares(text: str | None, keys: Mapping[str, int], shards: int) -> tuple[int, dict[str, list[int]]] | None:
    """``(generation, key -> shares)`` from the coordinator Lease's annotation; None when absent, or
    when it does not fit this fleet (another key set, another shard count, a share sum over its limit)."""
    try:
        d = json.loads(text or "")
        gen = int(d["generation"])
        shares = {str(k): [int(x) for x in v] for k, v in d["shares"].items()}
    except (ValueError, TypeError, KeyError, AttributeError):
        return None
    if set(shares) != set(keys) or any(len(v) != shards or sum(v) > keys[k] or min(v) < 0
                                       for k, v in shares.items()):
        return None
    return gen, shares


class Members:
    """The live daemons, from the members Lease's annotations (module docstring)."""

    def __init__(self, api: client.ApiClient, name: str, namespace: str, identity: str, cfg: LeaseConfig,
                 clock: Callable[[], float]) -> None:
        self.api = client.CoordinationV1Api(api)
        self.name, self.namespace, self.identity, self.cfg, self.clock = name, namespace, identity, cfg, clock
        self.key = MEMBER + hashlib.sha256(identity.encode()).hexdigest()[:16]
        self.counter = 0
        self.seen: dict[str, tuple[str, float]] = {}  # key -> (value, when it last changed on our clock)
        self.timeout = cfg.renew_s / 2

    def beat(self) -> None:
        """Bump this daemon's counter and read the others' (a failed call is logged: the members
        then stay as last seen, and a member not seen moving for ``renew_s`` is no longer live)."""
        self.counter += 1
        value = f"{self.identity} {self.counter}"
        try:
            try:
                lease = self.api.patch_namespaced_lease(self.name, self.namespace,
                                                        {"metadata": {"annotations": {self.key: value}}},
                                                        _request_timeout=self.timeout)
            except ApiException as exc:
                if exc.status != 404:
                    raise
                lease = self.api.create_namespaced_lease(self.namespace, client.V1Lease(
                    metadata=client.V1ObjectMeta(name=self.name, namespace=self.namespace,
                                                 annotations={self.key: value}), spec=client.V1LeaseSpec()),
                    _request_timeout=self.timeout)
        except (ApiException, urllib3.exceptions.HTTPError, OSError) as exc:
            if not (isinstance(exc, ApiException) and exc.status == 409):  # two creates raced: next round
                log.warning("lease %s/%s (members): %s", self.namespace, self.name, exc)
            return
        now = self.clock()
        annotations = (lease.metadata and lease.metadata.annotations) or {}
        for key, val in annotations.items():
            if key.startswith(MEMBER) and (key not in self.seen or self.seen[key][0] != val):
                self.seen[key] = (val, now)
        for key in set(self.seen) - set(annotations):
            del self.seen[key]

    def live(self) -> set[str]:
        """Identities whose counter moved within ``renew_s`` (this daemon's always)."""
        now = self.clock()
        out = {self.identity}
        for val, at in self.seen.values():
            if now - at < self.cfg.renew_s:
                out.add(val.rsplit(" ", 1)[0])
        return out

    def forget(self, older_than_s: float) -> None:
        """Remove the members not seen moving for ``older_than_s`` (dead daemons' entries)."""
        now = self.clock()
        gone = {k: None for k, (_, at) in self.seen.items() if now - at > older_than_s and k != self.key}
        if gone:
            self._patch(gone)

    def leave(self) -> None:
        """Remove this daemon's entry (shutdown)."""
        self._patch({self.key: None})

    def _patch(self, annotations: dict[str, None]) -> None:
        try:
            self.api.patch_namespaced_lease(self.name, self.namespace, {"metadata": {"annotations": annotations}},
                                            _request_timeout=self.timeout)
        except (ApiException, urllib3.exceptions.HTTPError, OSError) as exc:
            log.warning("lease %s/%s (members): %s", self.namespace, self.name, exc)


def rendezvous(identity: str, shard: int) -> bytes:
    """This daemon's preference for ``shard`` (lower first): SHA-256 of ``identity/shard``."""
    return hashlib.sha256(f"{identity}/{shard}".encode()).digest()


class ShardElection:
    """One daemon's candidacy for every shard (and the coordinator), spread as the module docstring says.

    Args:
        cfg: the fleet (``kubernetes.shards``, ``kubernetes.lease``, ``gpu_limits``).
        api: a client.
        namespace: where the Leases live.
        identity: this daemon's name.
        clock: seconds, monotonic.
    """

    def __init__(self, cfg: FleetConfig, api: client.ApiClient, namespace: str, identity: str,
                 clock: Callable[[], float] = time.monotonic) -> None:
        kube = cfg.kubernetes
        self.n = kube.shards
        self.cfg = cfg
        self.identity = identity
        self.clock = clock
        self.lease = kube.lease
        base = kube.lease.name
        self.electors = [LeaderElector(api, lease_name(base, self.n, i), namespace, identity, kube.lease, clock)
                         for i in range(self.n)]
        self.services = shard_services(cfg)
        self.members = Members(api, f"{base}-members", namespace, identity, kube.lease, clock) if self.n > 1 else None
        self.limits = limit_keys(cfg.gpu_limits) if self.n > 1 else {}
        self.coordinator = (LeaderElector(api, f"{base}-coordinator", namespace, identity, kube.lease, clock)
                            if self.limits else None)
        minimum = {(s.name, v.name): v.min_replicas for s in cfg.services for v in s.variants}
        self.floors = {k: [gpus(self.services[i], minimum, k) for i in range(self.n)] for k in self.limits}
        self.free_since: dict[int, float] = {}
        self.order = sorted(range(self.n), key=lambda i: rendezvous(identity, i))
        self.writes = threading.Condition()
        self.in_flight = [0] * self.n
        """Writes of each shard in progress (``writing``)."""
        self.handing: set[int] = set()
        """Shards being handed on: their new writes are refused."""
        self.handoff_wait_s = max(0.0, self.lease.renew_s - JITTER_FACTOR * self.lease.retry_s) / 2
        """How long a hand-off waits for the shard's writes in flight: half the slack between a renewal
        deadline and the slowest retry (client-go's jitter), so the next round's renewals stay in time."""
        self.published: tuple[int, dict[str, list[int]]] | None = None
        self.api = client.CoordinationV1Api(api)
        self.namespace = namespace
        self.listing = True
        """Whether rounds read the Leases with one LIST (False after a 401/403: a GET per Lease)."""

    # ---------------------------------------------------------------- leadership
    def leads(self, shard: int) -> bool:
        """Whether this daemon may write ``shard``'s services now (``LeaderElector.leads``)."""
        return self.electors[shard].leads()

    def led(self) -> list[int]:
        """The shards this daemon leads now."""
        return [i for i in range(self.n) if self.electors[i].leads()]

    def round(self) -> None:
        """One election round: renew, read, take, release, coordinate (module docstring)."""
        if self.n == 1:  # exactly the unsharded daemon: one Lease, always a candidate
            self.electors[0].try_acquire_or_renew()
            return
        assert self.members is not None
        self.members.beat()
        live = self.members.live()
        listed = self._list()
        for e in self.electors:
            if listed is None or isinstance(listed, dict):  # renews what it leads, reads the rest
                e.try_acquire_or_renew(take=False, lease=READ if listed is None else listed.get(e.name))
            else:
                e.read_failed(listed)
        now = self.clock()
        for i, e in enumerate(self.electors):
            if e.takeable:
                self.free_since.setdefault(i, now)
            else:
                self.free_since.pop(i, None)
        mine = [i for i in range(self.n) if self.electors[i].leading]
        counts = {m: 0 for m in live if m != self.identity}
        for e in self.electors:
            if not e.takeable and not e.leading and e.holder in counts:
                counts[e.holder] += 1
        lo = min(counts.values(), default=math.inf)
        fair = math.ceil(self.n / len(live))
        budget = max(1, fair - len(mine)) if len(mine) <= lo else 0
        for i in self.order:
            if i not in self.free_since:
                continue
            overdue = now - self.free_since[i] >= DEFER_RETRIES * self.lease.retry_s
            if budget > 0 or overdue:
                self.electors[i].annotations = {}  # a report of an earlier leadership is no report
                lease = READ if not isinstance(listed, dict) else listed.get(self.electors[i].name)
                if self.electors[i].try_acquire_or_renew(lease=lease):
                    budget -= 1
                    mine.append(i)
                    self.free_since.pop(i, None)
        if len(mine) >= lo + 2:
            self._hand_on(max(mine, key=lambda i: rendezvous(self.identity, i)), len(mine), lo)
        if self.coordinator is not None:
            self._coordinate(listed)
        if self.electors[0].leading:  # one daemon removes the entries of daemons gone for long
            self.members.forget(10 * self.lease.duration_s)

    def _list(self) -> dict[str, client.V1Lease | None] | ApiException | urllib3.exceptions.HTTPError | OSError | None:
        """The shard and coordinator Leases by name (None where absent) from one LIST of the namespace;
        the exception when it failed; None when rounds read by GET (module docstring)."""
        if not self.listing:
            return None
        names = [e.name for e in self.electors] + ([self.coordinator.name] if self.coordinator else [])
        try:
            items = self.api.list_namespaced_lease(self.namespace, _request_timeout=self.lease.renew_s / 2).items
        except ApiException as exc:
            if exc.status not in (401, 403):
                return exc
            log.warning("leases in %s: listing forbidden (HTTP %s): reading each Lease with a GET instead; "
                        "grant list on coordination.k8s.io leases in %s (deploy/base RBAC)", self.namespace,
                        exc.status, self.namespace)
            self.listing = False
            return None
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            return exc
        by_name = {lease.metadata.name: lease for lease in items or () if lease.metadata is not None}
        return {n: by_name.get(n) for n in names}

    @contextlib.contextmanager
    def writing(self, shard: int) -> Iterator[bool]:
        """Around one write of ``shard``'s services: yields whether it may be written now (led, and not
        being handed on), and counts it in flight meanwhile."""
        with self.writes:
            ok = self.electors[shard].leads() and shard not in self.handing
            if ok:
                self.in_flight[shard] += 1
        try:
            yield ok
        finally:
            if ok:
                with self.writes:
                    self.in_flight[shard] -= 1
                    self.writes.notify_all()

    def _hand_on(self, shard: int, leads: int, lo: float) -> None:
        """Release ``shard`` for a less loaded daemon once no write of it is in flight (module docstring)."""
        with self.writes:
            self.handing.add(shard)
            idle = self.writes.wait_for(lambda: self.in_flight[shard] == 0, timeout=self.handoff_wait_s)
        try:
            if idle:
                log.info("%s hands shard %d on (it leads %d, a live daemon %d)", self.identity, shard, leads, lo)
                self.electors[shard].release()
        finally:
            with self.writes:
                self.handing.discard(shard)

    def release(self, leave: bool = True) -> None:
        """Give up every Lease held (shutdown, or a stalled tick) and, with ``leave``, the members.
        Writes in flight are not waited for: a stalled or abandoned tick may hang in a call (its writes
        are fenced by the lease's age, as without shards)."""
        for e in self.electors:
            e.release()
        if self.coordinator is not None:
            self.coordinator.release()
        if leave and self.members is not None:
            self.members.leave()

    # ---------------------------------------------------------------- shares
    def _coordinate(self, listed: dict[str, client.V1Lease | None] | Exception | None = None) -> None:
        """Publish the next shares (when coordinating) and renew or try the coordinator Lease, as
        ``listed`` (``_list``) holds it."""
        assert self.coordinator is not None and self.members is not None
        c = self.coordinator
        if c.leading:
            shares = self._next()
            if shares is not None:
                c.annotations = {SHARES: json.dumps({"generation": shares[0], "shares": shares[1]}, sort_keys=True)}
        else:
            c.annotations = {}  # a new coordinator first reads what the Lease holds (it keeps it)
        was = c.leading
        if isinstance(listed, dict):
            c.try_acquire_or_renew(lease=listed.get(c.name))
        elif isinstance(listed, (ApiException, urllib3.exceptions.HTTPError, OSError)):
            c.read_failed(listed)
        else:
            c.try_acquire_or_renew()
        if c.leading and not was:
            log.info("%s coordinates the shards' GPU shares", self.identity)

    def _report(self, i: int) -> Report | None:
        e = self.electors[i]
        return Report.parse((e.annotations if e.leading else e.seen_annotations).get(REPORT))

    def _next(self) -> tuple[int, dict[str, list[int]]] | None:
        """The coordinator's next publication, or None to keep the current one."""
        assert self.coordinator is not None
        current = self.shares_published()
        gen, now = current
        reports = [self._report(i) for i in range(self.n)]
        for i, e in enumerate(self.electors):
            held = e.leading or (not e.takeable and e.holder is not None)
            r = reports[i]
            if held and (r is None or r.generation != gen):
                return None  # a shard still plans with an older generation (or has not said)
        target = {}
        for k, limit in self.limits.items():
            floor = [max(self.floors[k][i], (r.held.get(k, 0) if r else 0)) for i, r in enumerate(reports)]
            demand = [max(floor[i], (r.demand.get(k, 0) if r else 0)) for i, r in enumerate(reports)]
            target[k] = next_shares(limit, now[k], target_split(limit, demand, floor))
        if target == now:
            return None
        return gen + 1, target

    def shares_published(self) -> tuple[int, dict[str, list[int]]]:
        """The split in force: the coordinator Lease's (as this daemon wrote or last read it), else
        ``fallback_split`` as generation 0."""
        c = self.coordinator
        if c is None:
            return 0, {}
        text = (c.annotations if c.leading and SHARES in c.annotations else c.seen_annotations).get(SHARES)
        parsed = parse_shares(text, self.limits, self.n)
        if parsed is not None:
            return parsed
        return 0, {k: fallback_split(lim, self.floors[k]) for k, lim in self.limits.items()}

    def share(self, shard: int) -> tuple[int, GPULimits]:
        """``(generation, the limits shard`` plans within``)``: its share of each shared limit."""
        gen, shares = self.shares_published()
        quota = {k.split("/", 1)[1]: v[shard] for k, v in shares.items() if k.startswith("quota/")}
        budget = shares[BUDGET][shard] if BUDGET in shares else None
        return gen, GPULimits(quota=quota, budget=budget)

    def report(self, shard: int, generation: int, held: Mapping[tuple[str, str], int],
               wanted: Mapping[tuple[str, str], int], share: GPULimits) -> None:
        """Set ``shard``'s report (written with its next renewal) from the replicas it holds and its
        plan wanted ((service, variant) -> count), planned within ``share`` (module docstring)."""
        if not self.limits:
            return
        svcs = self.services[shard]
        shares = limit_keys(share)
        r = Report(generation)
        caps = {(s.name, v.name): v.cap for s in svcs for v in s.variants}
        for k, limit in self.limits.items():
            r.held[k] = gpus(svcs, held, k)
            want = gpus(svcs, wanted, k)
            mine = shares.get(k, limit)
            more = min(limit, gpus(svcs, caps, k), mine + max(1, mine // 2))
            r.demand[k] = max(want, more) if want >= mine else want
        self.electors[shard].annotations = {REPORT: r.annotation()}
