"""Pods decoded in the last few scheduling attempts, keyed by their exact bytes.

kube-scheduler sends the same pod, byte for byte, to /filter and then /prioritize of one
attempt (tests/fixtures/k8s-1.24/extender: same uid, resourceVersion and everything else),
and /prioritize's NodeNames are exactly the names /filter answered. So /prioritize finds the
pod already decoded and, most of the time, its candidate list already built from the cache's
own name objects. An entry is reached only through identical pod bytes, so it can never
stand for another pod or a changed one; it holds nothing that depends on the cluster (no
verdict, no score, no node state): those are read fresh on every call.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from extender.scheduler.wire import Pod

DEFAULT_SIZE = 64  # kube-scheduler runs one scheduling cycle at a time; a few suffice


@dataclass(slots=True)
class DecodedPod:
    pod: "Pod"
    # (GPUs, tolerations) from the pod's spec, or the error message it gives; None until asked
    needs: tuple[int, tuple] | str | None = None
    # the NodeNames /filter last answered for this pod: JSON bytes and the list itself
    answered: bytes | None = None
    answered_names: list[str] | None = None


class PodMemo:
    def __init__(self, size: int = DEFAULT_SIZE) -> None:
        self.size = size
        self._entries: dict[bytes, DecodedPod] = {}

    def get(self, key: bytes) -> DecodedPod | None:
        return self._entries.get(key)

    def put(self, key: bytes, entry: DecodedPod) -> DecodedPod:
        entries = self._entries
        entries.pop(key, None)
        if len(entries) >= self.size:
            del entries[next(iter(entries))]  # the oldest
        entries[key] = entry
        return entry

    def __len__(self) -> int:
        return len(self._entries)
