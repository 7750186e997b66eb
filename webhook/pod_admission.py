"""Pods that need an admission (gpuqueue/jobframework/enforcement.py) cannot go round the
scheduler extender.

kube-scheduler asks gpuqueue's extender about a pod only when the pod reaches a scheduler
configured with it (``enforcement.schedulerNames``) and is scheduled at all. So, for a pod that
needs an admission:

- ``spec.nodeName`` set at creation is refused (naming the field and why): such a pod would be
  bound to its node without any scheduler;
- ``spec.schedulerName`` naming another scheduler is set to the first of
  ``enforcement.schedulerNames`` (mutating), and a pod that still names another after every
  mutating webhook is refused (validating: another webhook may have changed it after ours);
- a binding (``pods/binding``, or the older ``bindings``) is refused to anyone but the
  schedulers' own identities.

In ``Audit`` mode the same verdicts come back as warnings and nothing is changed or refused; in
``Off`` mode nothing is checked. Pods of exempt namespaces are left alone, and so are the mirror
pods a kubelet creates for its static pods (they run whatever the API says; refusing them would
only hide them from the extender's accounting).

Pure functions over the pod as the API server sent it. The mutation is a list of steps
(``POD_MUTATIONS``) whose verdicts are combined. Kueue's pod integration, served on the same
paths, is one of them when "pod" is enabled (``PodQueueing``): a pod with the queue label (or the
namespace's default LocalQueue, or manageJobsWithoutQueueName), or marked by its Deployment,
StatefulSet or LeaderWorkerSet (``kueue.x-k8s.io/pod-suspending-parent``), is gated with
``kueue.x-k8s.io/admission``, labelled managed, given Kueue's finalizer and, in a pod group, its
role hash (``queue_pod``); the validation checks the pod-group metadata with Kueue's messages and,
on UPDATE, that nobody but the controller removes the gate (``pod_queueing_denial``). Scheduling
gates need Kubernetes 1.27: on an older server the pod integration is off, as in Kueue, and a pod
that asks to be queued gets a warning saying so (the extender still refuses a GPU pod a node
until it is part of an admitted workload).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from gpuqueue import access
from gpuqueue.api.core import Pod
from gpuqueue.api.kueue import QUEUE_NAME_LABEL
from gpuqueue.jobframework.enforcement import EnforcementConfig, requested_resources
from gpuqueue.jobframework.kinds.pods import (GROUP_NAME_LABEL, GROUP_TOTAL_COUNT, MANAGED_LABEL, ROLE_HASH,
                                              Pod as PodIntegration)
from gpuqueue.jobframework.managed import ManagedJobsConfig, QueueView, job_queue_name
from gpuqueue.jobframework.mutation import mutate_job, suspended_by_parent
from gpuqueue.jobframework.patch import json_patch
from gpuqueue.jobframework.unqueued import has_controller, why_unqueued
from gpuqueue.jsonmemo import JsonMemo
from gpuqueue.webhook.fielderrors import FieldError, aggregate, forbidden, invalid, required
from gpuqueue.webhook.job_validation import validate_job
from gpuqueue.webhook.kueue_validation import dns_subdomain

MIRROR_POD_ANNOTATION = "kubernetes.io/config.mirror"
# The schedulers that may bind pods needing an admission: kube-scheduler (the cluster's own, or
# a second one run as the install guide says, under gpuqueue's scheduler ServiceAccount).
DEFAULT_SCHEDULER_USERNAMES = ("system:kube-scheduler", access.service_account_user(access.SCHEDULER_SERVICE_ACCOUNT))


@dataclass(frozen=True)
class PodVerdict:
    patch: tuple[dict[str, Any], ...] = ()
    denial: str | None = None
    warnings: tuple[str, ...] = ()


ALLOW = PodVerdict()


POD = PodIntegration()


@dataclass(frozen=True)
class PodQueueing:
    """Kueue's pod integration: what it decides with, and whether it is on."""
    queues: QueueView
    config: ManagedJobsConfig
    frameworks: tuple[str, ...]  # the enabled integrations (integrations.frameworks)
    controller_usernames: tuple[str, ...]
    gates: bool = True  # the API server keeps spec.schedulingGates (1.27+)
    server: str = ""  # its version, for the warning when it does not

    @property
    def enabled(self) -> bool:
        return "pod" in self.frameworks

    @property
    def active(self) -> bool:
        return self.enabled and self.gates


@dataclass(frozen=True)
class PodContext:
    """Where the request comes from and what the policy is."""
    namespace: str
    username: str
    enforcement: EnforcementConfig
    covered: frozenset[str] | None  # resources some ClusterQueue covers; None: unknown
    queueing: PodQueueing | None = None  # None: no pod integration


