"""The controller's API client skips aiohttp's per-request proxy/.netrc lookups only when no proxy
variable is set, so a deployment behind a proxy still reaches the API server through it; calls that
move quota take a free connection before the others."""

import pytest
from kubernetes_asyncio import client

from gpuqueue.extender.controller.client.kubeapi import skip_environment_lookups

PROXY_VARIABLES = ("http_proxy", "https_proxy", "all_proxy", "ws_proxy", "wss_proxy")


@pytest.fixture
def no_proxy_env(monkeypatch):
    for v in PROXY_VARIABLES:
        monkeypatch.delenv(v, raising=False)
        monkeypatch.delenv(v.upper(), raising=False)
    return monkeypatch



def recording(slots, order: list[str]):
    """A call that takes a slot of its class, notes its name in `order` and gives the slot back."""
    async def call(name: str, cls: int, tag: str | None = None):
        await slots.take(cls, tag)
        order.append(name)
        slots.give()
    return call

async def test_lookups_are_skipped_without_a_proxy_variable(no_proxy_env):
    async with client.ApiClient(client.Configuration(host="http://127.0.0.1:1")) as api:
        assert api.rest_client.pool_manager.trust_env
        assert skip_environment_lookups(api)
        assert not api.rest_client.pool_manager.trust_env


@pytest.mark.parametrize("variable", ["HTTPS_PROXY", "http_proxy", "ALL_PROXY"])
async def test_a_proxy_variable_keeps_the_environment_trusted(no_proxy_env, variable):
    no_proxy_env.setenv(variable, "http://proxy.example:3128")
    async with client.ApiClient(client.Configuration(host="http://127.0.0.1:1")) as api:
        assert not skip_environment_lookups(api)
        assert api.rest_client.pool_manager.trust_env


async def test_more_urgent_calls_take_the_next_free_slot_first():
    import asyncio

    from gpuqueue.extender.controller.client.kubeapi import INFORM, ORDINARY, URGENT, Slots

    slots = Slots(1)
    await slots.take(ORDINARY)  # the one slot is busy
    order: list[str] = []

    async def call(name: str, cls: int):
        await slots.take(cls)
        order.append(name)
        slots.give()

    tasks = [asyncio.ensure_future(call(name, cls)) for name, cls in (
        ("inform", INFORM), ("ordinary-1", ORDINARY), ("ordinary-2", ORDINARY), ("urgent", URGENT))]
    cancelled = asyncio.ensure_future(call("cancelled", URGENT))
    await asyncio.sleep(0)
    cancelled.cancel()
    await asyncio.sleep(0)
    slots.give()
    await asyncio.gather(*tasks)
    assert order == ["urgent", "ordinary-1", "ordinary-2", "inform"]
    await slots.take(ORDINARY)  # every slot came back: one free again


async def test_a_waiting_call_promoted_goes_after_the_urgent_ones_already_waiting():
    import asyncio

    from gpuqueue.extender.controller.client.kubeapi import ORDINARY, URGENT, Slots

    slots = Slots(1)
    await slots.take(ORDINARY)
    order: list[str] = []

    call = recording(slots, order)

    tasks = [asyncio.ensure_future(call(name, cls, tag)) for name, cls, tag in (
        ("ordinary", ORDINARY, None), ("creation", ORDINARY, "create-workload:ns/job"), ("urgent", URGENT, None))]
    await asyncio.sleep(0)
    assert slots.promote("create-workload:ns/job")
    assert not slots.promote("create-workload:ns/job")  # already urgent
    assert not slots.promote("nobody-waits")
    slots.give()
    await asyncio.gather(*tasks)
    assert order == ["urgent", "creation", "ordinary"]
    assert not slots.promote("create-workload:ns/job")  # done: forgotten


async def test_a_call_moved_to_the_front_of_a_class_goes_before_its_earlier_calls_after_the_urgent():
    import asyncio

    from gpuqueue.extender.controller.client.kubeapi import INFORM, ORDINARY, URGENT, Slots

    slots = Slots(1)
    await slots.take(ORDINARY)
    order: list[str] = []

    call = recording(slots, order)

    tasks = [asyncio.ensure_future(call(name, cls, tag)) for name, cls, tag in (
        ("creation-1", ORDINARY, None), ("creation-2", ORDINARY, None), ("status-a", INFORM, "status-a"),
        ("status-b", INFORM, "status-b"), ("urgent", URGENT, None), ("event", INFORM, None))]
    await asyncio.sleep(0)
    assert slots.promote("status-a", ORDINARY, front=True)
    assert slots.promote("status-b", ORDINARY, front=True)
    assert not slots.promote("status-a", ORDINARY, front=True)  # there already
    slots.give()
    await asyncio.gather(*tasks)
    assert order == ["urgent", "status-a", "status-b", "creation-1", "creation-2", "event"]


async def test_a_waiting_call_withdrawn_is_never_sent_and_the_others_go_on():
    import asyncio

    import pytest

    from gpuqueue.extender.controller.client.kubeapi import INFORM, ORDINARY, Slots

    slots = Slots(1)
    await slots.take(ORDINARY)
    order: list[str] = []

    async def call(name: str, tag: str | None = None):
        await slots.take(INFORM, tag)
        order.append(name)
        slots.give()

    moot = asyncio.ensure_future(call("moot", "pending-message:ns/job"))
    other = asyncio.ensure_future(call("other"))
    await asyncio.sleep(0)
    assert slots.withdraw("pending-message:ns/job")
    with pytest.raises(asyncio.CancelledError):
        await moot
    slots.give()
    await other
    assert order == ["other"]
    assert not slots.withdraw("pending-message:ns/job")  # nothing waits under that tag any more
    await slots.take(ORDINARY)  # every slot came back



async def test_promotions_and_withdrawals_among_thousands_waiting_keep_every_slot():
    """Promote and withdraw leave their old entries behind (no search through the waiting calls):
    every call still runs once or is withdrawn, FIFO within its class, and every slot comes back."""
    import asyncio

    from gpuqueue.extender.controller.client.kubeapi import INFORM, ORDINARY, URGENT, Slots

    slots = Slots(2)
    await slots.take(ORDINARY)
    await slots.take(ORDINARY)
    order: list[str] = []

    call = recording(slots, order)

    tasks = {f"c{i}": asyncio.ensure_future(call(f"c{i}", ORDINARY if i % 3 else INFORM, f"t{i}"))
             for i in range(3000)}
    await asyncio.sleep(0)
    assert slots.waiting() == 3000 and slots.waiting(ORDINARY) == 2000
    promoted = [f"c{i}" for i in range(1, 3000, 300) if i % 3]
    withdrawn = [f"c{i}" for i in range(0, 3000, 7) if f"c{i}" not in promoted]
    for name in promoted:
        assert slots.promote("t" + name[1:])
    for name in withdrawn:
        assert slots.withdraw("t" + name[1:])
    assert slots.waiting(URGENT) == len(promoted)
    slots.give()
    slots.give()
    done = await asyncio.gather(*tasks.values(), return_exceptions=True)
    assert sum(isinstance(d, asyncio.CancelledError) for d in done) == len(withdrawn)
    assert order[:len(promoted)] == promoted
    rest = [n for n in tasks if n not in promoted and n not in withdrawn]
    ordinary = [n for n in rest if int(n[1:]) % 3]
    assert order[len(promoted):] == ordinary + [n for n in rest if not int(n[1:]) % 3]
    assert slots.waiting() == 0
    await slots.take(ORDINARY)
    await slots.take(ORDINARY)  # both slots came back
