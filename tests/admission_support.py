"""kube-apiserver's side of admission, for tests: AdmissionReviews shaped as a 1.24 API server sends
them (shared/fixtures/k8s-1.24/admission/ shows the envelope), and ``AdmissionChain``, which routes
a write through the webhooks of the webhook configurations manifests/install.yaml ships, as the API server does
- rules, namespaceSelector and objectSelector decide which webhooks are called; the mutating ones
run first and their JSONPatches are applied, then the validating ones see the result; the first
denial refuses the write - against a running webhook over TLS."""

from __future__ import annotations

import copy
import itertools
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from manifests.tools import render

from gpuqueue.api.labelselector import selector_matches
from tests.webhook_support import Webhook, apply_json_patch, decode_patch

# The shipped webhook configurations (the chart's rendering). Their matchConditions (1.28+) are not
# evaluated here: a hook is called whenever its rules and selectors match, a superset of what
# kube-apiserver sends; tests/e2e/test_outage.py checks the conditions on a real server.
CONFIGURATIONS = [o for o in render.build() if o["kind"].endswith("WebhookConfiguration")]
MUTATING, VALIDATING = "MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"
GPU = "nvidia.com/gpu"
_names = itertools.count()


def admission_review(operation: str, kind: tuple[str, str, str], resource: tuple[str, str, str], *,
                     namespace: str, name: str, username: str, obj: Any, old: Any = None,
                     sub_resource: str | None = None, groups: tuple[str, ...] = ("system:authenticated",)) -> dict:
    group, version, kind_name = kind
    request = {
        "uid": str(uuid.uuid4()),
        "kind": {"group": group, "version": version, "kind": kind_name},
        "resource": {"group": resource[0], "version": resource[1], "resource": resource[2]},
        "requestKind": {"group": group, "version": version, "kind": kind_name},
        "requestResource": {"group": resource[0], "version": resource[1], "resource": resource[2]},
        "name": name, "namespace": namespace, "operation": operation,
        "userInfo": {"username": username, "groups": list(groups)},
        "object": obj, "oldObject": old, "dryRun": False,
        "options": {"kind": "CreateOptions" if operation == "CREATE" else "UpdateOptions",
                    "apiVersion": "meta.k8s.io/v1"},
    }
    if sub_resource:
        request["subResource"] = request["requestSubResource"] = sub_resource
    return {"kind": "AdmissionReview", "apiVersion": "admission.k8s.io/v1", "request": request}


def pod(namespace: str = "team-a", *, gpus: int = 1, name: str | None = None, node_name: str | None = None,
        scheduler_name: str | None = "default-scheduler", init_gpus: int = 0, limits_only: bool = False,
        labels: Mapping[str, str] | None = None, annotations: Mapping[str, str] | None = None) -> dict:
    """A pod as kube-apiserver has it at admission (defaults applied: schedulerName, restartPolicy...)."""
    def resources(n: int) -> dict:
        wanted = {"cpu": "1", "memory": "1Gi", **({GPU: str(n)} if n else {})}
        return {"limits": wanted} if limits_only else {"requests": wanted, "limits": wanted}

    spec: dict[str, Any] = {
        "containers": [{"name": "main", "image": "pytorch:2", "resources": resources(gpus),
                        "terminationMessagePolicy": "File", "imagePullPolicy": "IfNotPresent"}],
        "restartPolicy": "Never", "terminationGracePeriodSeconds": 30, "dnsPolicy": "ClusterFirst",
        "securityContext": {}, "enableServiceLinks": True, "preemptionPolicy": "PreemptLowerPriority",
        "priority": 0,
    }
    if init_gpus:
        spec["initContainers"] = [{"name": "warmup", "image": "pytorch:2", "resources": resources(init_gpus)}]
    if scheduler_name is not None:
        spec["schedulerName"] = scheduler_name
    if node_name is not None:
        spec["nodeName"] = node_name
    meta: dict[str, Any] = {"name": name or f"train-{next(_names)}", "namespace": namespace, "creationTimestamp": None}
    if labels:
        meta["labels"] = dict(labels)
    if annotations:
        meta["annotations"] = dict(annotations)
    return {"kind": "Pod", "apiVersion": "v1", "metadata": meta, "spec": spec, "status": {}}


def pod_create(p: dict, username: str = "alice") -> dict:
    meta = p["metadata"]
    return admission_review("CREATE", ("", "v1", "Pod"), ("", "v1", "pods"), namespace=meta["namespace"],
                            name=meta["name"], username=username, obj=p)


def binding_create(namespace: str, pod_name: str, node: str, username: str, *, legacy: bool = False) -> dict:
    """POST pods/NAME/binding (kube-scheduler's way), or the older POST bindings (``legacy``)."""
    binding = {"kind": "Binding", "apiVersion": "v1", "target": {"kind": "Node", "name": node},
               "metadata": {"name": pod_name, "namespace": namespace, "creationTimestamp": None}}
    resource = ("", "v1", "bindings") if legacy else ("", "v1", "pods")
    return admission_review("CREATE", ("", "v1", "Binding"), resource, namespace=namespace, name=pod_name,
                            username=username, obj=binding, sub_resource=None if legacy else "binding")


