"""Fair sharing between borrowers (Kueue's fairSharing): filled in by the fair-sharing work."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class FairSharing:
    strategies: tuple[str, ...] = ("LessThanOrEqualToFinalShare", "LessThanInitialShare")
