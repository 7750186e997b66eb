"""Pods decoded in the last few scheduling attempts, keyed by their exact bytes.

kube-scheduler sends the same pod, byte for byte, to /filter and then /prioritize of one
attempt (shared/fixtures/k8s-1.24/extender: same uid, resourceVersion and everything else),
and /prioritize's NodeNames are exactly the names /filter answered. So /prioritize finds the
pod already decoded and, most of the time, its candidate list already built from the cache's
own name objects. An entry is reached only through identical pod bytes, so it can never
stand for another pod or a changed one; it holds nothing about the cluster: verdicts and scores
are read fresh on every call. (An admitted pod's /filter passes one node, so kube-scheduler calls
/prioritize only for pods the extender does not judge, which are scored neutral.)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from gpuqueue.extender.scheduler.wire import Pod

DEFAULT_SIZE = 8  # kube-scheduler runs one scheduling cycle at a time; more would only keep memory cold
# Entries are found by the length and the start of the pod's JSON (metadata first: name,
# namespace, uid, resourceVersion), then the whole is compared: hashing a pod of 20 KB costs
# ~17 us, comparing it ~1 us. Pods alike in both only share a slot, never an entry.
_LOOKUP_PREFIX = 512


@dataclass(slots=True)
class DecodedPod:
    pod: "Pod"
    raw: bytes = b""  # the pod's exact JSON, set by PodMemo.put
    # the resources the body's spec asks for, or the error message it gives; None until asked
    # (only for a pod the view's cache does not know: a known pod is judged as the cache has it)
    requested: frozenset[str] | str | None = None
    # the NodeNames /filter last answered for this pod: JSON bytes and the list itself
    answered: bytes | None = None
    answered_names: list[str] | None = None


class PodMemo:
    def __init__(self, size: int = DEFAULT_SIZE) -> None:
        self.size = size
        self._entries: dict[tuple[int, bytes], DecodedPod] = {}

    def get(self, key: bytes) -> DecodedPod | None:
        entry = self._entries.get((len(key), key[:_LOOKUP_PREFIX]))
        return entry if entry is not None and entry.raw == key else None

    def put(self, key: bytes, entry: DecodedPod) -> DecodedPod:
        slot = (len(key), key[:_LOOKUP_PREFIX])
        entries = self._entries
        entries.pop(slot, None)
        if len(entries) >= self.size:
            del entries[next(iter(entries))]  # the oldest
        entry.raw = key
        entries[slot] = entry
        return entry

    def __len__(self) -> int:
        return len(self._entries)
