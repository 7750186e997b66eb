"""The Topology CRD's checks and the ResourceFlavor CRD's topologyName rules, enforced by the
validating webhook too (issue 25, part 3): Kubernetes 1.24 ignores the CRDs' CEL rules, so without
this a Topology with the hostname above a rack, a level twice, or changed levels under admitted
workloads would be stored. One line per denial, in the API server's words."""

from __future__ import annotations

import copy

import pytest

from gpuqueue.webhook.kueue_validation import validate_kueue_object

HOST, RACK, BLOCK = "kubernetes.io/hostname", "cloud.provider.com/topology-rack", "cloud.provider.com/topology-block"


def topology(*labels: str) -> dict:
    return {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Topology", "metadata": {"name": "default"},
            "spec": {"levels": [{"nodeLabel": lv} for lv in labels]}}


def errors(obj: dict, old: dict | None = None, kind: str = "Topology") -> list[str]:
    return [str(e) for e in validate_kueue_object(kind, obj, old)]


def test_kueues_own_example_is_valid():
    assert errors(topology(BLOCK, RACK, HOST)) == []
    assert errors(topology(RACK)) == []


@pytest.mark.parametrize("obj, expected", [
    (topology(), 'spec.levels: Invalid value: 0: spec.levels in body should have at least 1 items'),
    (topology(*(f"example.com/l{i}" for i in range(17))), "spec.levels: Too many: 17: must have at most 16 items"),
    (topology(RACK, RACK), 'spec.levels: Invalid value: "array": must be unique'),
    (topology(HOST, RACK), 'spec.levels: Invalid value: "array": the kubernetes.io/hostname label can only be used at '
                           'the lowest level of topology'),
    (topology(RACK, "bad label"), "spec.levels[1].nodeLabel: Invalid value: \"bad label\": spec.levels[1].nodeLabel in "
                                  "body should match '^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
                                  "(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])$'"),
    (topology(""), 'spec.levels[0].nodeLabel: Invalid value: "": spec.levels[0].nodeLabel in body should be at least 1 '
                   'chars long'),
    ({**topology(), "spec": {}}, "spec.levels: Required value"),
    ({**topology(), "spec": {"levels": [{}]}}, "spec.levels[0].nodeLabel: Required value"),
], ids=["empty", "17-levels", "twice", "hostname-above", "bad-key", "empty-key", "no-levels", "no-node-label"])
def test_each_rule_of_the_crd(obj, expected):
    assert errors(obj) == [expected]


def test_levels_are_immutable():
    old = topology(BLOCK, RACK, HOST)
    assert errors(topology(BLOCK, HOST), old) == ['spec.levels: Invalid value: "array": field is immutable']
    assert errors(copy.deepcopy(old), old) == []


def test_a_tas_flavors_rules():
    flavor = {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor", "metadata": {"name": "gh200"},
              "spec": {"topologyName": "default"}}
    assert errors(flavor, kind="ResourceFlavor") == [
        'spec: Invalid value: "object": at least one nodeLabel is required when topology is set']
    flavor["spec"]["nodeLabels"] = {"pool": "gh200"}
    assert errors(flavor, kind="ResourceFlavor") == []
    changed = copy.deepcopy(flavor)
    changed["spec"]["nodeLabels"] = {"pool": "other"}
    assert errors(changed, flavor, kind="ResourceFlavor") == [
        'spec: Invalid value: "object": resourceFlavorSpec are immutable when topologyName is set']