def workload(namespace: str = "team-a", name: str = "job-train-1a2b3", *, count: int = 1, gpus: int = 1,
             admitted: bool = False) -> dict:
    wl: dict[str, Any] = {
        "apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload",
        "metadata": {"name": name, "namespace": namespace, "uid": str(uuid.uuid4()), "resourceVersion": "42",
                     "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": "train", "uid": "u1",
                                          "controller": True, "blockOwnerDeletion": True}]},
        "spec": {"queueName": "gpu-queue", "active": True, "priority": 0, "podSets": [{
            "name": "main", "count": count,
            "template": {"spec": {"containers": [{"name": "main", "resources": {"requests": {GPU: str(gpus)}}}]}}}]},
        "status": {"conditions": [{"type": "QuotaReserved", "status": "False", "reason": "Pending",
                                   "message": "couldn't assign flavors to pod set main: insufficient unused quota",
                                   "lastTransitionTime": "2026-12-02T11:09:55Z"}]},
    }
    if admitted:
        wl["status"] = admit(wl)["status"]
    return wl


def admit(wl: dict, count: int | None = None) -> dict:
    """``wl`` with the status the controller writes when it reserves quota."""
    wl = copy.deepcopy(wl)
    ps = wl["spec"]["podSets"][0]
    n = count if count is not None else ps["count"]
    gpus = int(ps["template"]["spec"]["containers"][0]["resources"]["requests"][GPU])
    wl["status"] = {
        "admission": {"clusterQueue": "gpu-cluster-queue", "podSetAssignments": [
            {"name": "main", "count": n, "flavors": {GPU: "gh200"}, "resourceUsage": {GPU: str(n * gpus)}}]},
        "conditions": [{"type": "QuotaReserved", "status": "True", "reason": "QuotaReserved",
                        "message": "Quota reserved in ClusterQueue gpu-cluster-queue",
                        "lastTransitionTime": "2026-12-02T11:10:00Z"},
                       {"type": "Admitted", "status": "True", "reason": "Admitted",
                        "message": "The workload is admitted", "lastTransitionTime": "2026-12-02T11:10:00Z"}],
    }
    return wl


def workload_write(operation: str, new: dict, old: dict | None, username: str, *, status: bool = False) -> dict:
    meta = new["metadata"]
    return admission_review(operation, ("kueue.x-k8s.io", "v1beta2", "Workload"),
                            ("kueue.x-k8s.io", "v1beta2", "workloads"), namespace=meta["namespace"],
                            name=meta["name"], username=username, obj=new, old=old,
                            sub_resource="status" if status else None)


# -- routing, as kube-apiserver does ----------------------------------------------------------------

def _rule_matches(rule: Mapping, operation: str, group: str, version: str, resource: str) -> bool:
    return (group in rule["apiGroups"] and version in rule["apiVersions"] and operation in rule["operations"]
            and resource in rule["resources"])


def matching_hooks(configuration_kind: str, operation: str, group: str, version: str, resource: str,
                   namespace_labels: Mapping[str, str] | None, object_labels: Mapping[str, str]) -> list[dict]:
    """The webhooks of ``configuration_kind`` kube-apiserver calls for such a request, in order.
    ``namespace_labels`` None: a cluster-scoped object (the namespaceSelector does not apply)."""
    hits = []
    for doc in CONFIGURATIONS:
        if doc["kind"] != configuration_kind:
            continue
        for hook in doc["webhooks"]:
            if not any(_rule_matches(r, operation, group, version, resource) for r in hook["rules"]):
                continue
            if namespace_labels is not None and not selector_matches(hook.get("namespaceSelector", {}), namespace_labels):
                continue
            if selector_matches(hook.get("objectSelector", {}), object_labels):
                hits.append(hook)
    return hits


def _order(configuration_kind: str):
    """Webhooks are called in the order of their configuration."""
    names = [h["name"] for doc in CONFIGURATIONS if doc["kind"] == configuration_kind
             for h in doc["webhooks"]]
    return lambda hook: names.index(hook["name"])


@dataclass
class Outcome:
    allowed: bool
    object: Any  # after the mutating webhooks' patches
    message: str = ""
    called: list[str] = field(default_factory=list)  # name path of each webhook called
    warnings: list[str] = field(default_factory=list)


class AdmissionChain:
    """Sends a review through the webhooks the manifests register, to ``hook``."""

    def __init__(self, hook: Webhook) -> None:
        self.hook = hook

    async def admit(self, review: dict, namespace_labels: Mapping[str, str] | None = None) -> Outcome:
        """``namespace_labels``: the namespace's labels besides its name's."""
        req = review["request"]
        resource = req["resource"]["resource"] + (f"/{req['subResource']}" if req.get("subResource") else "")
        group, version = req["resource"]["group"], req["resource"]["version"]
        ns = req.get("namespace")
        ns_labels = {"kubernetes.io/metadata.name": ns, **(namespace_labels or {})} if ns else None
        obj = copy.deepcopy(req["object"])
        outcome = Outcome(True, obj)
        for kind in (MUTATING, VALIDATING):
            # The objectSelector is matched against the new and the old object (either will do).
            sides = [((o or {}).get("metadata") or {}).get("labels") or {} for o in (outcome.object, req.get("oldObject"))
                     if o is not None]
            hooks = {h["name"]: h for labels in sides
                     for h in matching_hooks(kind, req["operation"], group, version, resource, ns_labels, labels)}
            for hook in sorted(hooks.values(), key=_order(kind)):
                path = hook["clientConfig"]["service"]["path"]
                sent = copy.deepcopy(review)
                sent["request"]["object"] = outcome.object
                answer = await self.hook.review(path, sent)
                outcome.called.append(f"{hook['name']} {path}")
                outcome.warnings += answer.get("warnings", [])
                if not answer["allowed"]:
                    return Outcome(False, outcome.object, answer["status"]["message"], outcome.called, outcome.warnings)
                if kind == MUTATING and "patch" in answer:
                    outcome.object = apply_json_patch(outcome.object, decode_patch(answer))
        return outcome
