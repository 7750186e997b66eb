"""The controller's API client skips aiohttp's per-request proxy/.netrc lookups only when no proxy
variable is set, so a deployment behind a proxy still reaches the API server through it; calls that
move quota take a free connection before the others."""

import pytest
from kubernetes_asyncio import client

from gpuqueue.extender.controller.kubeapi import skip_environment_lookups

PROXY_VARIABLES = ("http_proxy", "https_proxy", "all_proxy", "ws_proxy", "wss_proxy")


@pytest.fixture
def no_proxy_env(monkeypatch):
    for v in PROXY_VARIABLES:
        monkeypatch.delenv(v, raising=False)
        monkeypatch.delenv(v.upper(), raising=False)
    return monkeypatch


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

    from gpuqueue.extender.controller.kubeapi import INFORM, ORDINARY, URGENT, Slots

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

    from gpuqueue.extender.controller.kubeapi import ORDINARY, URGENT, Slots

    slots = Slots(1)
    await slots.take(ORDINARY)
    order: list[str] = []

    async def call(name: str, cls: int, tag: str | None = None):
        await slots.take(cls, tag)
        order.append(name)
        slots.give()

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


async def test_a_waiting_call_withdrawn_is_never_sent_and_the_others_go_on():
    import asyncio

    import pytest

    from gpuqueue.extender.controller.kubeapi import INFORM, ORDINARY, Slots

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


async def test_within_a_class_a_call_of_higher_priority_goes_first_fifo_among_equals():
    """Issue 16: a large Job's Workload creation does not wait behind the small Jobs' creations."""
    import asyncio

    from gpuqueue.extender.controller.kubeapi import INFORM, ORDINARY, Slots

    slots = Slots(1)
    await slots.take(ORDINARY)
    order: list[str] = []

    async def call(name: str, cls: int, priority: int):
        await slots.take(cls, None, priority)
        order.append(name)
        slots.give()

    tasks = [asyncio.ensure_future(call(name, cls, prio)) for name, cls, prio in (
        ("small-1", ORDINARY, 0), ("small-2", ORDINARY, 0), ("inform-high", INFORM, 1000),
        ("medium", ORDINARY, 100), ("large", ORDINARY, 200), ("small-3", ORDINARY, 0))]
    await asyncio.sleep(0)
    assert slots.waiting(ORDINARY) == 5 and slots.waiting() == 6
    slots.give()
    await asyncio.gather(*tasks)
    assert order == ["large", "medium", "small-1", "small-2", "small-3", "inform-high"]
    assert slots.waiting() == 0
