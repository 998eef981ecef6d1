"""Benchmark: the daemon at fleet scale, sharded by Lease (issue 35, "a tick that scales").

N services x 3 variants x ``--pods`` pods: their Deployments and pods stored in the emulated API
server (``autoscaler.faults.kubeapi``: 500 x 3 x 7 = 10,500 pods at the largest size), their series in
a real Prometheus (Debian's ``prometheus``, on 127.0.0.1) scraping the generated exposition
``tick_queries.py`` uses (``fleet_exposition.py``); the API server and the exporter are served from
one child process. Each Deployment starts at 0 replicas (its pods listed and exported, requests
waiting), so each run's first round scales every service from zero (``ControlLoop``'s rule: writes).

For each size and each ``--daemons K``, K ``autoscaler.daemon.Daemon`` run, each in its own process
(its own interpreter, GIL and resident set), sharing the services in ``kubernetes.shards`` = K
shards (one Lease each, ``autoscaler.adapters.shards``; K = 1 is the unsharded daemon and its one
Lease), ``kubernetes.watch`` on. Services go to shards evenly (``--assign even``: ``s<i>`` to shard
``i mod K`` by ``kubernetes.service_shards``) or by the hash of their names (``--assign hash``,
``kubernetes.shards``' own rule: uneven at these sizes, and at 10 services some of 10 shards are
empty). A tick that raises is counted as failed and the next one goes on, as ``Daemon._tick_loop``
does. Each daemon's election thread is the daemon's own
(``Daemon._elect``, every ``lease.retry_s``); its ticks are driven from here, one daemon at a time,
in rounds every ``controller.tick_s`` (10 s), so that each tick's API calls can be counted at the
server and each tick runs with the other daemons idle but for their elections (the machine these
figures come from has 2 cores: K daemons ticking at once would measure the cores' sharing, not a
tick). The first round (each shard's loop built, its query set detected, the scale from zero) is
not counted; the counted rounds start once Prometheus holds the controller's window (60 s, the MPC's),
so their decisions are the controller's, not warm-up holds.

Printed per size and K (every figure per daemon tick or per daemon): tick wall p50 / p99 over all
the daemons' counted ticks; tick CPU p50 / p99 (``time.process_time`` of the daemon's process over
its tick: every thread of it, so what one core per shard must supply); the tick's wall spent waiting
on Prometheus p50 / p99 (while at least one of its queries was in flight, ``Counting.in_flight_s``);
Prometheus's CPU p50 / p99 over
each tick (``/proc`` of its process, less its scraping's rate measured with no daemon ticking over
``IDLE_S`` before the counted rounds); the resident set after the
counted rounds (``VmRSS``, MiB: the interpreter and its imports included) of the daemon leading the
most services, and how many it leads; Prometheus queries per daemon tick (a counting
``QueryRunner``); API calls per daemon tick counted at the server (reads: get and list; writes:
create, update, patch, delete; the Leases' calls left out: they are the elections', every retry,
whatever the tick does); scale writes and Events per tick (the daemon's records); the plan's solve
p99 (the largest ``solve_ms`` of each tick's decisions); with K > 1, a shard's failover: the daemon
leading the most shards is killed (SIGKILL: no release) and its shards' workloads scaled to 0
(demand it can no longer answer), and, for the slowest of its shards, the time from its last Lease
renewal (the server's clock at that write) until another daemon wrote the Lease as its holder
(``led``) and until that daemon's loop wrote the shard's workloads again (``writes``). Meanwhile each
survivor ticks a shard it takes at once, alone, from a thread of its own (``Daemon.wake``,
``tick(only_new=True)``, as the daemon's tick loop does between two ticks), and the rounds go on
every tick as a daemon's tick loop would. Goal: within the lease's duration plus one tick.
Also printed: the Lease renewals' spacing on the server's clock while the holder ticks and between
its ticks (a write is refused once more than ``renew_s / 2`` passed since the last renewal), and
each daemon's election rounds (their calls' time, and how late the thread woke after its
``retry_s`` wait), in and out of its ticks: whether the tick's threads starve the renewals. Last,
every scale write of the run is checked against the Leases as the server wrote them, in the
server's order: each must come from the holder of its service's shard Lease at that moment
(``audit``; "off-Lease": those that did not, so 0 means no two daemons ever wrote one workload at
overlapping times; "handed": workloads written by two daemons in the run, where such a write had a
place to show). ``--fleet N`` puts N services' Deployments and pods in the API server while only the
first ``--services`` are configured and exported: the watch cache's share of a daemon's memory at a
fleet larger than the services it leads (issue 35, "memory per daemon"); the objects each daemon's
cache holds are printed with its resident set; ``--pod-shape served`` gives the pods the fields a real
API server serves (5.6 KB of JSON each, not 0.3 KB), as the cache's size per pod depends on them.
``--pin N`` runs the daemons on N CPUs of their own and Prometheus, the API server, the exporter and
this driver on the others (``os.sched_setaffinity`` per thread): with the daemons ticking one at a
time, the ticking daemon has a core to itself, as "one core per shard" reads, while what it waits on
(Prometheus, the API server: other machines in a cluster) runs beside it, not on its core.

    python benchmarks/fleet_scale.py [--services 10 100] [--daemons 1 3 10] [--pods 7] [--fleet N]
                                     [--pod-shape small|served] [--ticks 5]
                                     [--watch on|off] [--controller mpc] [--scrape-interval 2s]
                                     [--lease 8 6 1] [--aggregate on|off] [--scale-writers N]
                                     [--pin N] [--json PATH] [--profile PATH]
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import json
import logging
import math
import multiprocessing
import os
import resource
import statistics
import sys
import tempfile
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess
from pathlib import Path
from typing import Any

from kubernetes import client

from autoscaler.adapters.kubernetes import with_deadline
from autoscaler.adapters.prometheus import connect
from autoscaler.adapters.shards import lease_name, shard_of
from autoscaler.config import FleetConfig
from autoscaler.config.loading import parse_config
from autoscaler.faults.promserver import PromServer, Target
from autoscaler.wiring import build_source

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the benchmarks' own modules
from fleet_exposition import VARIANTS, WINDOW_S, Counting, fleet_services, serve
from provenance import stamp

NAMESPACE = "default"  # the exposition's
READS = ("get", "list")
WRITES = ("create", "update", "patch", "delete")
LEASES = "leases"
MAX_REPLICAS = 16
SIGNAL_WINDOW_S = 60.0
"""``controller.window_s``: the MPC's own window (``mpc``'s default, 60 s), so that the source's
history query (which looks back over ``controller.window_s``) can say it holds the MPC's window."""
HISTORY_S = SIGNAL_WINDOW_S + 5.0
"""Prometheus's age before the counted rounds: the window and a scrape or two, so that the first
counted decisions are not ``warming_up`` holds (the loop asks for ``window_s - tick_s`` of history)."""
SETTLE_S = 600.0
"""The longest the daemons may take to start, list their caches and spread the shards: a bound on a
failure (10 daemons starting at once on 2 shared cores took ~1 min), not a figure."""
FAILOVER_ROUNDS = 6
IDLE_S = 5.0
"""Seconds Prometheus is watched with no daemon ticking, before the counted rounds: its scraping's CPU
rate, taken off its CPU over each tick (``Run.prom_cpus``)."""
LEASE = (8.0, 6.0, 1.0)
"""``kubernetes.lease`` duration_s, renew_s, retry_s: short, for the failover. A leader writes only
with more than ``renew_s / 2`` of its lease left (``Daemon.may_write``), i.e. within ``renew_s / 2``
of its last renewal; renewals come every ``retry_s`` (up to 1.2x) plus the round's own Lease calls
(K + 1 of them, on an emulated API server sharing 2 cores): at 5 / 3 / 1 s the 1.5-s margin was too
short with 10 shards, and most writes were refused as possibly late (measured at 3ce7c82)."""
log = logging.getLogger("fleet_scale")


