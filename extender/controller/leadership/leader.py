"""Leader election on a coordination.k8s.io/v1 Lease, as client-go's leaderelection does it:
expiry is judged by the follower's own clock since it last saw the record change (no clock
comparison between replicas), a takeover is an update carrying the resourceVersion read (a 409
means someone else won), and a leader that cannot renew within its deadline steps down."""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
import time
from typing import Awaitable, Callable

from gpuqueue.extender.controller.client import kinds as K
from gpuqueue.extender.controller.client.kubeapi import CALL_CLASS, URGENT, KubeApi, is_status

log = logging.getLogger("gpuqueue.leader")


def _micro_now() -> str:
    return dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class LeaderElector:
    def __init__(self, kube: KubeApi, *, namespace: str, name: str, identity: str,
                 on_started: Callable[[], Awaitable[None]], on_stopped: Callable[[], Awaitable[None]],
                 lease_duration: float = 15.0, renew_deadline: float = 10.0, retry_period: float = 2.0,
                 follower_period: float | None = None) -> None:
        """`follower_period`: how often a follower reads the Lease (default every 0.5 s, or every
        `retry_period` when that is shorter): a Lease released on a clean shutdown is taken within
        it, where client-go's followers wait up to a whole retry period (2 s); a read every 0.5 s
        costs the API server nothing."""
        self.kube, self.namespace, self.name, self.identity = kube, namespace, name, identity
        self.on_started, self.on_stopped = on_started, on_stopped
        self.lease_duration, self.renew_deadline, self.retry_period = lease_duration, renew_deadline, retry_period
        self.follower_period = min(retry_period, 0.5) if follower_period is None else follower_period
        self.leading = False
        self._observed: tuple[str, str] | None = None  # (holder, renewTime) last seen
        self._observed_at = 0.0
        self._last_renew = 0.0

    async def run(self) -> None:
        CALL_CLASS.set(URGENT)  # a renewal never waits behind the controller's queue of writes
        try:
            while True:
                # A leader's round may not outlast its renew deadline: requests are retried while
                # the API is unreachable, and a leader that waited on them would go on leading
                # after its Lease expired and another replica took over.
                limit = self._last_renew + self.renew_deadline - time.monotonic() if self.leading else None
                try:
                    # not wait_for: on 3.11 it can lose a cancellation, and this loop would go on
                    async with asyncio.timeout(None if limit is None else max(limit, 0.0)):
                        await self._round()
                except asyncio.CancelledError:
                    raise
                except Exception as exc:  # noqa: BLE001 - the API is down: keep trying, step down if leading
                    log.warning("lease %s/%s: %s", self.namespace, self.name,
                                "no answer before the renew deadline" if isinstance(exc, TimeoutError) else exc)
                    if self.leading and time.monotonic() - self._last_renew >= self.renew_deadline:
                        await self._step_down("could not renew the lease in time")
                await asyncio.sleep(self.retry_period if self.leading else self.follower_period)
        finally:
            if self.leading:
                await self._release()

    async def _round(self) -> None:
        try:
            lease = await self.kube.get(K.LEASES, self.namespace, self.name)
        except Exception as exc:
            if not is_status(exc, 404):
                raise
            await self._create()
            return
        spec = lease.get("spec") or {}
        holder = spec.get("holderIdentity") or ""
        record = (holder, spec.get("renewTime") or "")
        now = time.monotonic()
        if record != self._observed:
            self._observed, self._observed_at = record, now
        if holder == self.identity:
            await self._renew(lease)
            return
        if self.leading:
            await self._step_down(f"the lease is held by {holder}")
        duration = spec.get("leaseDurationSeconds") or self.lease_duration
        if holder and now - self._observed_at < duration:
            return  # someone else leads
        await self._take(lease)

    async def _create(self) -> None:
        now = _micro_now()
        body = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                "metadata": {"name": self.name, "namespace": self.namespace},
                "spec": {"holderIdentity": self.identity, "leaseDurationSeconds": int(self.lease_duration),
                         "acquireTime": now, "renewTime": now, "leaseTransitions": 0}}
        try:
            await self.kube.create(K.LEASES, self.namespace, body)
        except Exception as exc:
            if is_status(exc, 409):
                return
            raise
        await self._start()

    async def _take(self, lease: dict) -> None:
        now = _micro_now()
        spec = dict(lease.get("spec") or {})
        spec.update(holderIdentity=self.identity, leaseDurationSeconds=int(self.lease_duration), acquireTime=now,
                     renewTime=now, leaseTransitions=int(spec.get("leaseTransitions") or 0) + 1)
        try:
            await self.kube.replace(K.LEASES, {**lease, "spec": spec})
        except Exception as exc:
            if is_status(exc, 409):
                return  # another replica took it first
            raise
        log.info("%s took the lease %s/%s", self.identity, self.namespace, self.name)
        await self._start()

    async def _renew(self, lease: dict) -> None:
        spec = dict(lease.get("spec") or {}, renewTime=_micro_now())
        try:
            await self.kube.replace(K.LEASES, {**lease, "spec": spec})
        except Exception as exc:
            if is_status(exc, 409):
                return  # re-read next round
            raise
        self._last_renew = time.monotonic()
        if not self.leading:
            await self._start()

    async def _start(self) -> None:
        self._last_renew = time.monotonic()
        self.leading = True
        await self.on_started()

    async def _step_down(self, why: str) -> None:
        log.warning("%s stops leading: %s", self.identity, why)
        self.leading = False
        await self.on_stopped()

    async def _release(self) -> None:
        """On a clean shutdown hand the lease over at once (client-go's ReleaseOnCancel)."""
        self.leading = False
        try:
            lease = await self.kube.get(K.LEASES, self.namespace, self.name)
            spec = lease.get("spec") or {}
            if spec.get("holderIdentity") == self.identity:
                spec = dict(spec, holderIdentity="", leaseDurationSeconds=1, renewTime=_micro_now())
                await self.kube.replace(K.LEASES, {**lease, "spec": spec})
        except Exception as exc:  # noqa: BLE001
            log.info("lease not released: %s", exc)
