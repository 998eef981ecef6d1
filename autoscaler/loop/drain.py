"""Drain before removal: a scale-down removes pods only once they hold nothing.

Kubernetes kills a removed pod ``terminationGracePeriodSeconds`` (30 s by default) after asking it
to stop, and whatever it still generates is cut (volcano-sh/kthena#1589). With a ``Drainer``, a
scale-down of ``k`` pods of a variant first takes the ``k`` pods it would remove (the decision's
``remove_first``, else fewest requests in flight first) out of the routing of new requests, keeps
the variant's count, and writes the lower count, naming those pods first, once each holds nothing
(running + waiting 0 at the tick) or has been draining ``controller.guard.drain_timeout_s``. A
decision that no longer removes them puts them back. A pod the drainer cannot take out is removed
at once, as without one. A drained pod is named for removal once; where that write does not land
(refused: a conflict, no permission, the API unreachable; or it raised), ``restore`` puts the pod back
in routing, so no pod stays out of routing unremoved (the next tick drains it again if the scale-down
still stands). Pods go back in routing one ``Drainer.uncordon`` call each, so an uncordon that raises
part-way leaves tracked as draining exactly the pods not yet put back; the pod whose call raised is marked
unsure (``DrainState.unsure``: the call may have taken effect), so a later scale-down cordons it again
before it counts as drained.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, field

from autoscaler.loop.actuate import Drainer
from autoscaler.state import ServiceEstimate


@dataclass
class DrainState:
    """Pods of one service taken out of routing: pod name -> (its variant, when it was taken out on
    the loop's clock, seconds)."""

    pods: dict[str, tuple[str, float]] = field(default_factory=dict)
    removing: dict[str, tuple[str, float]] = field(default_factory=dict)
    """The pods out of routing that this tick's writes name for removal (no longer in ``pods``): pod name ->
    (its variant, when it was taken out), set by ``drain``; ``restore`` puts them back in routing where
    their variant's write did not land, and empties it. Any left here at the next ``drain`` (the tick
    stopped between the two) are tracked in ``pods`` again first."""
    unsure: set[str] = field(default_factory=set)
    """Tracked pods (in ``pods``) whose ``uncordon`` raised: they may be back in routing (a call can raise
    after it took effect), so a drain that takes one as a victim cordons it again, from then, rather than
    removing it as drained; one put back, removed or gone leaves the set."""


def drain(drainer: Drainer, state: DrainState, est: ServiceEstimate, desired: dict[str, int],
          order: dict[str, list[str]], timeout_s: float, now: float) -> tuple[dict[str, int], dict[str, list[str]],
                                                                                   list[str]]:
    """What to write this tick: (replicas per variant, pods to remove first per variant, notes).

    Args:
        drainer: takes pods out of routing.
        state: the service's draining pods (updated).
        est: this tick's estimate (its ``pods``: the ready pods, with requests in flight).
        desired: replicas per variant after the guard.
        order: variant -> pods in the order a scale-down removes them.
        timeout_s: longest a pod drains before it is removed anyway, seconds.
        now: the loop's clock, seconds.

    The pods out of routing that the write names for removal are kept in ``state.removing`` until
    ``restore`` (after the write). Pods still there (no ``restore`` ran: the tick stopped between the
    two) are first tracked as draining again (``state.pods``, with when they were taken out), so this
    drain removes them again or puts them back, rather than leaving them out of routing untracked.
    """
    state.pods.update(state.removing)
    state.removing = {}
    pods = {p.name: p for p in est.pods if p.name}
    for name in [n for n in state.pods if n not in pods]:  # gone, or no longer reported
        del state.pods[name]
        state.unsure.discard(name)
    out = dict(desired)
    first: dict[str, list[str]] = {}
    notes: list[str] = []
    for variant, n in desired.items():
        obs = est.variants.get(variant)
        cur = obs.current if obs is not None else n
        mine = [name for name, (v, _) in state.pods.items() if v == variant]
        k = cur - n
        if k <= 0:
            if mine:
                _uncordon(drainer, state, est.service, mine)
                notes.append(f"{variant}: {len(mine)} draining pod(s) back in service")
            continue
        k_start = min(k, obs.starting if obs is not None else 0)  # a starting pod holds nothing to drain
        candidates = mine + [p for p in order.get(variant, []) if p in pods and p not in mine]
        victims = candidates[:k - k_start]
        unnamed = k - k_start - len(victims)  # pods the source does not report: removed as decided
        back = [name for name in mine if name not in victims]
        if back:
            _uncordon(drainer, state, est.service, back)
        fresh = [p for p in victims if p not in state.pods or p in state.unsure]  # unsure: maybe routed again
        taken = set(drainer.cordon(est.service, fresh)) if fresh else set()
        for name in fresh:
            if name in taken:
                state.pods[name] = (variant, now)
                state.unsure.discard(name)
        busy = [p for p in victims if p in state.pods and pods[p].running + pods[p].waiting > 0
                and now - state.pods[p][1] < timeout_s]
        done = [p for p in victims if p not in busy]
        out[variant] = cur - k_start - unnamed - len(done)
        first[variant] = done
        if busy:
            notes.append(f"{variant}: draining {len(busy)} pod(s) before removal")
        for p in done:
            if p in state.pods:
                state.removing[p] = state.pods.pop(p)
                state.unsure.discard(p)
    return out, first, notes


def restore(drainer: Drainer, state: DrainState, service: str, landed: Collection[str]) -> list[str]:
    """Put back in routing the pods ``drain`` named for removal this tick (``state.removing``) whose
    variant's write did not land, and empty ``state.removing``. The pods go back one at a time
    (``_uncordon``); where an uncordon raises, that pod and those after it are tracked as draining
    again (``state.pods``, with when they were taken out), so the next ``drain`` removes them or puts
    them back, and the exception propagates; those put back before it are untracked.

    Args:
        drainer: puts pods back in routing (``uncordon``).
        state: the service's drain state (updated).
        service: the service's name.
        landed: the variants whose scale write was applied this tick; any other (refused, raised, not
            made) removed none of its pods.

    Returns:
        The pods put back in routing, in ``state.removing``'s order.

    Raises:
        Whatever ``drainer.uncordon`` raises.
    """
    held, state.removing = state.removing, {}
    back = [p for p, (variant, _) in held.items() if variant not in landed]
    if back:
        state.pods.update((p, held[p]) for p in back)  # tracked until its uncordon returns
        _uncordon(drainer, state, service, back)
    return back


def _uncordon(drainer: Drainer, state: DrainState, service: str, pods: list[str]) -> None:
    """Put ``pods`` (tracked in ``state.pods``) back in routing, one ``drainer.uncordon`` call per pod, in
    order, each untracked once its call returns; so where a call raises, the pods put back before it are
    untracked and that pod and the rest stay tracked as draining (the next ``drain`` removes them or puts
    them back), that pod marked unsure (``DrainState.unsure``), and the exception propagates.

    Raises:
        Whatever ``drainer.uncordon`` raises.
    """
    for p in pods:
        try:
            drainer.uncordon(service, [p])
        except Exception:
            state.unsure.add(p)  # it may have gone back before the call raised
            raise
        del state.pods[p]
        state.unsure.discard(p)
