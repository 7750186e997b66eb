"""batch/v1 Job as one integration among the others, with no behaviour change: every edit the
integration makes is the one the controller's own Job adapter (extender/controller/jobs.py,
workload.py) makes today, on the same inputs, so the controller can switch to it as is."""

from __future__ import annotations

import copy
import itertools

import pytest

from gpuqueue.api.base import Toleration
from gpuqueue.extender.controller import workload as W
from gpuqueue.extender.controller.jobs import BatchJob as ControllerJob
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


def as_controller(new, old):
    return None if new == old else new


@pytest.mark.parametrize("obj,flavors", list(itertools.product(JOBS, FLAVORS)))
def test_every_edit_is_the_controllers(obj, flavors):
    before = copy.deepcopy(obj)
    ctl = ControllerJob()
    assert JOB.run(obj, info(flavors)) == ctl.run(obj, flavors)
    assert JOB.suspend(obj) == ctl.suspend(obj)
    assert JOB.restore(obj) == ctl.restore(obj)
    assert JOB.is_suspended(obj) == ctl.suspended(obj)
    running = JOB.run(obj, info(flavors)) or obj
    stopped = JOB.suspend(running) or running
    assert JOB.restore(stopped) == ctl.restore(stopped)
    for again in FLAVORS:  # re-admitted after a preemption, maybe to another flavor
        assert JOB.run(stopped, info(again)) == ctl.run(stopped, again)
    assert obj == before  # the object given is left as it was


@pytest.mark.parametrize("obj", JOBS)
def test_what_is_admitted_is_the_controllers(obj):
    (ps,) = JOB.pod_sets(obj)
    assert (ps.name, ps.count) == ("main", W.pod_count(obj))
    assert ps.template == obj["spec"]["template"]
    assert JOB.pod_set_of(PodFacts({}, {})) == "main"


def test_finished_and_stopped_are_the_controllers():
    base = job(True)
    for status in ({}, {"active": 2}, {"conditions": [{"type": "Complete", "status": "True"}]},
                   {"conditions": [{"type": "Failed", "status": "True", "message": "BackoffLimitExceeded"}]},
                   {"conditions": [{"type": "Complete", "status": "False"}]}):
        obj = {**base, "status": status}
        finished = JOB.finished(obj)
        assert (None if finished is None else ("Complete" if finished.succeeded else "Failed")) == W.job_finished(obj)
        assert JOB.stopped(obj) == ControllerJob.stopped(obj)


def test_a_flavor_toleration_from_the_quota_engine_is_injected():
    """The quota engine's flavors carry gpuqueue.api.scheduling.Toleration (not the pydantic one the
    controller's admitted_job expects, where it raises AttributeError): the integration takes both."""
    from gpuqueue.extender.quota.convert import flavor_spec
    from gpuqueue.api.kueue import ResourceFlavor
    flavor = flavor_spec(ResourceFlavor.model_validate({"metadata": {"name": "gh200"}, "spec": {
        "nodeLabels": {"p": "GH200"}, "tolerations": [{"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}]}}))
    out = JOB.run(job(True), info([flavor]))
    assert out["spec"]["template"]["spec"]["tolerations"] == [{"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}]
