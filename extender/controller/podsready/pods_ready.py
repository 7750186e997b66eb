"""Kueue's waitForPodsReady, the pure part: its configuration, the Workload's PodsReady condition,
when an admitted Workload times out, and the requeue backoff (status.requeueState).

Kueue's facts carried over (pkg/controller/core/workload_controller.go, pkg/workload,
pkg/controller/jobframework/reconciler.go, apis/config/v1beta1 and v1beta2):
- PodsReady=False `WaitForStart` "Not all pods are ready or succeeded" until the pods first are
  all ready (or succeeded), then True `Started` "All pods reached readiness and the workload is
  running"; a pod lost after that makes it False `WaitForRecovery` "At least one pod has failed,
  waiting for recovery", and True `Recovered` once they are back.
- timed out `timeout` after Admitted (WaitForStart), or `recoveryTimeout` after PodsReady turned
  False (WaitForRecovery): Evicted reason `PodsReadyTimeout`, "Exceeded the PodsReady timeout NS/NAME",
  requeueState.count + 1 and requeueAt = now + base * 2^(count-1) (+ jitter 0.0001), capped at
  backoffMaxSeconds; past backoffLimitCount, deactivated instead (DeactivationTarget
  `RequeuingLimitExceeded` "exceeding the maximum number of re-queuing retries", then
  spec.active=false, evicted `DeactivatedDueToRequeuingLimitExceeded`).
- once requeueAt has passed: Requeued=True `BackoffFinished` "The workload backoff was finished".
"""

from __future__ import annotations

import random
from dataclasses import dataclass, replace
from typing import Any, Callable

from gpuqueue.api.duration import parse_duration
from gpuqueue.extender.quota.decisions import PODS_READY_TIMEOUT, Evicted  # the Evicted reason

PODS_READY = "PodsReady"
WAIT_FOR_START, WAIT_FOR_RECOVERY, STARTED, RECOVERED = "WaitForStart", "WaitForRecovery", "Started", "Recovered"
NOT_READY_MESSAGE = "Not all pods are ready or succeeded"
WAITING_FOR_RECOVERY_MESSAGE = "At least one pod has failed, waiting for recovery"
READY_MESSAGE = "All pods reached readiness and the workload is running"
DEACTIVATION_TARGET = "DeactivationTarget"
REQUEUING_LIMIT_EXCEEDED = "RequeuingLimitExceeded"
REQUEUING_LIMIT_MESSAGE = "exceeding the maximum number of re-queuing retries"
BACKOFF_FINISHED = "BackoffFinished"
BACKOFF_FINISHED_MESSAGE = "The workload backoff was finished"
JITTER = 0.0001  # Kueue's wait.NewBackoff(base, max, 2, 0.0001)

EVICTION, CREATION = "Eviction", "Creation"
V1BETA1 = "config.kueue.x-k8s.io/v1beta1"


@dataclass(frozen=True)
class WaitForPodsReady:
    timeout: float = 1800.0
    block_admission: bool = False
    recovery_timeout: float | None = 1800.0  # None: recovery is not timed
    timestamp: str = EVICTION
    backoff_limit_count: int | None = None  # None: requeued without end
    backoff_base_seconds: int = 60
    backoff_max_seconds: int = 3600


