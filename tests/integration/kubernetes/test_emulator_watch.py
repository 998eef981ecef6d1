"""A watch whose client goes away never holds up the emulated API server's writes (as on the real
one, where a write does not wait for its watchers).

The emulator runs on aiohttp's test server, which cancels a request's handler when its connection is
lost (``handler_cancellation=True``): a daemon killed with SIGKILL cancels its open watches wherever
they wait. The watches used to wait on an ``asyncio.Condition`` under ``asyncio.wait_for``; a watch
cancelled while its wait was taking the Condition's lock back left that lock held for ever (and
released another holder's on its way out: "Lock is not acquired"), and every later write, which
notified the watches under the emulator's lock, hung: the fleet_scale benchmark's scale-to-zero after
its SIGKILL timed out at 60 s (docs/benchmarks.md). Here the interleavings are driven one event-loop
step at a time, so each is the same on every run: two open watches, a write, the first watch
cancelled once or twice (its deadline, then its connection) a few steps apart; then another write
must complete and reach the watch left open."""

from __future__ import annotations

import asyncio
import itertools
import types
from typing import Any

import kmock

from autoscaler.faults.kubeapi import Emulator

LEASES = kmock.resource("coordination.k8s.io", "v1", "leases")
HUNG_S = 5.0
"""How long a write may take before it counts as hung (a deadlock never ends; a write here takes
microseconds), wall seconds."""
REQUEST_IDS = itertools.count(1)


def watch_request() -> Any:
    """What ``Emulator._serve_watch`` reads of a request: a watch of Leases in ``default`` from
    resourceVersion 1 (no initial listing: the events after it), with an ``id`` of its own as kmock's."""
    return types.SimpleNamespace(id=next(REQUEST_IDS), resource=LEASES, params={"resourceVersion": "1"},
                                 namespace="default")


def modified(rv: int) -> dict[str, Any]:
    return {"type": "MODIFIED",
            "object": {"metadata": {"name": "x", "namespace": "default", "resourceVersion": str(rv)}}}


async def steps(n: int) -> None:
    for _ in range(n):
        await asyncio.sleep(0)


async def one_schedule(before_write: int, before_cancel: int, between: int, cancels: int) -> list[str]:
    """One interleaving (loop steps before the first write, before the first cancel, between the
    cancels); the resourceVersions the open watch received. AssertionError if the second write hangs."""
    emu = Emulator()
    got: list[str] = []

    async def watch(keep: bool) -> None:
        async for event in emu._serve_watch(watch_request()):
            if keep and isinstance(event, dict):
                got.append(event["object"]["metadata"]["resourceVersion"])

    gone, kept = asyncio.create_task(watch(False)), asyncio.create_task(watch(True))
    await steps(before_write)
    first = asyncio.create_task(emu._buses[LEASES].put(modified(2)))
    await steps(before_cancel)
    for k in range(cancels):
        gone.cancel()
        await steps(between if k == 0 else 1)
    try:
        await asyncio.wait_for(emu._buses[LEASES].put(modified(3)), HUNG_S)
    except TimeoutError:
        raise AssertionError(f"a write hung after a cancelled watch (steps {before_write}, {before_cancel}, "
                             f"{between}; {cancels} cancels)") from None
    await asyncio.wait_for(first, HUNG_S)
    for _ in range(100):  # the open watch sends both within a few steps of its poll
        if len(got) == 2:
            break
        await asyncio.sleep(0.01)
    kept.cancel()
    await asyncio.gather(gone, kept, return_exceptions=True)
    return got


def test_a_cancelled_watch_never_holds_up_a_write() -> None:
    async def every_schedule() -> None:
        for schedule in itertools.product(range(3), range(3), range(3), (1, 2)):
            got = await one_schedule(*schedule)
            assert got == ["2", "3"], schedule

    asyncio.run(every_schedule())
