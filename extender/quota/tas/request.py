"""A pod set's topology request, read from its pod template's annotations as Kueue reads them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

from gpuqueue.api import topology as T


@dataclass(frozen=True, slots=True)
class TopologyRequest:
    required: str | None = None
    preferred: str | None = None
    unconstrained: bool = False
    slice_level: str | None = None
    slice_size: int | None = None
    # no annotation: a pod set given a TAS flavor is placed as if unconstrained (Kueue's implied default)
    implied: bool = False

    def level(self, levels: tuple[str, ...]) -> str | None:
        """The level the pod set is placed at (Kueue's levelKeyWithImpliedFallback)."""
        if self.required is not None:
            return self.required
        if self.preferred is not None:
            return self.preferred
        if self.slice_level is not None and not self.unconstrained:
            return levels[0]
        if self.unconstrained or self.implied:
            return levels[-1]
        return None

    @property
    def is_unconstrained(self) -> bool:
        return self.unconstrained or self.implied or (
            self.required is None and self.preferred is None and self.slice_level is not None)


IMPLIED = TopologyRequest(implied=True)


def from_annotations(annotations: Mapping[str, str]) -> TopologyRequest | None:
    """None when the pod set asks for no topology."""
    required = annotations.get(T.REQUIRED_ANNOTATION) or None
    preferred = annotations.get(T.PREFERRED_ANNOTATION) or None
    unconstrained = (annotations.get(T.UNCONSTRAINED_ANNOTATION) or "").lower() == "true"
    slice_level = annotations.get(T.SLICE_REQUIRED_ANNOTATION) or None
    raw_size = annotations.get(T.SLICE_SIZE_ANNOTATION)
    try:
        slice_size = int(raw_size) if raw_size else None
    except ValueError:
        slice_size = None
    if required is None and preferred is None and not unconstrained and slice_level is None:
        return None
    return TopologyRequest(required, preferred, unconstrained, slice_level, slice_size)