def from_kueue_configuration(doc: dict) -> WaitForPodsReady | None:
    """The Configuration's waitForPodsReady, defaulted as Kueue defaults it for the document's
    apiVersion, or None when it is off. ValueError naming the field for what Kueue refuses.

    v1beta2 has no `enable`: the section's presence turns it on (timeout 30m, blockAdmission
    false, recoveryTimeout the timeout's, "0s" for none). v1beta1: `enable` (false by default),
    timeout 5m, blockAdmission as enable, no recoveryTimeout unless set. gpuqueue reads `enable`
    in either, and leaves it off when the section is absent (docs/podsready.md says why)."""
    section = doc.get("waitForPodsReady")
    if section is None:
        return None
    where = "waitForPodsReady"
    if not isinstance(section, dict):
        raise ValueError(f"{where}: must be a mapping")
    v1beta1 = doc.get("apiVersion") == V1BETA1
    enable = section.get("enable", not v1beta1)
    if not isinstance(enable, bool):
        raise ValueError(f"{where}.enable: must be true or false, got {enable!r}")
    if not enable:
        return None
    unknown = set(section) - {"enable", "timeout", "blockAdmission", "requeuingStrategy", "recoveryTimeout"}
    if unknown:
        raise ValueError(f"{where}: unknown field {sorted(unknown)[0]!r}")
    timeout = _duration(section, "timeout", 300.0 if v1beta1 else 1800.0, where)
    if timeout == 0:
        raise ValueError(f"{where}.timeout: Required value: must be specified")
    block = section.get("blockAdmission", enable if v1beta1 else False)
    if not isinstance(block, bool):
        raise ValueError(f"{where}.blockAdmission: must be true or false, got {block!r}")
    recovery = _duration(section, "recoveryTimeout", None if v1beta1 else timeout, where)
    strategy = section.get("requeuingStrategy") or {}
    swhere = f"{where}.requeuingStrategy"
    if not isinstance(strategy, dict):
        raise ValueError(f"{swhere}: must be a mapping")
    unknown = set(strategy) - {"timestamp", "backoffLimitCount", "backoffBaseSeconds", "backoffMaxSeconds"}
    if unknown:
        raise ValueError(f"{swhere}: unknown field {sorted(unknown)[0]!r}")
    timestamp = strategy.get("timestamp", EVICTION)
    if timestamp not in (EVICTION, CREATION):
        raise ValueError(f'{swhere}.timestamp: Unsupported value: {timestamp!r}: supported values: "Creation", '
                         f'"Eviction"')
    return WaitForPodsReady(
        timeout=timeout, block_admission=block, recovery_timeout=recovery or None, timestamp=timestamp,
        backoff_limit_count=_count(strategy, "backoffLimitCount", None, swhere),
        backoff_base_seconds=_count(strategy, "backoffBaseSeconds", 60, swhere),
        backoff_max_seconds=_count(strategy, "backoffMaxSeconds", 3600, swhere))


def _duration(section: dict, field: str, default: float | None, where: str) -> float | None:
    raw = section.get(field)
    if raw is None:
        return default
    try:
        seconds = parse_duration(raw)
    except ValueError as exc:
        raise ValueError(f"{where}.{field}: {exc}") from None
    if seconds < 0:
        raise ValueError(f"{where}.{field}: Invalid value: {raw!r}: must be greater than or equal to 0")
    return seconds


def _count(section: dict, field: str, default: int | None, where: str) -> int | None:
    raw = section.get(field)
    if raw is None:
        return default
    if isinstance(raw, bool) or not isinstance(raw, int):
        raise ValueError(f"{where}.{field}: must be an integer, got {raw!r}")
    if raw < 0:
        raise ValueError(f"{where}.{field}: Invalid value: {raw}: must be greater than or equal to 0")
    return raw


# -- the Workload's PodsReady condition ---------------------------------------------------------------
def _condition(wl: dict | None, type_: str) -> dict | None:
    for c in ((wl or {}).get("status") or {}).get("conditions") or ():
        if c.get("type") == type_:
            return c
    return None


def pods_ready_condition(wl: dict, ready: bool) -> tuple[str, str, str]:
    """(status, reason, message) of PodsReady for an admitted Workload whose pods are all ready or
    succeeded (`ready`) or not: Kueue's generatePodsReadyCondition."""
    current = _condition(wl, PODS_READY)
    if ready:
        recovering = current is not None and current.get("reason") in (WAIT_FOR_RECOVERY, RECOVERED)
        return "True", RECOVERED if recovering else STARTED, READY_MESSAGE
    if current is not None and (current.get("status") == "True" or current.get("reason") == WAIT_FOR_RECOVERY):
        return "False", WAIT_FOR_RECOVERY, WAITING_FOR_RECOVERY_MESSAGE
    return "False", WAIT_FOR_START, NOT_READY_MESSAGE


def shows(wl: dict | None, status: str, reason: str) -> bool:
    c = _condition(wl, PODS_READY)
    return c is not None and c.get("status") == status and c.get("reason") == reason


def deadline(wl: dict, cfg: WaitForPodsReady, parse_time: Callable[[str | None], float | None]) -> tuple[str, float] | None:
    """(underlying cause, when) an admitted Workload not ready times out (Kueue's
    admittedNotReadyWorkload), or None when it is not timed: not admitted, evicted, inactive,
    ready, or waiting for a recovery that is not timed."""
    if not _is_true(wl, "Admitted") or _is_true(wl, "Evicted") or (wl.get("spec") or {}).get("active") is False:
        return None
    c = _condition(wl, PODS_READY)
    if c is not None and c.get("status") == "True":
        return None
    if c is None or c.get("reason") in (WAIT_FOR_START, PODS_READY):
        admitted_at = parse_time((_condition(wl, "Admitted") or {}).get("lastTransitionTime"))
        return (WAIT_FOR_START, (admitted_at or 0.0) + cfg.timeout) if admitted_at is not None else None
    if c.get("reason") == WAIT_FOR_RECOVERY and cfg.recovery_timeout is not None:
        since = parse_time(c.get("lastTransitionTime"))
        return (WAIT_FOR_RECOVERY, since + cfg.recovery_timeout) if since is not None else None
    return None


