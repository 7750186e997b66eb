"""Reduce a failing (world, history) further than Hypothesis' shrinker manages in its time
budget: delta debugging on the history, then dropping queues, cohorts and limits, keeping a
failure of the same invariant. Used by hand to write the regression tests:

    PYTHONPATH=. python -m tests.strategies.reduce contention 200

searches (no shrinking) for a failing example in the named strategy pair and prints the
reduced world and history as Python literals.
"""

from __future__ import annotations

import dataclasses
import sys

from hypothesis import HealthCheck, Phase, given, settings

from tests.strategies.quota_oracle import InvariantViolation, run_history
from tests.strategies.quota_world import World, contended_worlds, histories, workload_operations, worlds


def failure(world: World, history: list) -> str | None:
    try:
        run_history(world, history)
    except InvariantViolation as exc:
        return str(exc).split(":", 1)[0]
    except Exception as exc:  # the engine itself raising is a finding too
        return f"crash {type(exc).__name__}"
    return None


def ddmin(world: World, history: list, kind: str) -> list:
    n = 2
    while len(history) >= 2:
        chunk = max(1, len(history) // n)
        for i in range(0, len(history), chunk):
            candidate = history[:i] + history[i + chunk:]
            if failure(world, candidate) == kind:
                history, n = candidate, max(n - 1, 2)
                break
        else:
            if chunk == 1:
                break
            n = min(len(history), n * 2)
    return history


def simpler_worlds(world: World):
    for i in range(len(world.queues) - 1, -1, -1):
        if len(world.queues) > 1:
            yield dataclasses.replace(world, queues=world.queues[:i] + world.queues[i + 1:])
    if world.fair is not None and len(world.fair) > 1:
        for s in world.fair:
            yield dataclasses.replace(world, fair=(s,))
    for i, q in enumerate(world.queues):
        for field, plain in (("within", "Never"), ("reclaim", "Never"), ("borrow", "Never"),
                             ("strategy", "BestEffortFIFO"), ("weight", 1000), ("only_team", None),
                             ("max_priority_threshold", None)):
            if getattr(q, field) != plain:
                yield dataclasses.replace(world, queues=world.queues[:i] + (dataclasses.replace(q, **{field: plain}),)
                                          + world.queues[i + 1:])
        for j, e in enumerate(q.quotas):
            for simple in (e._replace(borrowing_limit=None), e._replace(lending_limit=None)):
                if simple != e:
                    quotas = q.quotas[:j] + (simple,) + q.quotas[j + 1:]
                    yield dataclasses.replace(world, queues=world.queues[:i] + (dataclasses.replace(q, quotas=quotas),)
                                              + world.queues[i + 1:])
    for i, c in enumerate(world.cohorts):
        if c.quotas:
            yield dataclasses.replace(world, cohorts=world.cohorts[:i] + (dataclasses.replace(c, quotas=()),)
                                      + world.cohorts[i + 1:])


def reduce(world: World, history: list) -> tuple[World, list, str]:
    kind = failure(world, history)
    assert kind is not None, "the example does not fail"
    changed = True
    while changed:
        changed = False
        history = ddmin(world, history, kind)
        for w in simpler_worlds(world):
            if failure(w, history) == kind:
                world, changed = w, True
                break
    return world, history, kind


PAIRS = {
    "random": (worlds(), histories()),
    "contention": (contended_worlds(), histories(ops=workload_operations())),
}


def search(name: str, examples: int) -> tuple[World, list] | None:
    found: list = []
    world_st, history_st = PAIRS[name]

    @settings(max_examples=examples, phases=[Phase.generate], database=None, deadline=None,
              suppress_health_check=list(HealthCheck))
    @given(world_st, history_st)
    def probe(world, history):
        if not found and failure(world, history) is not None:
            found.append((world, history))

    probe()
    return found[0] if found else None


if __name__ == "__main__":
    hit = search(sys.argv[1], int(sys.argv[2]))
    if hit is None:
        print("no failure found")
    else:
        w, h, kind = reduce(*hit)
        print(kind)
        print("world =", repr(w))
        print("history =", repr(h))
        try:
            run_history(w, h)
        except Exception as exc:
            print(exc)