@dataclass(frozen=True)
class PodFacts:
    """The parts of a pod the decisions read."""
    node_name: str | None
    scheduler_name: str | None
    enforced: frozenset[str]  # the requested resources that make it need an admission
    mirror: bool
    pod: Mapping[str, Any] = field(default_factory=dict, compare=False)  # as sent


# The spec fields a pod's requests are made of. The pods of a Job share them byte for byte, and
# both pod webhooks read every pod: they are checked and summed once per Job (_REQUESTED).
_REQUEST_FIELDS = frozenset(("containers", "initContainers", "overhead"))
_REQUESTED: JsonMemo[frozenset[str]] = JsonMemo()


def _validated(pod: Any) -> Pod:
    try:
        return Pod.model_validate(pod)
    except ValidationError as exc:
        err = exc.errors()[0]
        raise ValueError(".".join(("object", *(str(p) for p in err["loc"]))) + f": {err['msg']}") from None


def _requested(spec: Mapping[str, Any]) -> frozenset[str]:
    """What ``spec`` asks a positive amount of; ValueError names a field its requests get wrong."""
    parts = {k: v for k, v in spec.items() if k in _REQUEST_FIELDS}  # a field missing and one null are not alike
    return _REQUESTED(parts, lambda: requested_resources(_validated({"spec": parts}).spec))


def pod_facts(pod: Any, ctx: PodContext) -> PodFacts:
    """Raises ValueError naming the field when ``pod`` is not shaped like a pod."""
    spec = pod.get("spec") if isinstance(pod, Mapping) else None
    if not isinstance(spec, Mapping):
        _validated(pod)  # a pod that is no object at all: the model says so
        raise ValueError("object.spec: Required value")  # the model would take a missing spec for an empty one
    model = _validated({**pod, "spec": {k: v for k, v in spec.items() if k not in _REQUEST_FIELDS}})
    requested = _requested(spec)
    node, scheduler = spec.get("nodeName"), spec.get("schedulerName")
    return PodFacts(
        node_name=node if isinstance(node, str) and node else None,
        scheduler_name=scheduler if isinstance(scheduler, str) and scheduler else None,
        enforced=ctx.enforcement.enforced_requests(ctx.namespace, requested, ctx.covered),
        mirror=MIRROR_POD_ANNOTATION in model.metadata.annotations and ctx.username.startswith("system:node:"),
        pod=pod)


def _requesting(facts: PodFacts, ctx: PodContext) -> str:
    return f"a pod that requests {', '.join(sorted(facts.enforced))} in namespace {ctx.namespace}"


def _schedulers(ctx: PodContext) -> str:
    return ", ".join(ctx.enforcement.scheduler_names)


def _refuse(ctx: PodContext, message: str) -> PodVerdict:
    """A refusal in Strict mode, a warning in Audit mode."""
    if ctx.enforcement.refusing:
        return PodVerdict(denial=message)
    return PodVerdict(warnings=(f"gpuqueue enforcement is in Audit mode; this would be refused: {message}",))


def _node_name(facts: PodFacts, ctx: PodContext) -> PodVerdict:
    return _refuse(ctx, (
        f"spec.nodeName: Forbidden: {_requesting(facts, ctx)} may not name its node: it must be placed by a "
        f"scheduler that consults gpuqueue ({_schedulers(ctx)}), which gives it a node only as part of an admitted "
        f"workload. Leave spec.nodeName out (a nodeSelector or node affinity chooses among nodes)"))


def steer_to_extender(facts: PodFacts, ctx: PodContext) -> PodVerdict:
    """The mutating step: refuse ``spec.nodeName``, set ``spec.schedulerName``."""
    if not facts.enforced or facts.mirror:
        return ALLOW
    if facts.node_name is not None:
        return _node_name(facts, ctx)
    names = ctx.enforcement.scheduler_names
    if facts.scheduler_name in names:
        return ALLOW
    if not ctx.enforcement.refusing:
        return _refuse(ctx, f"spec.schedulerName: {facts.scheduler_name!r} is not a scheduler that consults gpuqueue "
                            f"({_schedulers(ctx)})")
    # "add" replaces a member that exists and creates one that does not: valid either way.
    return PodVerdict(
        patch=({"op": "add", "path": "/spec/schedulerName", "value": names[0]},),
        warnings=(f"spec.schedulerName: set to {names[0]!r} (was {facts.scheduler_name or 'unset'!r}): "
                  f"{_requesting(facts, ctx)} is placed by a scheduler that consults gpuqueue",))


def check_steered(facts: PodFacts, ctx: PodContext) -> PodVerdict:
    """The validating step: the pod as it will be stored, after every mutating webhook."""
    if not facts.enforced or facts.mirror:
        return ALLOW
    if facts.node_name is not None:
        return _node_name(facts, ctx)
    if facts.scheduler_name not in ctx.enforcement.scheduler_names:
        return _refuse(ctx, (
            f"spec.schedulerName: Forbidden: {_requesting(facts, ctx)} must be scheduled by a scheduler that consults "
            f"gpuqueue ({_schedulers(ctx)}), not {facts.scheduler_name or 'unset'!r} (another mutating webhook set it "
            f"after gpuqueue's)"))
    return ALLOW


