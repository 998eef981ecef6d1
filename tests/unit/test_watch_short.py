"""A watch that ends at once with no event is a failure, not a watch to reopen at once
(``autoscaler.adapters.workloads.cache``, ``SHORT_WATCH_S``): client-go v1.31's reflector
(``tools/cache/reflector.go``, ``handleAnyWatch``) calls a watch that lasted under a second and
delivered no event a "very short watch" and backs off, so a proxy or server that closes watches at
once is not hammered with re-watches.

The informer runs in the test's thread against a fake ``list_fn`` (lists answer one small JSON list;
watches answer a response whose body is what the test planned: lines, clock moves, a ``fill``), on a
clock the test moves, with its backoff wait replaced by one that records the delay asked for and stops
the informer after a given number of waits. Nothing is timed: every delay asserted is worked out by
hand from ``backoff_s`` 0.8 doubling up to ``backoff_max_s``."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from autoscaler.adapters.workloads.cache import SHORT_WATCH_S, Informer

NS = "llm"
MOST_WATCHES = 50
"""More watch requests than any test plans: the informer is re-watching in a tight loop."""

Step = bytes | float | Callable[[], None]
"""What a planned watch body does next: send a line, move the clock (seconds), or call something."""


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class Listed:
    """A list's response as the client's ``_preload_content=False`` gives it."""

    def __init__(self, rv: str) -> None:
        self.data = json.dumps({"metadata": {"resourceVersion": rv}, "items": [
            {"metadata": {"name": "a", "resourceVersion": rv}, "spec": {"replicas": 1}}]}).encode()

    def release_conn(self) -> None:
        pass


class Watched:
    """A watch's streaming response: ``kubernetes.watch.Watch.stream`` reads ``status``, iterates
    ``stream(amt=None, decode_content=False)`` (``iter_resp_lines``) and then calls ``close`` and
    ``release_conn``; ``cut`` reads ``connection`` (None: nothing to shut)."""

    status = 200
    connection = None

    def __init__(self, body: list[Step], clock: Clock) -> None:
        self.body, self.clock = body, clock

    def stream(self, amt: Any = None, decode_content: bool = False) -> Iterator[bytes]:
        for step in self.body:
            if isinstance(step, bytes):
                yield step
            elif isinstance(step, float):
                self.clock.now += step
            else:
                step()

    def close(self) -> None:
        pass

    def release_conn(self) -> None:
        pass


class Server:
    """``list_fn``: lists answer ``Listed``; the n-th watch answers the n-th planned body (an empty
    body, one that ends at once with nothing sent, once the plan is used up)."""

    def __init__(self, clock: Clock, plan: list[list[Step]]) -> None:
        self.clock, self.plan = clock, list(plan)
        self.lists = 0
        self.watches: list[float] = []
        """When each watch request was sent (the clock)."""

    def __call__(self, namespace: str, **kwargs: Any) -> Any:
        assert namespace == NS
        if kwargs.get("watch"):
            self.watches.append(self.clock.now)
            if len(self.watches) > MOST_WATCHES:  # not caught by the informer: the test fails, never hangs
                raise AssertionError(f"{len(self.watches)} watch requests: re-watching in a loop")
            return Watched(self.plan.pop(0) if self.plan else [], self.clock)
        self.lists += 1
        return Listed(str(self.lists))


def event(kind: str, name: str, rv: str) -> bytes:
    obj: dict[str, Any] = {"metadata": {"resourceVersion": rv}}
    if kind != "BOOKMARK":
        obj = {"metadata": {"name": name, "resourceVersion": rv}, "spec": {"replicas": 3}}
    return json.dumps({"type": kind, "object": obj}).encode() + b"\n"


def run(plan: list[list[Step]], waits: int, backoff_max_s: float = 30.0,
        inf_hook: Callable[[Informer, Server], None] | None = None) -> tuple[Informer, Server, list[float]]:
    """Run an informer over ``plan`` until its backoff has waited ``waits`` times; the delays asked for."""
    clock = Clock()
    server = Server(clock, plan)
    inf = Informer(server, NS, f"deployments {NS}", stale_s=30.0, timeout_s=5, clock=clock,
                   backoff_s=0.8, backoff_max_s=backoff_max_s)
    delays: list[float] = []
    real_set = inf._stop.set

    def wait(timeout: float | None = None) -> bool:
        assert timeout is not None
        delays.append(timeout)
        if len(delays) >= waits:
            real_set()
        return False

    inf._stop.wait = wait  # type: ignore[method-assign]
    if inf_hook is not None:
        inf_hook(inf, server)
    inf._run()
    return inf, server, delays


def test_watches_that_end_at_once_back_off_doubling_to_the_cap(caplog: pytest.LogCaptureFixture) -> None:
    """Every watch ends at once with nothing sent: 0.8, 1.6, 3.2, then 5.0 (the cap) each time; one
    warning per wait, the watch marked down, and no list after the first (the informer watches again
    from its resourceVersion)."""
    with caplog.at_level(logging.WARNING, logger="autoscaler.adapters.workloads.cache"):
        inf, server, delays = run([], waits=6, backoff_max_s=5.0)
    assert delays == pytest.approx([0.8, 1.6, 3.2, 5.0, 5.0, 5.0])
    assert len(server.watches) == 6 and inf.watches == 6 and server.lists == 1
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 6
    assert all("very short watch" in m for m in warnings)
    assert warnings[0].endswith("trying again in 0.8 s") and warnings[3].endswith("trying again in 5.0 s")
    assert inf.down_since == 1000.0  # down since the first watch ended (the clock never moved)


@pytest.mark.parametrize("kind", ["ADDED", "BOOKMARK"])
def test_a_watch_that_delivers_an_event_resets_the_backoff(kind: str) -> None:
    """Two short watches (0.8, 1.6), a third that delivers one event (an object's, or a BOOKMARK, which
    client-go counts too) and then ends at once: reopened without a wait, and the backoff starts again
    at 0.8; the event was applied."""
    plan: list[list[Step]] = [[], [], [event(kind, "b", "7")]]
    inf, server, delays = run(plan, waits=4)
    assert delays == pytest.approx([0.8, 1.6, 0.8, 1.6])
    assert len(server.watches) == 5
    assert inf.resource_version == "7"
    assert ("b" in inf.objects) == (kind == "ADDED")


def test_an_event_without_metadata_neither_counts_nor_resets() -> None:
    """An event whose object has no metadata is skipped, as client-go skips one ``meta.Accessor``
    cannot read: the watch still counts as short, and the backoff goes on doubling."""
    plan: list[list[Step]] = [[], [json.dumps({"type": "ADDED", "object": {"spec": {}}}).encode() + b"\n"]]
    _, _, delays = run(plan, waits=3)
    assert delays == pytest.approx([0.8, 1.6, 3.2])


def test_a_watch_ending_at_its_timeout_or_after_a_second_is_reopened_at_once() -> None:
    """The first watch runs its 5 s ``timeoutSeconds`` with nothing sent, the second exactly 1 s
    (client-go's test is ``< 1 s``): both are reopened without a wait. The third ends 0.999 s after it
    was sent: short, so 0.8 s is waited (the one wait, then the test stops it). The watch requests
    were sent at 1000, 1005 and 1006."""
    plan: list[list[Step]] = [[5.0], [SHORT_WATCH_S], [0.999]]
    _, server, delays = run(plan, waits=1)
    assert delays == pytest.approx([0.8])
    assert server.watches == pytest.approx([1000.0, 1005.0, 1006.0])


def test_a_watch_closed_by_a_fill_or_a_stop_is_not_a_failure() -> None:
    """A ``fill`` during a watch lists and ends that watch with nothing sent: the informer watches again
    at once, from the new list (2 lists; the second watch, short, is the first to wait). A ``stop``
    during a watch ends the thread without a wait."""
    holder: list[Informer] = []

    def hook(inf: Informer, server: Server) -> None:
        holder.append(inf)

    plan: list[list[Step]] = [[lambda: holder[0].fill()], []]
    inf, server, delays = run(plan, waits=1, inf_hook=hook)
    assert delays == pytest.approx([0.8])
    assert server.lists == 2 and len(server.watches) == 2 and inf.resource_version == "2"

    holder.clear()
    inf, server, delays = run([[lambda: holder[0].stop()]], waits=1, inf_hook=hook)
    assert delays == [] and len(server.watches) == 1
