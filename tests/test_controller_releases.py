"""An admission waits for exactly the releases under way when it was decided (docs/controller.md,
"The order of writes"), however many there are."""

import asyncio
import random

from gpuqueue.extender.controller.writes.releases import Releases


async def settled(task: asyncio.Task) -> bool:
    for _ in range(3):
        await asyncio.sleep(0)
    return task.done()


async def test_nothing_under_way_means_no_wait():
    r = Releases()
    assert r.barrier() is None
    rid = r.start()
    r.end(rid)
    assert r.barrier() is None


async def test_waits_for_earlier_releases_only():
    r = Releases()
    a, b = r.start(), r.start()
    barrier = r.barrier()
    later = r.start()  # started after the decision: not waited for
    waiter = asyncio.ensure_future(r.wait(barrier))
    r.end(b)
    assert not await settled(waiter)
    r.end(a)
    assert await settled(waiter) and waiter.result() is True
    assert len(r) == 1 and r.barrier() is not None
    r.end(later)


async def test_an_abandoned_release_stops_the_admission():
    r = Releases()
    a = r.start()
    barrier = r.barrier()
    waiter = asyncio.ensure_future(r.wait(barrier))
    r.end(a, abandoned=True)
    assert await settled(waiter) and waiter.result() is False


async def test_an_abandonment_before_the_decision_does_not_count():
    r = Releases()
    old = r.start()
    r.end(old, abandoned=True)
    a = r.start()
    barrier = r.barrier()
    r.end(a)
    assert await r.wait(barrier) is True


async def test_an_abandoned_later_release_does_not_count():
    r = Releases()
    a = r.start()
    barrier = r.barrier()
    later = r.start()
    waiter = asyncio.ensure_future(r.wait(barrier))
    r.end(later, abandoned=True)
    r.end(a)
    assert await settled(waiter) and waiter.result() is True


async def test_cancel_all_releases_every_waiter_with_no():
    r = Releases()
    r.start()
    barrier = r.barrier()
    waiters = [asyncio.ensure_future(r.wait(barrier)) for _ in range(3)]
    await asyncio.sleep(0)
    late = r.barrier()  # decided before, waits only after the cancel
    r.cancel_all()
    assert await r.wait(late) is False
    assert all([await settled(w) for w in waiters])
    assert [w.result() for w in waiters] == [False] * 3
    assert r.barrier() is None


async def test_many_releases_ending_in_any_order():
    r = Releases()
    rng = random.Random(8)
    ids, waiters = [], []
    for _ in range(50):
        ids.extend(r.start() for _ in range(rng.randint(1, 40)))
        waiters.append((max(ids), asyncio.ensure_future(r.wait(r.barrier()))))
    rng.shuffle(ids)
    ended: set[int] = set()
    for rid in ids:
        r.end(rid)
        ended.add(rid)
        await asyncio.sleep(0)
        for upto, w in waiters:
            # a waiter is done exactly when every release up to its barrier has ended
            assert w.done() == all(i in ended for i in range(1, upto + 1)), (upto, rid)
    assert all(w.result() is True for _, w in waiters)


async def test_an_admission_waits_only_for_its_own_tree_and_for_releases_of_no_known_tree():
    r = Releases()
    other = r.start("cohort/b")
    assert r.barrier("cohort/a") is None  # nothing under way in its tree
    own, unknown = r.start("cohort/a"), r.start(None)
    waiter = asyncio.ensure_future(r.wait(r.barrier("cohort/a")))
    r.end(own)
    assert not await settled(waiter)  # the release of no known tree still counts
    r.end(unknown)
    assert await settled(waiter) and waiter.result() is True
    assert len(r) == 1  # the other tree's release is still open; nobody in tree a waited for it
    everything = asyncio.ensure_future(r.wait(r.barrier()))  # no tree given: waits for all
    assert not await settled(everything)
    r.end(other)
    assert await settled(everything) and everything.result() is True


async def test_an_abandoned_release_of_another_tree_does_not_stop_the_admission():
    r = Releases()
    other, own = r.start("cohort/b"), r.start("cohort/a")
    waiter = asyncio.ensure_future(r.wait(r.barrier("cohort/a")))
    r.end(other, abandoned=True)
    r.end(own)
    assert await settled(waiter) and waiter.result() is True


async def test_after_the_trees_change_what_was_open_counts_for_every_tree():
    r = Releases()
    before = r.start("cohort/b")
    r.regroup()  # e.g. a ClusterQueue moved from cohort b to cohort a
    after = r.start("cohort/b")
    waiter = asyncio.ensure_future(r.wait(r.barrier("cohort/a")))
    assert not await settled(waiter)
    r.end(before)
    assert await settled(waiter) and waiter.result() is True  # `after` started under the new trees
    assert r.barrier("cohort/a") is None
    r.end(after)