def _asks_to_be_queued(pod: Mapping[str, Any]) -> bool:
    return job_queue_name(pod) is not None or suspended_by_parent(pod)


def queue_pod(facts: PodFacts, ctx: PodContext) -> PodVerdict:
    """The mutating step of the pod integration (Kueue's pod webhook Default)."""
    q = ctx.queueing
    if q is None or not q.enabled or facts.mirror:
        return ALLOW
    if not q.gates:
        if not _asks_to_be_queued(facts.pod):
            return ALLOW
        return PodVerdict(warnings=(
            f"{QUEUE_NAME_LABEL}: this pod is not queued: the pod integration needs scheduling gates, which this "
            f"cluster ({q.server or 'older than 1.27'}) does not have (Kubernetes 1.27 or newer); if it requests a "
            f"resource gpuqueue enforces it stays Pending, refused a node by gpuqueue's extender",))
    result = mutate_job(_without_role(facts.pod), q.queues, q.config, ctx.namespace, POD, q.frameworks)
    if not result.managed:
        return ALLOW
    # The patch is against the pod as sent: a role hash its author wrote is replaced by the computed one.
    return PodVerdict(patch=tuple(json_patch(facts.pod, result.job)))


def _without_role(pod: Mapping[str, Any]) -> Mapping[str, Any]:
    """A pod joining a group is counted in the pod set of its role: the role hash is computed from
    its spec, never taken from its author (Kueue keeps one that is there)."""
    annotations = (pod.get("metadata") or {}).get("annotations")
    labels = (pod.get("metadata") or {}).get("labels")
    if not isinstance(annotations, Mapping) or ROLE_HASH not in annotations or not isinstance(labels, Mapping) \
            or not labels.get(GROUP_NAME_LABEL):
        return pod
    rest = {k: v for k, v in annotations.items() if k != ROLE_HASH}
    return {**pod, "metadata": {**pod["metadata"], "annotations": rest}}


_GO_INT = re.compile(r"[+-]?[0-9]+")


def pod_group_errors(pod: Mapping[str, Any]) -> list[FieldError]:
    """Kueue's checks of a pod's managed label and pod-group metadata, with its messages."""
    meta = pod.get("metadata") or {}
    labels, annotations = meta.get("labels") or {}, meta.get("annotations") or {}
    errs: list[FieldError] = []
    if MANAGED_LABEL in labels and labels[MANAGED_LABEL] != "true":
        errs.append(forbidden(f"metadata.labels[{MANAGED_LABEL}]", "managed label value can only be 'true'"))
    label_path, count_path = f"metadata.labels[{GROUP_NAME_LABEL}]", f"metadata.annotations[{GROUP_TOTAL_COUNT}]"
    both = f"both the '{GROUP_TOTAL_COUNT}' annotation and the '{GROUP_NAME_LABEL}' label should be set"
    group, count = labels.get(GROUP_NAME_LABEL) or "", annotations.get(GROUP_TOTAL_COUNT)
    if not group:
        if count is not None:
            errs.append(required(label_path, both))
        return errs
    dns_subdomain(group, label_path, errs)
    if count is None:
        errs.append(required(count_path, both))
    elif not isinstance(count, str) or not _GO_INT.fullmatch(count):
        errs.append(invalid(count_path, count, f"strconv.Atoi: parsing {json.dumps(count)}: invalid syntax"))
    elif int(count) < 1:
        errs.append(invalid(count_path, count, f"incorrect annotation value '{GROUP_TOTAL_COUNT}={count}': group total "
                                               "count should be greater than zero"))
    return errs


