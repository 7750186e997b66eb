"""The enforcement policy: which pods need an admission, read from the Configuration."""

import pytest

from gpuqueue.jobframework.enforcement import AUDIT, OFF, EnforcementConfig

GPU = "nvidia.com/gpu"


def test_default_is_strict_and_exempts_system_and_gpu_operator_namespaces():
    cfg = EnforcementConfig.from_kueue_configuration({"apiVersion": "config.kueue.x-k8s.io/v1beta2"})
    assert cfg.refusing
    for ns in ("kube-system", "gpuqueue-system", "gpu-operator", "nvidia-gpu-operator"):
        assert not cfg.needs_admission(ns, {GPU, "cpu"}, covered={GPU, "cpu"})
    assert cfg.needs_admission("team-a", {GPU, "cpu"}, covered={GPU, "cpu"})


def test_cpu_and_memory_are_never_enforced_per_pod_even_when_covered():
    cfg = EnforcementConfig()
    assert not cfg.needs_admission("team-a", {"cpu", "memory"}, covered={"cpu", "memory", GPU})
    # an extended resource no ClusterQueue covers is none of gpuqueue's business
    assert not cfg.needs_admission("team-a", {"example.com/fpga"}, covered={"cpu", GPU})


def test_unknown_coverage_counts_every_extended_resource():
    cfg = EnforcementConfig()
    assert cfg.needs_admission("team-a", {"example.com/fpga"}, covered=None)
    assert not cfg.needs_admission("team-a", {"cpu"}, covered=None)


def test_listed_resources_replace_the_default():
    cfg = EnforcementConfig.from_kueue_configuration(
        {"enforcement": {"resources": [GPU, "cpu"], "exemptNamespaces": ["ops"]}})
    assert cfg.needs_admission("team-a", {"cpu"}, covered={GPU})
    assert cfg.needs_admission("kube-system", {GPU})  # the list replaced the default exemptions
    assert not cfg.needs_admission("ops", {GPU})


@pytest.mark.parametrize("mode,needs,refusing", [(AUDIT, True, False), (OFF, False, False)])
def test_audit_checks_without_refusing_and_off_checks_nothing(mode, needs, refusing):
    cfg = EnforcementConfig.from_kueue_configuration({"enforcement": {"mode": mode}})
    assert cfg.needs_admission("team-a", {GPU}, covered={GPU}) is needs
    assert cfg.refusing is refusing


@pytest.mark.parametrize("section,message", [
    ({"mode": "strict"}, "enforcement.mode: must be one of Strict, Audit, Off, got 'strict'"),
    ({"exemptNamespaces": "kube-system"}, "enforcement.exemptNamespaces: must be a list of names"),
    ({"resource": [GPU]}, "enforcement.resource: unknown field"),
    ({"schedulerNames": []}, "enforcement.schedulerNames: must name at least one scheduler"),
    ("Strict", "enforcement: must be a mapping"),
])
def test_bad_sections_name_the_field(section, message):
    with pytest.raises(ValueError) as err:
        EnforcementConfig.from_kueue_configuration({"enforcement": section})
    assert str(err.value) == message