def _is_true(wl: dict | None, type_: str) -> bool:
    c = _condition(wl, type_)
    return c is not None and c.get("status") == "True"


def timeout_message(namespace: str, name: str) -> str:
    return f"Exceeded the PodsReady timeout {namespace}/{name}"


# -- requeueing with backoff ---------------------------------------------------------------------------
def requeue_count(wl: dict | None) -> int:
    return int((((wl or {}).get("status") or {}).get("requeueState") or {}).get("count") or 0)


def exceeds_limit(wl: dict, cfg: WaitForPodsReady) -> bool:
    """Another requeue would pass backoffLimitCount: the Workload is deactivated instead."""
    return cfg.backoff_limit_count is not None and requeue_count(wl) + 1 > cfg.backoff_limit_count


def backoff_seconds(count: int, cfg: WaitForPodsReady, rand: Callable[[], float] = random.random) -> float:
    """The wait before the `count`-th requeue: k8s wait.Backoff stepped `count` times from
    base, factor 2, jitter 0.0001, each step capped at backoffMaxSeconds."""
    base, cap = float(cfg.backoff_base_seconds), float(cfg.backoff_max_seconds)
    step = min(base * 2 ** max(count - 1, 0), cap)
    return min(step + rand() * JITTER * step, cap)


def requeue_state(wl: dict, cfg: WaitForPodsReady, now: float, format_time: Callable[[float], str],
                  rand: Callable[[], float] = random.random) -> dict[str, Any]:
    count = requeue_count(wl) + 1
    return {"count": count, "requeueAt": format_time(now + backoff_seconds(count, cfg, rand))}


def requeue_at(wl: dict | None, parse_time: Callable[[str | None], float | None]) -> float | None:
    """When a Workload evicted for its pods' readiness may be queued again (None: now)."""
    if not _evicted_by_timeout_and_held(wl):
        return None
    return parse_time((((wl or {}).get("status") or {}).get("requeueState") or {}).get("requeueAt"))


def _evicted_by_timeout_and_held(wl: dict | None) -> bool:
    c = _condition(wl, "Requeued")
    return c is not None and c.get("status") == "False" and c.get("reason") == PODS_READY_TIMEOUT


def queue_time(wl: dict | None, cfg: WaitForPodsReady, created: float,
               parse_time: Callable[[str | None], float | None]) -> float:
    """Where a Workload requeued after a PodsReady timeout takes its place (Kueue's
    GetQueueOrderTimestamp): the eviction's time, or its creation's (requeuingStrategy.timestamp)."""
    c = _condition(wl, "Evicted")
    if cfg.timestamp == EVICTION and c is not None and c.get("reason") == PODS_READY_TIMEOUT:
        return parse_time(c.get("lastTransitionTime")) or created
    return created


def explain_lines(wl: dict, parse_time: Callable[[str | None], float | None],
                  format_time: Callable[[float], str]) -> list[str]:
    """What `gpuqueue explain` says of a Workload's waitForPodsReady state: its PodsReady, and a
    requeue backoff under way."""
    lines = []
    c = _condition(wl, PODS_READY)
    if c is not None and _is_true(wl, "QuotaReserved"):
        lines.append(f"  PodsReady:    {c.get('status')} ({c.get('reason')}: {c.get('message')})")
    at = requeue_at(wl, parse_time)
    if at is not None:
        lines.append(f"  Backoff:      evicted {requeue_count(wl)} time(s) for its pods' readiness; queued again "
                     f"at {format_time(at)}")
    return lines


# -- deactivation after the limit ----------------------------------------------------------------------
def deactivation_cause(wl: dict | None) -> tuple[str, str] | None:
    """The Evicted reason and message of a deactivation Kueue made itself (its DeactivationTarget):
    `DeactivatedDueTo<reason>`, "The workload is deactivated due to <message>"."""
    c = _condition(wl, DEACTIVATION_TARGET)
    if c is None or c.get("status") != "True":
        return None
    return f"DeactivatedDueTo{c.get('reason')}", f"The workload is deactivated due to {c.get('message')}"


def told_with_cause(wl: dict | None, evicted: Evicted) -> Evicted:
    """The engine's deactivation, told with the cause Kueue gives when it deactivated the Workload
    itself (DeactivatedDueToRequeuingLimitExceeded)."""
    cause = deactivation_cause(wl)
    return evicted if cause is None else replace(evicted, reason=cause[0], message=cause[1])
