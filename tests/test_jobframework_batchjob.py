"""batch/v1 Job as one integration among the others, with no behaviour change. Until the
controller switched to it (managed_kinds.py), every edit here was checked against the
controller's own Job code on the same inputs; that code is gone, so the edits are checked against
what it did, written out."""

from __future__ import annotations

import copy
import itertools
import json

import pytest

from gpuqueue.api.base import Toleration
from gpuqueue.extender.quota.model import FlavorSpec
from gpuqueue.jobframework import registry
from gpuqueue.jobframework.integration import PodFacts
from gpuqueue.jobframework.podset import PodSetInfo

JOB = registry.BY_FRAMEWORK["batch/job"]
GH200 = FlavorSpec("gh200", (("nvidia.com/gpu.product", "GH200"),),
                   tolerations=(Toleration(key="gpu", operator="Exists", effect="NoSchedule"),))
H100 = FlavorSpec("h100", (("nvidia.com/gpu.product", "H100"), ("zone", "b")))
CPU = FlavorSpec("cpu")


def job(suspend, node_selector=None, tolerations=None, parallelism=None, completions=None, annotations=None):
    spec = {"containers": [{"name": "w", "image": "x"}]}
    if node_selector is not None:
        spec["nodeSelector"] = node_selector
    if tolerations is not None:
        spec["tolerations"] = tolerations
    job_spec = {"template": {"spec": spec}}
    for key, value in (("suspend", suspend), ("parallelism", parallelism), ("completions", completions)):
        if value is not None:
            job_spec[key] = value
    meta = {"namespace": "ml", "name": "train", "uid": "u-1"}
    if annotations:
        meta["annotations"] = annotations
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": meta, "spec": job_spec}


JOBS = [
    job(True),
    job(False),
    job(None),
    job(True, {"team": "ml", "nvidia.com/gpu.product": "A100"}),
    job(True, tolerations=[{"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}]),
    job(True, {}, [], parallelism=4, completions=2),
    job(True, parallelism=3),
    job(True, annotations={"other": "x"}),
]
FLAVORS = [[GH200], [H100], [CPU], [GH200, H100], []]


def info(flavors):
    return {"main": PodSetInfo.from_flavors("main", flavors)}


def expected_run(obj, flavors):
    """What the controller's own admitted_job wrote: the template's own nodeSelector/tolerations
    recorded once (flat, under gpuqueue.io/original-pod-scheduling), the flavors' labels over the
    template's own nodeSelector, their tolerations appended unless present, suspend false."""
    out = copy.deepcopy(obj)
    annotations = out["metadata"].setdefault("annotations", {})
    template = out["spec"]["template"]
    if "gpuqueue.io/original-pod-scheduling" not in annotations:
        own = {k: template["spec"][k] for k in ("nodeSelector", "tolerations") if k in template["spec"]}
        annotations["gpuqueue.io/original-pod-scheduling"] = json.dumps(own, separators=(",", ":"))
    own = json.loads(annotations["gpuqueue.io/original-pod-scheduling"])
    spec = template["spec"]
    for k in ("nodeSelector", "tolerations"):
        spec.pop(k, None)
        if k in own:
            spec[k] = copy.deepcopy(own[k])
    for f in flavors:
        if f.node_labels:
            spec.setdefault("nodeSelector", {}).update(dict(f.node_labels))
        for t in f.tolerations:
            tol = t.model_dump(by_alias=True, exclude_none=True)
            if tol not in spec.setdefault("tolerations", []):
                spec["tolerations"].append(tol)
    out["spec"]["suspend"] = False
    return None if out == obj else out


def expected_restore(obj):
    if not obj["spec"].get("suspend"):
        return None
    out = copy.deepcopy(obj)
    raw = (out["metadata"].get("annotations") or {}).pop("gpuqueue.io/original-pod-scheduling", None)
    if raw is not None:
        own = json.loads(raw)
        for k in ("nodeSelector", "tolerations"):
            out["spec"]["template"]["spec"].pop(k, None)
            if k in own:
                out["spec"]["template"]["spec"][k] = own[k]
    return None if out == obj else out


def expected_suspend(obj):
    return None if obj["spec"].get("suspend") else {**obj, "spec": {**obj["spec"], "suspend": True}}


@pytest.mark.parametrize("obj,flavors", list(itertools.product(JOBS, FLAVORS)))
def test_every_edit_is_the_controllers(obj, flavors):
    before = copy.deepcopy(obj)
    assert JOB.run(obj, info(flavors)) == expected_run(obj, flavors)
    assert JOB.suspend(obj) == expected_suspend(obj)
    assert JOB.restore(obj) == expected_restore(obj)
    assert JOB.is_suspended(obj) == bool(obj["spec"].get("suspend"))
    running = JOB.run(obj, info(flavors)) or obj
    stopped = JOB.suspend(running) or running
    assert JOB.restore(stopped) == expected_restore(stopped)
    for again in FLAVORS:  # re-admitted after a preemption, maybe to another flavor
        assert JOB.run(stopped, info(again)) == expected_run(stopped, again)
    assert obj == before  # the object given is left as it was


@pytest.mark.parametrize("obj", JOBS)
def test_what_is_admitted_is_the_controllers(obj):
    (ps,) = JOB.pod_sets(obj)
    spec = obj["spec"]
    parallelism = spec.get("parallelism", 1)
    assert (ps.name, ps.count) == ("main", min(parallelism, spec.get("completions", parallelism)))
    assert ps.template == obj["spec"]["template"]
    assert JOB.pod_set_of(PodFacts({}, {})) == "main"


def test_finished_and_stopped_are_the_controllers():
    base = job(True)
    for status, finished, stopped in (
            ({}, None, True), ({"active": 2}, None, False),
            ({"conditions": [{"type": "Complete", "status": "True"}]}, True, True),
            ({"conditions": [{"type": "Failed", "status": "True", "message": "BackoffLimitExceeded"}]}, False, True),
            ({"conditions": [{"type": "Complete", "status": "False"}]}, None, True)):
        obj = {**base, "status": status}
        done = JOB.finished(obj)
        assert (None if done is None else done.succeeded) == finished
        assert JOB.stopped(obj) == stopped


def test_a_flavor_toleration_from_the_quota_engine_is_injected():
    """The quota engine's flavors carry gpuqueue.api.scheduling.Toleration (not the pydantic one the
    controller's admitted_job expects, where it raises AttributeError): the integration takes both."""
    from gpuqueue.extender.quota.convert import flavor_spec
    from gpuqueue.api.kueue import ResourceFlavor
    flavor = flavor_spec(ResourceFlavor.model_validate({"metadata": {"name": "gh200"}, "spec": {
        "nodeLabels": {"p": "GH200"}, "tolerations": [{"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}]}}))
    out = JOB.run(job(True), info([flavor]))
    assert out["spec"]["template"]["spec"]["tolerations"] == [{"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}]