def pod_queueing_denial(pod: Mapping[str, Any], old: Mapping[str, Any] | None, ctx: PodContext,
                        operation: str) -> str | None:
    """The pod integration's validation (Kueue's pod webhook ValidateCreate/ValidateUpdate), and
    who may lift the gate (job_validation, as for every kind)."""
    q = ctx.queueing
    if q is None or not q.active:
        return None
    errs = pod_group_errors(pod)
    if old is not None:
        before, after = (((p.get("metadata") or {}).get("labels") or {}) for p in (old, pod))
        queued = before.get(MANAGED_LABEL) == "true"
        # Kueue: immutable once set; gpuqueue: a queued pod may not join a group either (its
        # Workload is its own).
        if (before.get(GROUP_NAME_LABEL) or queued) and after.get(GROUP_NAME_LABEL) != before.get(GROUP_NAME_LABEL):
            errs.insert(0, invalid(f"metadata.labels[{GROUP_NAME_LABEL}]", after.get(GROUP_NAME_LABEL) or "",
                                   "field is immutable"))
        if queued and ctx.username not in q.controller_usernames:
            # The label is what sends the pod's updates here (the webhook configuration's objectSelector),
            # and the role hash which pod set of its group the pod is counted in.
            if after.get(MANAGED_LABEL) != "true":
                errs.insert(0, forbidden(f"metadata.labels[{MANAGED_LABEL}]", f"only the gpuqueue controller may "
                                         f"remove it from a pod queued by gpuqueue; user {ctx.username!r} may not"))
            roles = [((p.get("metadata") or {}).get("annotations") or {}).get(ROLE_HASH) for p in (old, pod)]
            if roles[0] != roles[1]:
                errs.insert(0, forbidden(f"metadata.annotations[{ROLE_HASH}]", f"only the gpuqueue controller may "
                                         f"change the role of a pod queued by gpuqueue; user {ctx.username!r} may not"))
    if errs:
        return aggregate(errs)
    return validate_job(operation, pod, old, ctx.username, ctx.namespace, q.queues, q.config, q.controller_usernames,
                        POD, q.frameworks)


def check_queueing(facts: PodFacts, ctx: PodContext) -> PodVerdict:
    """The validating step on CREATE."""
    if facts.mirror:
        return ALLOW
    denial = pod_queueing_denial(facts.pod, None, ctx, "CREATE")
    return ALLOW if denial is None else PodVerdict(denial=denial)


def warn_unqueued(facts: PodFacts, ctx: PodContext) -> PodVerdict:
    """A bare pod (no controller: a controller's pods are its owner's) that Strict enforcement would
    refuse a node because nothing will admit it: a warning at creation, never a refusal."""
    q = ctx.queueing
    if q is None or facts.mirror or not ctx.enforcement.refusing or has_controller(facts.pod):
        return ALLOW
    frameworks = q.frameworks if q.active else tuple(f for f in q.frameworks if f != POD.framework)
    found = why_unqueued(facts.pod, POD.kind, POD.framework, ctx.namespace, lambda: facts.enforced, q.queues,
                         q.config, frameworks)
    return ALLOW if found is None else PodVerdict(warnings=(found.message,))


PodStep = Callable[[PodFacts, PodContext], PodVerdict]
POD_MUTATIONS: tuple[PodStep, ...] = (steer_to_extender, queue_pod)
POD_VALIDATIONS: tuple[PodStep, ...] = (check_steered, check_queueing, warn_unqueued)


def combine(verdicts: list[PodVerdict]) -> PodVerdict:
    """The first denial wins; otherwise the patches and warnings of every step, in order."""
    warnings = tuple(w for v in verdicts for w in v.warnings)
    for v in verdicts:
        if v.denial is not None:
            return PodVerdict(denial=v.denial, warnings=warnings)
    return PodVerdict(patch=tuple(op for v in verdicts for op in v.patch), warnings=warnings)


def mutate_pod(pod: Any, ctx: PodContext) -> PodVerdict:
    facts = pod_facts(pod, ctx)
    return combine([step(facts, ctx) for step in POD_MUTATIONS])


def validate_pod(pod: Any, ctx: PodContext) -> PodVerdict:
    facts = pod_facts(pod, ctx)
    return combine([step(facts, ctx) for step in POD_VALIDATIONS])


def binding_is_unchecked(ctx: PodContext, scheduler_usernames: Collection[str]) -> bool:
    """Whether a binding is allowed without looking at its pod: enforcement off, an exempt
    namespace, or one of the schedulers binding."""
    return not ctx.enforcement.enforcing or ctx.enforcement.exempt(ctx.namespace) or ctx.username in scheduler_usernames


def validate_binding(pod: Any, ctx: PodContext, scheduler_usernames: Collection[str]) -> PodVerdict:
    """A binding of ``pod`` (as stored; None when it does not exist) by ``ctx.username``."""
    if pod is None or binding_is_unchecked(ctx, scheduler_usernames):
        return ALLOW
    facts = pod_facts(pod, ctx)
    if not facts.enforced:
        return ALLOW
    return _refuse(ctx, (
        f"target: Forbidden: only the schedulers that consult gpuqueue ({', '.join(scheduler_usernames)}) may bind "
        f"{_requesting(facts, ctx)}; user {ctx.username!r} may not: the pod must be scheduled, so that it gets a node "
        f"only as part of an admitted workload"))


def unreadable_pod_binding(ctx: PodContext, name: str, problem: str) -> PodVerdict:
    """When the pod of a binding cannot be read, the binding is refused (Strict) or warned about."""
    return _refuse(ctx, f"target: Forbidden: cannot check whether pod {ctx.namespace}/{name} needs an admission "
                        f"before binding it ({problem}); only the schedulers that consult gpuqueue may bind it now")