def deployment(name: str, replicas: int) -> dict[str, Any]:
    labels = {"app": name}
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name, "namespace": NAMESPACE},
            "spec": {"replicas": replicas, "selector": {"matchLabels": labels},
                     "template": {"metadata": {"labels": labels},
                                  "spec": {"containers": [{"name": "vllm", "image": "vllm/vllm-openai"}]}}},
            "status": {"replicas": replicas, "readyReplicas": replicas, "availableReplicas": replicas}}


def pod(name: str, app: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": NAMESPACE,
                                                            "labels": {"app": app}},
            "spec": {"nodeName": "emulated", "containers": [{"name": "vllm", "image": "vllm/vllm-openai"}]},
            "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}}


def served_pod(name: str, app: str) -> dict[str, Any]:
    """``pod`` as a real API server serves a vLLM server's pod (5.6 KB of JSON against ``pod``'s 0.3 KB):
    a ReplicaSet's pod with its managed fields, container args, env, resources, probe, mounts,
    tolerations and volumes, and the kubelet's status. The fields are the core/v1 Pod's (Kubernetes
    API reference, v1.31); the values are made up, of typical length."""
    out = pod(name, app)
    meta, spec = out["metadata"], out["spec"]
    rs = f"{app}-7d9f8c6b5"
    meta["labels"].update({"pod-template-hash": "7d9f8c6b5", "app.kubernetes.io/name": "vllm",
                           "app.kubernetes.io/instance": app, "app.kubernetes.io/component": "server"})
    meta.update({"generateName": f"{rs}-", "uid": f"3f0b6a4e-8d2c-4b1a-9e7f-{abs(hash(name)) % 10**12:012d}",
                 "resourceVersion": "1", "creationTimestamp": "2026-12-01T10:00:00Z",
                 "annotations": {"prometheus.io/scrape": "true", "prometheus.io/port": "8000",
                                 "kubectl.kubernetes.io/restartedAt": "2026-12-01T09:59:00Z"},
                 "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": rs,
                                      "uid": "aa0b6a4e-8d2c-4b1a-9e7f-1c2d3e4f5a6b", "controller": True,
                                      "blockOwnerDeletion": True}],
                 "managedFields": [
                     {"manager": "kube-controller-manager", "operation": "Update", "apiVersion": "v1",
                      "time": "2026-12-01T10:00:00Z", "fieldsType": "FieldsV1", "fieldsV1": {
                          "f:metadata": {"f:generateName": {}, "f:labels": {".": {}, "f:app": {},
                                                                            "f:pod-template-hash": {}},
                                         "f:ownerReferences": {".": {}, 'k:{"uid":"aa0b6a4e"}': {}}},
                          "f:spec": {"f:containers": {'k:{"name":"vllm"}': {
                              ".": {}, "f:args": {}, "f:env": {}, "f:image": {}, "f:imagePullPolicy": {}, "f:name": {},
                              "f:ports": {}, "f:readinessProbe": {}, "f:resources": {},
                              "f:terminationMessagePath": {}, "f:volumeMounts": {}}},
                              "f:dnsPolicy": {}, "f:nodeSelector": {}, "f:restartPolicy": {}, "f:schedulerName": {},
                              "f:securityContext": {}, "f:terminationGracePeriodSeconds": {}, "f:tolerations": {},
                              "f:volumes": {}}}},
                     {"manager": "kubelet", "operation": "Update", "apiVersion": "v1", "time": "2026-12-01T10:03:00Z",
                      "fieldsType": "FieldsV1", "subresource": "status", "fieldsV1": {"f:status": {
                          "f:conditions": {}, "f:containerStatuses": {}, "f:hostIP": {}, "f:phase": {},
                          "f:podIP": {}, "f:podIPs": {}, "f:startTime": {}}}}]})
    spec["containers"][0].update({
        "image": "vllm/vllm-openai:v0.6.3",
        "args": ["--model", "meta-llama/Llama-3.1-8B-Instruct", "--port", "8000", "--gpu-memory-utilization", "0.9",
                 "--max-model-len", "8192", "--enable-prefix-caching"],
        "env": [{"name": k, "value": v} for k, v in (("HF_HOME", "/models"), ("VLLM_LOGGING_LEVEL", "INFO"),
                                                      ("CUDA_VISIBLE_DEVICES", "0"), ("NCCL_DEBUG", "WARN"),
                                                      ("OMP_NUM_THREADS", "8"))]
               + [{"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": "hf", "key": "token"}}}],
        "ports": [{"name": "http", "containerPort": 8000, "protocol": "TCP"}],
        "resources": {"limits": {"nvidia.com/gpu": "1", "memory": "64Gi", "cpu": "8"},
                      "requests": {"nvidia.com/gpu": "1", "memory": "64Gi", "cpu": "8"}},
        "readinessProbe": {"httpGet": {"path": "/health", "port": 8000, "scheme": "HTTP"}, "periodSeconds": 5,
                           "timeoutSeconds": 1, "successThreshold": 1, "failureThreshold": 3},
        "volumeMounts": [{"name": "models", "mountPath": "/models"}, {"name": "shm", "mountPath": "/dev/shm"},
                         {"name": "kube-api-access-x7k2p", "readOnly": True,
                          "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount"}],
        "terminationMessagePath": "/dev/termination-log", "terminationMessagePolicy": "File",
        "imagePullPolicy": "IfNotPresent"})
    spec.update({
        "restartPolicy": "Always", "terminationGracePeriodSeconds": 30, "dnsPolicy": "ClusterFirst",
        "nodeSelector": {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB"}, "serviceAccountName": "default",
        "serviceAccount": "default", "securityContext": {}, "schedulerName": "default-scheduler",
        "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
        + [{"key": f"node.kubernetes.io/{k}", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300}
           for k in ("not-ready", "unreachable")],
        "priority": 0, "enableServiceLinks": True, "preemptionPolicy": "PreemptLowerPriority",
        "volumes": [{"name": "models", "persistentVolumeClaim": {"claimName": "models"}},
                    {"name": "shm", "emptyDir": {"medium": "Memory", "sizeLimit": "16Gi"}},
                    {"name": "kube-api-access-x7k2p", "projected": {"defaultMode": 420, "sources": [
                        {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
                        {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
                        {"downwardAPI": {"items": [{"path": "namespace", "fieldRef": {
                            "apiVersion": "v1", "fieldPath": "metadata.namespace"}}]}}]}}]})
    out["status"].update({
        "hostIP": "10.0.1.23", "podIP": "10.244.3.17", "podIPs": [{"ip": "10.244.3.17"}],
        "startTime": "2026-12-01T10:00:01Z", "qosClass": "Guaranteed",
        "conditions": [{"type": t, "status": "True", "lastProbeTime": None,
                        "lastTransitionTime": "2026-12-01T10:03:00Z"}
                       for t in ("PodReadyToStartContainers", "Initialized", "Ready", "ContainersReady",
                                 "PodScheduled")],
        "containerStatuses": [{"name": "vllm", "ready": True, "restartCount": 0, "started": True,
                               "image": "docker.io/vllm/vllm-openai:v0.6.3",
                               "imageID": "docker.io/vllm/vllm-openai@sha256:" + "0" * 64,
                               "containerID": "containerd://" + "1" * 64,
                               "state": {"running": {"startedAt": "2026-12-01T10:00:30Z"}}, "lastState": {}}]})
    return out


POD_SHAPES = {"small": pod, "served": served_pod}


class TimedWrites(list[Any]):
    """The emulator's write log with the server's wall clock of each write beside it (``at``):
    appended under the emulator's lock, so in the order the server applied them."""

    def __init__(self) -> None:
        super().__init__()
        self.at: list[float] = []

    def append(self, item: Any) -> None:
        self.at.append(time.time())
        super().append(item)


def holder_of(body: Any) -> str | None:
    """The holder a Lease write's body names (None: released or none)."""
    spec = body.get("spec") if isinstance(body, dict) else None
    return (spec or {}).get("holderIdentity") or None


def audit(writes: TimedWrites, since: int, leases: dict[str, int], shard_of_workload: dict[str, int],
          daemons: set[str]) -> dict[str, Any]:
    """The writes from index ``since`` on, replayed in the server's order: the Leases' holders as
    written (``leases``: Lease name -> shard), each scale write of a workload of
    ``shard_of_workload`` by one of ``daemons`` (User-Agent) checked against its shard's holder then.

    Returns ``overlaps`` (the scale writes whose writer did not hold the shard's Lease), ``scales``,
    ``handed`` (workloads written by more than one daemon: the check had something to catch), and per
    shard the Lease writes ``(t, writer, holder)`` and the scale writes ``(t, writer)``."""
    holder: dict[int, str | None] = {}
    out: dict[str, Any] = {"overlaps": [], "scales": 0, "lease": {}, "written": {}}
    by: dict[str, set[str]] = {}
    for i in range(since, len(writes)):
        method, plural, _, name, body, agent = writes[i]
        t = writes.at[i]
        if plural == LEASES and method == "POST" and isinstance(body, dict):
            name = name or (body.get("metadata") or {}).get("name")  # a create names it in its body
            if name in leases and leases[name] in holder:
                continue  # the emulator logs a create before it answers 409 (the Lease exists): not written
        if plural == LEASES and name in leases and method in ("POST", "PUT"):
            shard = leases[name]
            holder[shard] = holder_of(body)
            out["lease"].setdefault(shard, []).append((t, agent, holder[shard]))
        elif plural == "deployments/scale" and name in shard_of_workload and agent in daemons:
            shard = shard_of_workload[name]
            out["scales"] += 1
            by.setdefault(name, set()).add(agent)
            out["written"].setdefault(shard, []).append((t, agent))
            if holder.get(shard) != agent:
                out["overlaps"].append((t, name, agent, holder.get(shard)))
    out["handed"] = sum(len(w) > 1 for w in by.values())
    return out


def cluster_side(conn: Connection, services: int, pods: int, replicas: int, fleet: int | None = None,
                 shape: str = "small") -> None:
    """The child: the emulated API server holding the fleet (``fleet`` services, default ``services``)
    and the exporter serving the series of the first ``services``, its pods of ``POD_SHAPES[shape]``;
    answers ``requests`` (the server's request counts), ``mark`` (the write log's length),
    ``("audit", since, leases, shard_of_workload, daemons)`` (``audit``) and ``("zero", workloads)``
    (scaled to 0 by User-Agent ``fleet-scale``) until ``stop``."""
    from autoscaler.faults.kubeapi import EmulatedCluster

    logging.disable(logging.ERROR)  # the watch streams a stopped daemon leaves are logged as errors
    cluster = EmulatedCluster().start()
    writes = TimedWrites()
    cluster.emu.writes = writes
    names = [f"s{s}-{v}" for s in range(fleet or services) for v, _, _ in VARIANTS]
    cluster.put("apps/v1/deployments", [deployment(n, replicas) for n in names])
    apps = client.AppsV1Api(cluster.api(user_agent="fleet-scale"))
    make = POD_SHAPES[shape]
    cluster.put("v1/pods", [make(f"{n}-{k}", n) for n in names for k in range(pods)])
    exporter = serve(services, pods)
    conn.send((cluster.url, exporter.server_address[1]))
    while True:
        cmd = conn.recv()
        if cmd == "requests":
            conn.send(dict(cluster.emu.requests))
        elif cmd == "mark":
            conn.send(len(writes))
        elif isinstance(cmd, tuple) and cmd[0] == "audit":
            conn.send(audit(writes, *cmd[1:]))
        elif isinstance(cmd, tuple) and cmd[0] == "zero":  # through the API: the watch caches see it
            for name in cmd[1]:
                # bounded: after a SIGKILLed daemon at 10 x 10 this call once never returned (8bd1381)
                apps.patch_namespaced_deployment_scale(name, NAMESPACE, {"spec": {"replicas": 0}},
                                                       _request_timeout=60)
            conn.send(len(cmd[1]))
        else:
            break
    exporter.shutdown()
    cluster.stop()


def fleet(services: int, watch: bool, shards: int = 1, lease: tuple[float, float, float] = LEASE,
          lease_base: str = "autoscaler-leader", window_s: float = SIGNAL_WINDOW_S, even: bool = False,
          aggregate: bool = True) -> FleetConfig:
    """The fleet file of the first ``services`` services of the exposition, ``shards`` shards whose
    Leases are named from ``lease_base`` with ``lease`` = (duration_s, renew_s, retry_s), a tick of
    ``WINDOW_S`` and a signal window of ``window_s``; ``even``: service ``s<i>`` in shard ``i mod
    shards`` (``kubernetes.service_shards``), else by the hash of its name; ``aggregate``: ``prometheus.aggregate``."""
    duration, renew, retry = lease
    assign = {f"s{i}": i % shards for i in range(services)} if even and shards > 1 else {}
    return parse_config({
        "services": fleet_services(services, MAX_REPLICAS),
        "controller": {"tick_s": WINDOW_S, "window_s": window_s},
        "prometheus": {"batch": True, "aggregate": aggregate, "max_concurrency": 8, "timeout_s": 60},
        "kubernetes": {"namespace": NAMESPACE, "watch": watch, "pod_deletion_cost": False, "shards": shards,
                       "service_shards": assign,
                       "lease": {"name": lease_base, "duration_s": duration, "renew_s": renew, "retry_s": retry}},
    }, "<fleet_scale>")


def api(url: str, user_agent: str) -> client.ApiClient:
    cfg = client.Configuration(host=url)
    cfg.retries = 0
    out = client.ApiClient(cfg)
    out.user_agent = user_agent
    return with_deadline(out, 60.0)


def rss_mib() -> float:
    """This process's resident set now (``VmRSS``), MiB."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def pin(pid: int, cpus: set[int] | None) -> None:
    """Bind every thread of process ``pid`` to ``cpus`` (``os.sched_setaffinity`` per thread of
    ``/proc/<pid>/task``: the call binds one thread, and threads started later inherit their
    creator's set); ``None``: nothing. A thread that ended meanwhile is passed over."""
    if cpus is None:
        return
    for task in Path(f"/proc/{pid}/task").iterdir():
        with contextlib.suppress(ProcessLookupError):
            os.sched_setaffinity(int(task.name), cpus)


def pin_sets(n: int | None) -> tuple[set[int], set[int]] | None:
    """``--pin N``: the daemons' CPUs (the first N this process may run on) and the rest's (every other:
    Prometheus, the API server and exporter, this driver), or ``None`` without ``--pin``.

    Raises:
        SystemExit: fewer than N + 1 CPUs, or N < 1.
    """
    if n is None:
        return None
    cpus = sorted(os.sched_getaffinity(0))
    if n < 1 or len(cpus) < n + 1:
        raise SystemExit(f"fleet_scale.py: --pin {n}: needs N >= 1 and N + 1 CPUs; this process has {len(cpus)}")
    return set(cpus[:n]), set(cpus[n:])


def daemon_side(conn: Connection, identity: str, kube_url: str, prom_url: str, cfg: FleetConfig,
                controller: str, profile: str | None = None, scale_writers: int | None = None) -> None:
    """One daemon in its own process: built, its watch cache listed, its election thread started
    (``Daemon._elect``, the daemon's own), then answering ``led``, ``tick`` (one ``Daemon.tick``:
    ``tick_figures``) and ``stop`` (release its Leases and exit). ``profile``: a path where the
    cProfile statistics of its ticks (the tick's own thread; the pools' threads are seen as waits)
    are written at ``stop``."""
    import autoscaler.daemon
    from autoscaler.daemon import Daemon, freeze_heap

    if scale_writers is not None:  # read when each shard's loop is built
        autoscaler.daemon.SCALE_WRITERS = scale_writers

    logging.disable(logging.WARNING)
    source = build_source(cfg, connect(cfg.prometheus, prom_url))
    counting = Counting(source.runner)  # type: ignore[arg-type]
    source.runner = counting
    d = Daemon(cfg, controller, source, api(kube_url, identity), identity, "127.0.0.1:0", namespace_self=NAMESPACE)
    freeze_heap()  # as Daemon.run does before its threads start
    prof = cProfile.Profile() if profile else None
    try:
        if d.cache is not None and not d.cache.wait_synced(SETTLE_S):
            raise RuntimeError(f"{identity}: the watch cache did not list within {SETTLE_S:g} s")
        rounds: list[tuple[float, float]] = []  # the election rounds' (start, end), monotonic s
        ticks: list[tuple[float, float]] = []  # the ticks' (start, end), monotonic s
        early: list[tuple[float, list[int]]] = []  # takeover ticks: (ended, wall clock; shards ticked)
        lock = threading.Lock()  # one tick at a time, as the daemon's one tick thread
        one_round = d.shards.round

        def timed_round() -> None:
            t0 = time.monotonic()
            try:
                one_round()
            finally:
                rounds.append((t0, time.monotonic()))

        d.shards.round = timed_round  # type: ignore[method-assign]

        def follow() -> None:  # Daemon._tick_loop's takeover tick: the shards just taken, at once
            while not d.stopping.is_set():
                if d.wake.wait(0.5):
                    d.wake.clear()
                    with lock, contextlib.suppress(Exception):  # as the daemon: logged, the next tick retries
                        if d.tick(only_new=True) is not None:
                            early.append((time.time(), list(d._ticking)))

        elector = threading.Thread(target=d._elect, name="leader-election", daemon=True)
        elector.start()
        conn.send("ready")
        while True:
            cmd = conn.recv()
            if cmd == "led":
                conn.send(d.shards.led())
            elif cmd == "follow":  # from now on, as the daemon's tick loop between two of its ticks
                d.wake.clear()
                threading.Thread(target=follow, name="takeover-ticks", daemon=True).start()
                conn.send("following")
            elif cmd == "early":
                conn.send(list(early))
            elif cmd == "rounds":
                conn.send(election_figures(rounds, ticks, cfg.kubernetes.lease.retry_s))
            elif cmd == "tick":
                counting.reset()
                with lock:
                    t, c, m = time.perf_counter(), time.process_time(), time.monotonic()
                    if prof is not None:
                        prof.enable()
                    try:
                        record, error = d.tick(), None
                    except Exception as exc:  # as Daemon._tick_loop: logged ("tick failed"), the next tick retries
                        record, error = None, f"{type(exc).__name__}: {exc}"
                    if prof is not None:
                        prof.disable()
                    wall, cpu = time.perf_counter() - t, time.process_time() - c
                    ticks.append((m, time.monotonic()))
                cached = 0 if d.cache is None else sum(len(i.objects) for i in d.cache.informers.values())
                conn.send({**tick_figures(record, wall, counting.sent, sorted(d.loops)), "cpu": cpu, "error": error,
                           "cached": cached, "prom_wait": counting.in_flight_s()})
            else:
                break
        d.stopping.set()
        elector.join(timeout=30)
        if prof is not None and profile:
            prof.dump_stats(profile)
    finally:
        d.shards.release()
        d.server.close()
        if d.cache is not None:
            d.cache.stop()
    conn.send("stopped")


def election_figures(rounds: list[tuple[float, float]], ticks: list[tuple[float, float]],
                     retry_s: float) -> dict[str, list[float]]:
    """The election thread's rounds split by whether a tick of the same process ran meanwhile
    (``in``/``out``): each round's own time (``call_*``: its Lease calls, s) and how late it woke
    (``late_*``: its start less the previous round's end and the ``retry_s`` wait, s; a thread kept
    from the GIL or the cores by the tick's threads wakes late)."""
    out: dict[str, list[float]] = {"call_in": [], "call_out": [], "late_in": [], "late_out": []}
    for k, (start, end) in enumerate(rounds):
        during = any(a < end and start < b for a, b in ticks)
        side = "in" if during else "out"
        out[f"call_{side}"].append(end - start)
        if k:
            out[f"late_{side}"].append(start - rounds[k - 1][1] - retry_s)
    return out


def tick_figures(record: Any, wall: float, queries: int, shards: list[int]) -> dict[str, Any]:
    """What one daemon tick reports: wall s, queries sent, shards and services ticked, the scale writes
    it attempted and their Events (``EventRecorder.result``'s rule: one per change, one per other
    writer), the largest ``solve_ms``, the decisions' reasons, its resident set and when it ended."""
    out: dict[str, Any] = {"wall": wall, "queries": queries, "shards": shards, "ended": time.time(),
                           "rss_mib": rss_mib(), "services": 0, "scales": 0, "events": 0, "solve_ms": math.nan,
                           "reasons": {}, "statuses": {}}
    if record is None:
        return out
    results = [r for st in record.services.values() for r in st.actuation.values()]
    solves = [float(st.decision.terms["solve_ms"]) for st in record.services.values()
              if "solve_ms" in st.decision.terms]
    out.update(services=len(record.services), scales=len(results),
               events=sum(int(r.changed) + int(r.external is not None) for r in results),
               solve_ms=max(solves, default=math.nan),
               reasons=dict(Counter(str(st.decision.code.value) for st in record.services.values())),
               why={str(st.decision.code.value): st.reason for st in record.services.values()},
               statuses=dict(Counter(str(r.status.value) for r in results)))
    return out


@dataclass
class Run:
    """One size and daemon count: every counted daemon tick, per daemon figures, failover, audit."""

    services: int
    daemons: int
    lease: tuple[float, float, float]
    walls: list[float] = field(default_factory=list)
    cpus: list[float] = field(default_factory=list)
    """CPU seconds of the daemon's process over each counted tick (every thread: the tick's, its query
    and write pools', the election's and the watch cache's)."""
    prom_cpus: list[float] = field(default_factory=list)
    prom_waits: list[float] = field(default_factory=list)
    """Prometheus's CPU seconds over each counted tick less its scraping's (``Bench.prom_cpu``)."""
    queries: list[int] = field(default_factory=list)
    reads: list[int] = field(default_factory=list)
    read_by: Counter[str] = field(default_factory=Counter)
    """Reads of all the counted ticks by resource."""
    writes: list[int] = field(default_factory=list)
    watches: list[int] = field(default_factory=list)
    scales: list[int] = field(default_factory=list)
    events: list[int] = field(default_factory=list)
    solve_ms: list[float] = field(default_factory=list)
    reasons: Counter[str] = field(default_factory=Counter)
    statuses: Counter[str] = field(default_factory=Counter)
    """The scale writes' results (``ActuationStatus``) of the counted ticks."""
    led: dict[str, list[int]] = field(default_factory=dict)
    """Daemon -> the shards it led in the counted rounds."""
    led_services: dict[str, int] = field(default_factory=dict)
    rss_mib: dict[str, float] = field(default_factory=dict)
    cached: dict[str, int] = field(default_factory=dict)
    """Daemon -> the objects (workloads and pods) its watch cache held after the counted rounds."""
    failover: dict[int, dict[str, Any]] = field(default_factory=dict)
    """Victim's shard -> ``led`` and ``ticks`` s after its last renewal (None: not within the rounds)."""
    failed: list[str] = field(default_factory=list)
    """Counted ticks that raised (daemon: error), as ``Daemon._tick_loop`` would log them."""
    overlaps: int = 0
    scale_writes: int = 0
    handed: int = 0
    windows: dict[str, list[tuple[float, float]]] = field(default_factory=dict)
    """Daemon -> its counted ticks' (start, end), wall clock s."""
    election: dict[str, dict[str, list[float]]] = field(default_factory=dict)
    """Daemon -> its election rounds until the failover (``election_figures``)."""
    renewals: dict[str, list[float]] = field(default_factory=dict)
    """Seconds between two writes of one shard Lease by its holder (the server's clock), ``in`` when
    the holder was ticking at the second, else ``out`` (the counted rounds only: ``renewal_gaps``)."""


def delta(after: dict[Any, int], before: dict[Any, int], verbs: tuple[str, ...]) -> int:
    return sum(n - before.get(k, 0) for k, n in after.items() if k[0] in verbs and k[1] != LEASES)


class Bench:
    """The cluster child and Prometheus, shared by every run (``run``, ``stop``): ``services`` services
    x 3 variants, each variant's Deployment at ``replicas`` (0: the first decisions scale it from zero,
    ``ControlLoop``'s rule for requests waiting and no replica, so the counted rounds hold writes)
    with ``pods`` pods listed and exported; ``fleet``: the API server holds that many services (their
    Deployments and pods, not exported), default ``services``; ``shape``: the pods' (``POD_SHAPES``)."""

    def __init__(self, services: int, pods: int, scrape_interval: str, work: Path, replicas: int = 0,
                 fleet: int | None = None, shape: str = "small",
                 pins: tuple[set[int], set[int]] | None = None) -> None:
        self.pins = pins
        self.ctx = multiprocessing.get_context("spawn")
        self.conn, child = self.ctx.Pipe()
        self.side = self.ctx.Process(target=cluster_side, args=(child, services, pods, replicas, fleet, shape),
                                     daemon=True)
        self.side.start()
        pin(self.side.pid or 0, pins and pins[1])
        pin(os.getpid(), pins and pins[1])
        self.kube_url, port = self.conn.recv()
        self.prom = PromServer(work, [Target(f"127.0.0.1:{port}")], scrape_interval=scrape_interval)
        self.prom.start()
        assert self.prom.proc is not None
        pin(self.prom.proc.pid, pins and pins[1])
        self.prom.wait_for("count(up == 1)", lambda r: bool(r) and r[0]["value"][1] == "1", timeout_s=120)
        self.prom_started = time.monotonic()
        self.runs = 0
        self.procs: dict[str, BaseProcess] = {}
        self.idle_rate = 0.0  # Prometheus's CPU seconds per second while no daemon ticks (its scraping)

    def prom_cpu(self) -> float:
        """Prometheus's user + system CPU seconds so far (``/proc/<pid>/stat``)."""
        assert self.prom.proc is not None
        fields = Path(f"/proc/{self.prom.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def ask(self, cmd: Any) -> Any:
        self.conn.send(cmd)
        return self.conn.recv()

    def stop(self) -> None:
        self.prom.stop()
        self.conn.send("stop")
        self.side.join(timeout=30)

    def run(self, services: int, daemons: int, ticks: int, watch: bool, controller: str,
            lease: tuple[float, float, float] = LEASE, history_s: float = HISTORY_S,
            failover: bool = True, window_s: float = SIGNAL_WINDOW_S, even: bool = True,
            profile: Path | None = None, aggregate: bool = True, scale_writers: int | None = None) -> Run:
        """K = ``daemons`` daemons over the first ``services`` services: started, settled (every shard
        led, the spread even), one uncounted round, ``ticks`` counted rounds once Prometheus is
        ``history_s`` old, then (K > 1, ``failover``) the failover and the audit (module docstring).
        ``profile``: daemon ``d0``'s ticks under cProfile, written there (``daemon_side``)."""
        self.runs += 1
        base = f"fleet-{self.runs}"  # Leases of their own: no run sees another's
        cfg = fleet(services, watch, daemons, lease, base, window_s, even, aggregate)
        names = [f"d{k}" for k in range(daemons)]
        out = Run(services, daemons, lease)
        self.ask(("zero", [f"{s.name}-{v.name}" for s in cfg.services for v in s.variants]))  # as seeded
        since = self.ask("mark")
        procs: dict[str, BaseProcess] = {}
        conns: dict[str, Connection] = {}
        try:
            for n in names:
                conns[n], child = self.ctx.Pipe()
                prof = str(profile) if profile is not None and n == "d0" else None
                procs[n] = self.ctx.Process(target=daemon_side, args=(child, n, self.kube_url, self.prom.url, cfg,
                                                                       controller, prof, scale_writers), daemon=True)
                procs[n].start()
                pin(procs[n].pid or 0, self.pins and self.pins[0])
            self.procs = procs
            for n in names:
                if not conns[n].poll(SETTLE_S) or recv(conns[n], procs[n], f"daemon {n}") != "ready":
                    raise RuntimeError(f"daemon {n} did not start within {SETTLE_S:g} s")
            led = self._settle(conns, daemons)
            per_shard = [0] * daemons
            for svc in cfg.services:
                per_shard[shard_of(cfg, svc.name) if daemons > 1 else 0] += 1
            out.led = led
            out.led_services = {n: sum(per_shard[i] for i in s) for n, s in led.items()}
            self._round(conns, names, None)  # builds each shard's loop, detects the query sets
            time.sleep(max(0.0, history_s - (time.monotonic() - self.prom_started)))
            c0, t0 = self.prom_cpu(), time.monotonic()
            time.sleep(IDLE_S)
            self.idle_rate = (self.prom_cpu() - c0) / (time.monotonic() - t0)
            began = time.monotonic()
            for r in range(ticks):
                time.sleep(max(0.0, began + r * WINDOW_S - time.monotonic()))
                last = self._round(conns, names, out)
            out.rss_mib = {n: last[n]["rss_mib"] for n in names}
            out.cached = {n: last[n]["cached"] for n in names}
            for n in names:
                conns[n].send("rounds")
                out.election[n] = recv(conns[n], procs[n], f"daemon {n}")
            if daemons > 1 and failover:
                self._failover(conns, procs, cfg, out, began + ticks * WINDOW_S)
            leases = {lease_name(base, daemons, i): i for i in range(daemons)}
            workloads = {f"{s.name}-{v.name}": (shard_of(cfg, s.name) if daemons > 1 else 0)
                         for s in cfg.services for v in s.variants}
            checked = self.ask(("audit", since, leases, workloads, set(names)))
            out.overlaps, out.scale_writes, out.handed = len(checked["overlaps"]), checked["scales"], checked["handed"]
            out.renewals = renewal_gaps(checked["lease"], out.windows)
            if out.failover:
                self._failover_times(checked, out)
        finally:
            for n, p in procs.items():
                if p.is_alive():
                    with contextlib.suppress(OSError):
                        conns[n].send("stop")
            for p in procs.values():
                p.join(timeout=60)
                if p.is_alive():
                    p.kill()
        return out

    def _settle(self, conns: dict[str, Connection], shards: int) -> dict[str, list[int]]:
        """Wait until every shard has one leader and each daemon leads floor or ceil of its share."""
        deadline = time.monotonic() + SETTLE_S
        k = len(conns)
        while True:
            led = {}
            for n, c in conns.items():
                c.send("led")
                led[n] = recv(c, self.procs[n], f"daemon {n}")
            every = sorted(i for s in led.values() for i in s)
            if every == list(range(shards)) and all(shards // k <= len(s) <= -(-shards // k) for s in led.values()):
                return led
            if time.monotonic() > deadline:
                raise RuntimeError(f"the shards did not settle within {SETTLE_S:g} s: {led}")
            time.sleep(0.2)

    def _round(self, conns: dict[str, Connection], names: list[str], out: Run | None) -> dict[str, dict[str, Any]]:
        """One tick of each daemon in turn, its API calls counted at the server around it."""
        got: dict[str, dict[str, Any]] = {}
        for n in names:
            before = self.ask("requests")
            pc, t = self.prom_cpu(), time.monotonic()
            conns[n].send("tick")
            f = recv(conns[n], self.procs[n], f"daemon {n}")
            prom_cpu = self.prom_cpu() - pc - self.idle_rate * (time.monotonic() - t)
            after = self.ask("requests")
            got[n] = f
            if out is not None:
                out.windows.setdefault(n, []).append((f["ended"] - f["wall"], f["ended"]))
            if out is not None and f["error"] is not None:
                out.failed.append(f"{n}: {f['error']}")
            if out is None or not f["services"]:
                continue
            out.walls.append(f["wall"])
            out.cpus.append(f["cpu"])
            out.prom_cpus.append(prom_cpu)
            out.prom_waits.append(f["prom_wait"])
            out.queries.append(f["queries"])
            out.reads.append(delta(after, before, READS))
            out.read_by.update({k[1]: n - before.get(k, 0) for k, n in after.items()
                                if k[0] in READS and k[1] != LEASES and n > before.get(k, 0)})
            out.writes.append(delta(after, before, WRITES))
            out.watches.append(delta(after, before, ("watch",)))
            out.scales.append(f["scales"])
            out.events.append(f["events"])
            out.solve_ms.append(f["solve_ms"])
            out.reasons.update(f["reasons"])
            out.statuses.update(f["statuses"])
        return got

    def _failover(self, conns: dict[str, Connection], procs: dict[str, BaseProcess], cfg: FleetConfig, out: Run,
                  due: float) -> None:
        """Kill the daemon leading the most shards and scale its shards' workloads to 0 (demand it can
        no longer answer: the new leader's first tick over them scales them from zero, a write); rounds
        of the others every tick until each of its shards was ticked by another daemon (at most
        ``FAILOVER_ROUNDS``)."""
        victim = max(out.led, key=lambda n: (len(out.led[n]), n))
        shards = out.led[victim]
        survivors = [n for n in conns if n != victim]
        for n in survivors:  # each ticks a shard it takes at once, as its tick loop would (Daemon.wake)
            conns[n].send("follow")
            recv(conns[n], procs[n], f"daemon {n}")
        procs[victim].kill()  # SIGKILL: no release, no last write
        procs[victim].join(timeout=30)
        killed = time.time()
        self.ask(("zero", [f"{s.name}-{v.name}" for s in cfg.services if shard_of(cfg, s.name) in shards
                           for v in s.variants]))
        ticked: dict[int, float] = {}

        def takeover_ticks() -> None:
            for n in survivors:
                conns[n].send("early")
                for ended, took in recv(conns[n], procs[n], f"daemon {n}"):
                    for i in took:
                        if i in shards and ended > killed:
                            ticked[i] = min(ticked.get(i, ended), ended)

        for r in range(FAILOVER_ROUNDS):
            while time.monotonic() < due + r * WINDOW_S:  # the takeover ticks come between the rounds
                takeover_ticks()
                if set(ticked) == set(shards):
                    break
                time.sleep(0.5)
            if set(ticked) == set(shards):
                break
            for f in self._round(conns, survivors, None).values():
                for i in f["shards"]:
                    if i in shards and i not in ticked and f["ended"] > killed:
                        ticked[i] = f["ended"]
            takeover_ticks()
            if set(ticked) == set(shards):
                break
        out.failover = {i: {"victim": victim, "ticked_at": ticked.get(i)} for i in shards}

    @staticmethod
    def _failover_times(checked: dict[str, Any], out: Run) -> None:
        for i, f in out.failover.items():
            victim = f.pop("victim")
            writes = checked["lease"].get(i, [])
            renewed = max((t for t, agent, holder in writes if agent == victim and holder == victim), default=None)
            taken = min((t for t, agent, holder in writes if renewed is not None and t > renewed
                         and holder not in (None, victim)), default=None)
            wrote = min((t for t, agent in checked["written"].get(i, []) if renewed is not None and t > renewed
                         and agent != victim), default=None)
            at = f.pop("ticked_at")
            f["led_s"] = None if taken is None or renewed is None else taken - renewed
            f["ticks_s"] = None if at is None or renewed is None else at - renewed
            f["writes_s"] = None if wrote is None or renewed is None else wrote - renewed


def renewal_gaps(lease: dict[int, list[tuple[float, str, str | None]]],
                 windows: dict[str, list[tuple[float, float]]]) -> dict[str, list[float]]:
    """From each shard Lease's writes ``(t, writer, holder)`` (server's clock, ``audit``): the time
    between two consecutive writes by its holder as holder, ``in`` when the second fell within one of
    that daemon's counted ticks (``windows``), ``out`` when it fell between them; writes outside the
    counted rounds are left out."""
    first = min((a for w in windows.values() for a, _ in w), default=math.inf)
    last = max((b for w in windows.values() for _, b in w), default=-math.inf)
    out: dict[str, list[float]] = {"in": [], "out": []}
    for writes in lease.values():
        prev: tuple[float, str] | None = None
        for t, agent, holder in writes:
            if holder != agent:
                prev = None
                continue
            if prev is not None and prev[1] == agent and first <= t <= last:
                during = any(a <= t <= b for a, b in windows.get(agent, []))
                out["in" if during else "out"].append(t - prev[0])
            prev = (t, agent)
    return out


def recv(conn: Connection, proc: BaseProcess, what: str) -> Any:
    """The next message from a child, or RuntimeError once it has died without one."""
    while not conn.poll(1.0):
        if not proc.is_alive():
            raise RuntimeError(f"{what} exited (code {proc.exitcode}) without answering")
    return conn.recv()


def plain(x: Any) -> Any:
    """``x`` with every dict key a string (JSON's), recursively."""
    if isinstance(x, dict):
        return {str(k): plain(v) for k, v in x.items()}
    if isinstance(x, list | tuple):
        return [plain(v) for v in x]
    return x


def p99(xs: list[float]) -> float:
    s = sorted(x for x in xs if not math.isnan(x))
    return s[min(len(s) - 1, int(0.99 * len(s)))] if s else math.nan


def spread(xs: list[float]) -> str:
    """``p50 / p99 / max s (n)`` of ``xs``."""
    return f"{median(xs):.2f} / {p99(xs):.2f} / {max(xs, default=math.nan):.2f} s ({len(xs)})"


def median(xs: list[float]) -> float:
    return statistics.median(xs) if xs else math.nan


def mean(xs: list[int]) -> float:
    """The mean; nan when no counted tick led a service (every tick of the run then led none)."""
    return statistics.mean(xs) if xs else math.nan


def row(r: Run) -> str:
    top = max(r.led_services, key=lambda n: (r.led_services[n], n))
    fo = "-"
    if r.failover:  # the slowest of the victim's shards
        led = [f["led_s"] for f in r.failover.values() if f["led_s"] is not None]
        wrote = [f["writes_s"] for f in r.failover.values() if f["writes_s"] is not None]
        miss = len(r.failover) - len(wrote)
        fo = (f"{max(led):.1f} / {max(wrote):.1f} s" if led and wrote else "none") + (f" ({miss} not)" if miss else "")
    return (f"| {r.services} | {r.daemons} | {median(r.walls):.2f} / {p99(r.walls):.2f} s | "
            f"{median(r.cpus):.2f} / {p99(r.cpus):.2f} s | {median(r.prom_waits):.2f} / {p99(r.prom_waits):.2f} s | "
            f"{median(r.prom_cpus):.2f} / {p99(r.prom_cpus):.2f} s | "
            f"{r.rss_mib[top]:.0f} MiB ({r.led_services[top]}) | "
            f"{'/'.join(map(str, sorted(set(r.queries))))} | {mean(r.reads):.1f} | "
            f"{mean(r.writes):.1f} | {mean(r.scales):.1f} + {mean(r.events):.1f} | "
            f"{p99(r.solve_ms):.0f} ms | {fo} | {r.overlaps} of {r.scale_writes} ({r.handed}) |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0].replace("\n", " "))
    ap.add_argument("--services", type=int, nargs="+", default=[10, 100], help="fleet sizes (3 variants each)")
    ap.add_argument("--daemons", type=int, nargs="+", default=[1, 3, 10], help="daemons (and shards) per size")
    ap.add_argument("--pods", type=int, default=7, help="pods per variant")
    ap.add_argument("--fleet", type=int, help="services whose Deployments and pods the API server holds "
                    "(default: the largest --services; only those are exported to Prometheus)")
    ap.add_argument("--pod-shape", choices=sorted(POD_SHAPES), default="small",
                    help="the pods in the API server: small (0.3 KB of JSON) or as an API server serves one (5.6 KB)")
    ap.add_argument("--ticks", type=int, default=5, help="rounds counted per run (after the first)")
    ap.add_argument("--watch", choices=("on", "off"), default="on", help="kubernetes.watch")
    ap.add_argument("--assign", choices=("even", "hash"), default="even",
                    help="services to shards: s<i> to shard i mod K (kubernetes.service_shards), or by name hash")
    ap.add_argument("--controller", default="mpc", help="controller spec")
    ap.add_argument("--scrape-interval", default="2s", help="Prometheus's scrape interval")
    ap.add_argument("--lease", type=float, nargs=3, default=list(LEASE), metavar=("DURATION", "RENEW", "RETRY"),
                    help="kubernetes.lease duration_s, renew_s, retry_s (short, for the failover)")
    ap.add_argument("--aggregate", choices=("on", "off"), default="on",
                    help="prometheus.aggregate: the pod-scoped signals per pod (on) or as union branches (off)")
    ap.add_argument("--scale-writers", type=int, help="services whose scale writes run at once in a daemon "
                    "(default: the daemon's SCALE_WRITERS)")
    ap.add_argument("--pin", type=int, metavar="N", help="run the daemons on N CPUs of their own and "
                    "Prometheus, the API server and this driver on the others (needs N + 1 CPUs)")
    ap.add_argument("--json", type=Path, help="also write the figures here")
    ap.add_argument("--profile", type=Path, help="daemon d0's ticks under cProfile: PATH-<services>x<daemons>.prof")
    args = ap.parse_args()
    print(f"{Path(__file__).name}: {stamp()}", flush=True)
    logging.basicConfig(level=logging.ERROR)
    largest = max(args.services)
    lease = (args.lease[0], args.lease[1], args.lease[2])
    pins = pin_sets(args.pin)
    fleet(1, True, 1, lease)  # a bad --lease fails here, before anything starts
    runs: list[Run] = []
    with tempfile.TemporaryDirectory(prefix="fleet-scale-") as work:
        fleet_n = max(args.fleet or largest, largest)
        bench = Bench(largest, args.pods, args.scrape_interval, Path(work), fleet=fleet_n, shape=args.pod_shape,
                      pins=pins)
        try:
            try:
                series = bench.prom.query("count({__name__=~\".+\"})")[0]["value"][1]
            except OSError:  # a loaded machine: the count is context, not a figure
                series = "?"
            print(f"{fleet_n} services x {len(VARIANTS)} variants x {args.pods} pods "
                  f"({fleet_n * len(VARIANTS) * args.pods} {args.pod_shape} pods) in the emulated API server, "
                  f"the first {largest}'s "
                  f"({series} series) in Prometheus; controller {args.controller}, tick {WINDOW_S:g} s, "
                  f"window {SIGNAL_WINDOW_S:g} s, "
                  f"watch {args.watch}, aggregate {args.aggregate}, services to shards {args.assign}, "
                  f"{args.ticks} rounds counted after the first; lease duration / renew / retry "
                  f"{lease[0]:g} / {lease[1]:g} / {lease[2]:g} s; {os.cpu_count()} CPUs"
                  + ("" if pins is None else f"; daemons on CPUs {sorted(pins[0])}, Prometheus, the API server "
                     f"and the driver on {sorted(pins[1])}") + "\n")
            print("| services | daemons | tick wall p50 / p99 | tick CPU p50 / p99 | waiting on Prometheus p50 / p99 | "
                  "Prometheus CPU p50 / p99 | "
                  "RSS per daemon (services led) | "
                  "Prometheus queries / tick | API reads / tick | API writes / tick | scales + Events / tick | "
                  "plan solve p99 | failover led / writes | writes off-Lease of scale writes (handed) |")
            print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
            for n in args.services:
                for k in args.daemons:
                    prof = None if args.profile is None else Path(f"{args.profile}-{n}x{k}.prof")
                    r = bench.run(n, k, args.ticks, args.watch == "on", args.controller, lease,
                                  even=args.assign == "even", profile=prof, aggregate=args.aggregate == "on",
                                  scale_writers=args.scale_writers)
                    runs.append(r)
                    print(row(r), flush=True)
        finally:
            bench.stop()
    print()
    for r in runs:
        print(f"  {r.services} services, {r.daemons} daemons: led {r.led_services}, RSS "
              f"{ {n: round(m) for n, m in r.rss_mib.items()} } MiB, cached objects {r.cached}, "
              f"reads {dict(r.read_by)}, decisions "
              f"{dict(r.reasons)}, writes {dict(r.statuses)}, failed ticks {len(r.failed)} "
              f"{sorted(set(r.failed))[:3]}, failover {r.failover or '-'}")
        if r.renewals:
            print(f"    renewals of a shard Lease by its holder, s apart, p50 / p99 / max (n): while it ticks "
                  f"{spread(r.renewals['in'])}, between its ticks {spread(r.renewals['out'])}; more than renew_s / 2 "
                  f"= {r.lease[1] / 2:g} s apart (its writes refused meanwhile): "
                  f"{sum(g > r.lease[1] / 2 for g in r.renewals['in'] + r.renewals['out'])}")
        if r.election:
            figs = {k: [x for e in r.election.values() for x in e[k]] for k in ("call_in", "call_out", "late_in",
                                                                                   "late_out")}
            print(f"    election rounds (each daemon's thread), p50 / p99 / max (n): calls while ticking "
                  f"{spread(figs['call_in'])}, between ticks {spread(figs['call_out'])}; woken late while ticking "
                  f"{spread(figs['late_in'])}, between ticks {spread(figs['late_out'])}")
    one = sorted((r for r in runs if r.daemons == 1), key=lambda r: r.services)
    if len(one) > 1:
        a, b = one[0], one[-1]
        slope = (b.rss_mib["d0"] - a.rss_mib["d0"]) / (b.services - a.services) * 1024
        print(f"  one daemon: RSS {a.rss_mib['d0']:.0f} MiB at {a.services} services, {b.rss_mib['d0']:.0f} MiB at "
              f"{b.services}: {slope:.0f} KiB per service")
    driver = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"  peak RSS of this process (the driver): {driver:.0f} MiB")
    if args.json:
        args.json.write_text(json.dumps([plain(vars(r)) for r in runs], indent=1, default=str) + "\n")


if __name__ == "__main__":
    main()
