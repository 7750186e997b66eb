"""The extender's HTTPS tests again, on uvloop's loop and its own TLS transport: the endpoints,
TLS versions and ciphers, client certificates, the body limit and the byte-level HTTP cases."""

import asyncio

from gpuqueue import eventloop
from tests.test_extender_client_cert import *  # noqa: F401,F403
from tests.test_extender_http import *  # noqa: F401,F403
from tests.test_extender_limits import *  # noqa: F401,F403
from tests.test_scheduler_extender import *  # noqa: F401,F403


async def test_these_tests_run_on_uvloop():
    import uvloop

    assert isinstance(asyncio.get_running_loop(), uvloop.Loop)


def test_the_servers_loop_is_uvloops_unless_asked_otherwise(monkeypatch):
    import uvloop

    async def loop_type():
        return type(asyncio.get_running_loop())

    assert issubclass(eventloop.run(loop_type()), uvloop.Loop)
    monkeypatch.setenv("GPUQUEUE_EVENT_LOOP", "asyncio")
    assert not issubclass(eventloop.run(loop_type()), uvloop.Loop)
