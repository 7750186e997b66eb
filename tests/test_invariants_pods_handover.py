"""tests/test_invariants_pods.py's hostile histories with two replicas and leader changes: each
`restart` of a history is the leader's end, alternately a crash (the Lease not released: the other
replica takes it when it expires; the first call kube-scheduler makes before that fails with an
`Error`, the call the dead replica was answering) and a clean stop (the Lease released), and a new
replica started in its place, as the Deployment would. The dead replica's endpoint is dropped at
once, as tests/e2e/forwarder.py does: a call that fails after the takeover is not modelled (on 1.24
nothing would move that pod; docs/reliability.md, "Two replicas"). kube-scheduler's calls
go to the live replicas in turn. The safety and liveness oracles must hold across the changes: a
pod parked by a cut call while no leader ran is moved by the next leader (docs/extender.md)."""

from __future__ import annotations

import dataclasses

import orjson
import pytest
from kubernetes_asyncio import client

from gpuqueue.extender.controller.clusterview.view import ControllerClusterView
from gpuqueue.extender.controller.controller import Controller
from tests.controller_support import FAST, eventually
from tests.test_invariants_pods import CI_SEEDS, Loop, ask, loop_stats, run_history
from tests.standin.schedqueue import CURRENT, V1_24

# a short Lease, so that a crash's takeover fits the liveness bound's scale (the shipped 15 s is
# measured on real servers: tests/e2e/test_ha.py)
ELECTED = dataclasses.replace(FAST, leader_elect=True, lease_duration=0.5, renew_deadline=0.35, retry_period=0.1)
CUT_CALLS = 1  # the call in flight when the replica dies (kube-scheduler sends one at a time)


class HandoverLoop(Loop):
    def __init__(self, *args, **kw) -> None:
        super().__init__(*args, **kw)
        self.replicas: list[tuple[Controller, ControllerClusterView]] = []
        self.started = self.turn = self.changes = self.crashes = self.cut = 0

    async def _start_replica(self) -> None:
        self.started += 1
        ctl = Controller(client.ApiClient(self.h.api.client_configuration()), ELECTED,
                         identity=f"replica-{self.started}")
        view = ControllerClusterView(ctl)
        self.h.controllers.append(ctl)
        await ctl.start()
        await ctl.wait_synced()  # ready: only then does the Service send it calls
        self.replicas.append((ctl, view))

    def _leader(self) -> Controller | None:
        return next((c for c, _ in self.replicas if c.leader and c.recovered), None)

    async def start_controller(self) -> None:
        await self.h.namespace("gpuqueue-system")
        while len(self.replicas) < 2:
            await self._start_replica()
        await eventually(lambda: self._leader() is not None, 10, "a replica leads")
        self.ctl, self.view = self.replicas[0]
        self.up.set()

    async def extender(self, verb: str, body: bytes) -> bytes:
        if self.cut and self._leader() is None:
            self.cut -= 1
            return orjson.dumps({"Error": "Post \"https://gpuqueue-extender:8443/filter\": connection reset by peer"})
        ctl, view = self.replicas[self.turn % len(self.replicas)]
        self.turn += 1
        return await ask(view, verb, body, self.cache_wait)

    async def restart(self) -> None:
        leader = self._leader()
        if leader is None:
            return  # a change under way
        self.changes += 1
        crash = self.changes % 2 == 1
        self.replicas = [(c, v) for c, v in self.replicas if c is not leader]
        self.ctl, self.view = self.replicas[0]
        if crash:
            self.crashes += 1
            self.cut = CUT_CALLS

            async def not_released() -> None:
                pass
            leader.elector._release = not_released
        await self.h.kill(leader)
        await self._start_replica()
        await eventually(lambda: self._leader() is not None, 10, "a replica leads again")
        self.cut = 0


@pytest.mark.parametrize("seed", CI_SEEDS)
async def test_the_hostile_histories_hold_across_leader_changes(seed):
    version = (V1_24, CURRENT)[seed % 2]
    loops: list[HandoverLoop] = []

    class Recorded(HandoverLoop):
        def __init__(self, *args, **kw) -> None:
            super().__init__(*args, **kw)
            loops.append(self)
    invariant, liveness = await run_history(seed, steps=20, version=version, loop_class=Recorded)
    loop = loops[0]
    print(f"seed {seed} ({version}, two replicas): {loop.changes} leader changes ({loop.crashes} crashes), "
          f"{len(liveness.waits)} pods owed a node, worst {liveness.worst:.2f} s to bind, {loop_stats(liveness)}")
    assert invariant.checks > 0 and invariant.peak_running_gpus > 0, "the history ran no GPU pod at all"
    assert invariant.violations == [], "\n".join(invariant.violations[:10])
    assert liveness.waits, "no admitted pod was owed a node"
    assert liveness.violations == [], "\n".join(liveness.violations[:10])
