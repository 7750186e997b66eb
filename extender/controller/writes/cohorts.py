"""Where a ClusterQueue sits in the cohort tree (pure, over the engine's specs): Kueue's path for
preemption messages, and the tree its quota is counted in - the scope of its releases and
admissions (releases.py)."""

from __future__ import annotations

from gpuqueue.extender.quota.engine import QuotaEngine


def chain_of(engine: QuotaEngine | None, cq: str) -> list[str] | None:
    """The ClusterQueue and its cohorts up to the root; None without an engine or on a cycle."""
    if engine is None:
        return None
    parts = [cq]
    spec = engine.state.cq_specs.get(cq)
    cohort = spec.cohort if spec else None
    seen: set[str] = set()
    while cohort:
        if cohort in seen:
            return None
        seen.add(cohort)
        parts.append(cohort)
        cspec = engine.state.cohort_specs.get(cohort)
        cohort = cspec.parent if cspec else None
    return parts


def path(engine: QuotaEngine | None, cq: str) -> str:
    """Kueue's `/cohort/.../clusterqueue` path of a ClusterQueue in the cohort tree."""
    parts = chain_of(engine, cq)
    return "/" + "/".join(reversed(parts)) if parts else ""


def tree(engine: QuotaEngine | None, cq: str | None) -> str | None:
    """The cohort tree a ClusterQueue's quota lives in; None when it cannot be told."""
    parts = chain_of(engine, cq) if cq else None
    if not parts:
        return None
    return f"cohort/{parts[-1]}" if len(parts) > 1 else f"clusterqueue/{cq}"
