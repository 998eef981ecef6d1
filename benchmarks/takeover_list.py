"""What a takeover's list costs (issue 35): ``WorkloadCache.cover`` of one shard's services after none,
against the emulated API server in the same process holding the fleet (``fleet_scale``'s generators:
``--fleet`` services x 3 variants x ``--pods`` pods of ``--pod-shape``), the way a new leader lists the
shard it takes before its first write (docs/daemon.md "What each replica caches").

Usage::

    python benchmarks/takeover_list.py [--fleet 500] [--services 50] [--pods 7] [--pod-shape served] [--repeat 2]

Prints per repeat what the cache's start cost while it leads nothing (the pod LISTs and the pods sent
within a second of its first list), then the wall and CPU seconds of the cover (client and emulator
together: one process), the LISTs of pods it sent and the pods the server sent (where the emulator counts them), and the
pods kept. Runs against whatever ``autoscaler`` is on the path (so an older checkout can be timed the
same way)."""

from __future__ import annotations

import argparse
import logging
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from fleet_scale import NAMESPACE, POD_SHAPES, VARIANTS, deployment
from provenance import stamp

from autoscaler.adapters.workloads.cache import WorkloadCache
from autoscaler.faults.kubeapi import EmulatedCluster


def sent_pods(emu: object) -> int | None:
    """Pods the emulator has sent in lists so far; None where it does not count them (older checkouts)."""
    sent = getattr(emu, "items_sent", None)
    return None if sent is None else int(sent["pods"])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--fleet", type=int, default=500, help="services in the namespace")
    ap.add_argument("--services", type=int, default=50, help="services of the shard taken")
    ap.add_argument("--pods", type=int, default=7, help="pods per variant")
    ap.add_argument("--pod-shape", choices=sorted(POD_SHAPES), default="served",
                    help="the pods' JSON (fleet_scale's POD_SHAPES)")
    ap.add_argument("--repeat", type=int, default=2, help="takeovers timed, each by a fresh cache")
    args = ap.parse_args()
    logging.disable(logging.ERROR)
    cluster = EmulatedCluster().start()
    names = [f"s{s}-{v}" for s in range(args.fleet) for v, _, _ in VARIANTS]
    cluster.put("apps/v1/deployments", [deployment(n, 1) for n in names])
    make = POD_SHAPES[args.pod_shape]
    cluster.put("v1/pods", [make(f"{n}-{k}", n) for n in names for k in range(args.pods)])
    shard = {f"s{s}-{v}" for s in range(args.services) for v, _, _ in VARIANTS}
    print(f"{Path(__file__).name}: {stamp()}", flush=True)
    print(f"{args.fleet} services x {len(VARIANTS)} x {args.pods} {args.pod_shape} pods "
          f"({len(names) * args.pods}); a shard of {args.services} services taken")
    for r in range(args.repeat):
        emu = cluster.emu
        lists, sent = emu.requests[("list", "pods")], sent_pods(emu)
        wall, cpu = time.monotonic(), time.process_time()
        cache = WorkloadCache(cluster.api(user_agent=f"takeover-{r}"), NAMESPACE, {"deployments"}, 60.0, 300)
        cache.cover({"deployments": set()})  # leads nothing: the first lists keep nothing
        cache.start()
        if not cache.wait_synced(120.0):
            raise SystemExit("takeover_list: the cache never listed")
        time.sleep(1.0)  # the pod informer's first list runs in its thread, after the workloads'
        wall, cpu = time.monotonic() - wall - 1.0, time.process_time() - cpu
        after = sent_pods(emu)
        got = "n/a" if after is None else after - (sent or 0)
        print(f"repeat {r}: the start, leading nothing: {wall:.2f} s wall, {cpu:.2f} s CPU; pod LISTs "
              f"{emu.requests[('list', 'pods')] - lists}, pods sent {got}")
        lists, sent = emu.requests[("list", "pods")], sent_pods(emu)
        wall, cpu = time.monotonic(), time.process_time()
        cache.cover({"deployments": shard})
        wall, cpu = time.monotonic() - wall, time.process_time() - cpu
        after = sent_pods(emu)
        got = "n/a" if after is None else after - (sent or 0)
        print(f"repeat {r}: {wall:.2f} s wall, {cpu:.2f} s CPU; pod LISTs {emu.requests[('list', 'pods')] - lists}, "
              f"pods sent {got}, kept {len(cache.informers['pods'].objects)}")
        cache.stop()
    cluster.stop()


if __name__ == "__main__":
    main()
