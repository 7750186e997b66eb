"""The namespace label that sends unlabelled Jobs to the webhook: ``gpuqueue.io/default-local-queue=true``
on every namespace that has a LocalQueue named ``default`` (and that gpuqueue manages: within
``managedJobsNamespaceSelector``, not exempt from enforcement), and on no other.

Kueue's LocalQueue defaulting needs its webhook to see every Job of the cluster; gpuqueue's webhook
configurations see a Job without a queue label only in a namespace carrying this label (or the
operator's ``gpuqueue.io/managed=true``), so that an unreachable webhook (``failurePolicy: Fail``)
blocks Jobs only where a default LocalQueue was going to queue them anyway. The label follows the
LocalQueue within a debounce and one PATCH: the next Job created there is queued (or, once the
LocalQueue is gone, left alone); Jobs already created are not touched.

Only the leader writes. ``wanted_labels`` is the pure decision; ``DefaultQueueLabels`` the shell.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Collection, Iterable, Mapping

from gpuqueue.extender.controller.client import kinds as K
from gpuqueue.extender.controller.client.kubeapi import KubeApi
from gpuqueue.jobframework.managed import DEFAULT_LOCAL_QUEUE, ManagedJobsConfig, StaticQueueView, namespace_is_managed
from gpuqueue.kube import Informer

log = logging.getLogger("gpuqueue.controller")

DEFAULT_LOCAL_QUEUE_LABEL = "gpuqueue.io/default-local-queue"
DEBOUNCE = 0.05  # seconds to gather LocalQueue and namespace changes before writing
RETRY, RETRY_MAX = 1.0, 60.0  # seconds before a failed PATCH is tried again, doubled while it keeps failing


def wanted_labels(namespaces: Mapping[str, Mapping[str, str]], local_queues: Collection[tuple[str, str]],
                  config: ManagedJobsConfig, exempt: Collection[str]) -> dict[str, bool]:
    """For each namespace whose label is wrong: True to set it, False to remove it."""
    changes = {}
    for name, labels in namespaces.items():
        # The selector is matched without gpuqueue's own label, so the label cannot keep itself.
        own = {k: v for k, v in labels.items() if k != DEFAULT_LOCAL_QUEUE_LABEL}
        want = ((name, DEFAULT_LOCAL_QUEUE) in local_queues and name not in exempt
                and namespace_is_managed(name, StaticQueueView(namespaces={name: own}), config))
        if want != (labels.get(DEFAULT_LOCAL_QUEUE_LABEL) == "true"):
            changes[name] = want
    return changes


class DefaultQueueLabels:
    def __init__(self, kube: KubeApi, informers: Mapping[str, Informer], config: ManagedJobsConfig,
                 exempt: Iterable[str], leading: Callable[[], bool]) -> None:
        """``leading``: whether this replica may write now (leader, caches synced)."""
        self.kube = kube
        self.namespaces = informers["namespaces"]
        self.local_queues = informers["localqueues"]
        self.config = config
        self.exempt = frozenset(exempt)
        self.leading = leading
        self._dirty = asyncio.Event()
        for inf in (self.namespaces, self.local_queues):
            inf.add_handler(on_add=self._changed, on_update=lambda old, new: self._changed(new),
                            on_delete=self._changed)

    def _changed(self, _obj: dict | None = None) -> None:
        self._dirty.set()

    def poke(self) -> None:
        """Look again (this replica has just started leading)."""
        self._dirty.set()

    def changes(self) -> dict[str, bool]:
        namespaces = {o["metadata"]["name"]: (o["metadata"].get("labels") or {}) for o in self.namespaces.list()}
        queues = {(o["metadata"].get("namespace"), o["metadata"]["name"]) for o in self.local_queues.list()}
        return wanted_labels(namespaces, queues, self.config, self.exempt)

    async def loop(self) -> None:
        backoff = RETRY
        while True:
            await self._dirty.wait()
            await asyncio.sleep(DEBOUNCE)
            self._dirty.clear()
            if not self.leading():
                continue
            failed = False
            for name, want in sorted(self.changes().items()):
                failed |= not await self._write(name, want)
            if failed:  # (a 403 from RBAC that lacks `patch namespaces` would otherwise log every second)
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, RETRY_MAX)
                self._dirty.set()
            else:
                backoff = RETRY

    async def _write(self, name: str, want: bool) -> bool:
        patch = {"metadata": {"labels": {DEFAULT_LOCAL_QUEUE_LABEL: "true" if want else None}}}
        try:
            await self.kube.merge_patch(K.NAMESPACES, None, name, patch)
        except Exception as exc:  # noqa: BLE001 - retried on the next round
            log.warning("namespace %s: %s label %s failed: %s", name, "setting" if want else "removing",
                        DEFAULT_LOCAL_QUEUE_LABEL, exc)
            return False
        log.info("namespace %s: label %s %s (LocalQueue %s %s)", name, DEFAULT_LOCAL_QUEUE_LABEL,
                 "set" if want else "removed", DEFAULT_LOCAL_QUEUE, "exists" if want else "gone or not managed")
        return True
