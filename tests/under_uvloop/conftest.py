"""The tests of this folder run on uvloop's event loop, the one `gpuqueue extender` and
`gpuqueue webhook` serve on where uvloop is installed (gpuqueue/eventloop.py)."""

import pytest

uvloop = pytest.importorskip("uvloop")


def pytest_asyncio_loop_factories(config, item):
    return {"uvloop": uvloop.new_event_loop}
