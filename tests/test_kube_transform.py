"""gpuqueue.kube.transform: what a cache transform drops, and what it must leave alone."""

from __future__ import annotations

import pytest

from gpuqueue.kube.transform import dropping


def pod() -> dict:
    return {"metadata": {"name": "p", "managedFields": [{"manager": "kubectl"}], "labels": {"a": "b"}},
            "spec": {"volumes": [{"name": "v"}], "nodeName": "n1",
                     "containers": [{"name": "c1", "env": [{"name": "X"}], "command": ["sh"],
                                     "resources": {"requests": {"nvidia.com/gpu": "1"}}},
                                    {"name": "c2", "resources": {}}, "not-a-container"]},
            "status": {"phase": "Running", "containerStatuses": [{"name": "c1"}]}}


def test_each_path_is_dropped_at_every_place_it_names_and_nothing_else():
    out = dropping(["spec.volumes", "spec.containers[].env", "spec.containers[].command",
                    "status.containerStatuses"])(pod())
    assert out == {"metadata": {"name": "p", "labels": {"a": "b"}},
                   "spec": {"nodeName": "n1",
                            "containers": [{"name": "c1", "resources": {"requests": {"nvidia.com/gpu": "1"}}},
                                           {"name": "c2", "resources": {}}, "not-a-container"]},
                   "status": {"phase": "Running"}}


def test_a_field_dropped_whole_wins_over_a_deeper_path_in_either_order():
    for paths in (["spec.containers", "spec.containers[].env"], ["spec.containers[].env", "spec.containers"]):
        out = dropping(paths)(pod())
        assert "containers" not in out["spec"] and out["spec"]["volumes"] == [{"name": "v"}]


def test_paths_through_fields_of_another_shape_or_absent_leave_the_object_as_it_is():
    obj = {"metadata": {"name": "p"}, "spec": {"containers": {"env": 1}, "volumes": "x"}, "status": None}
    out = dropping(["spec.containers[].env", "spec.volumes[].name", "status.phase", "missing.deeper.field"])(obj)
    assert out == {"metadata": {"name": "p"}, "spec": {"containers": {"env": 1}, "volumes": "x"}, "status": None}


@pytest.mark.parametrize("path, problem", [("spec..env", "an empty field name"),
                                           ("spec.containers[]", "must end in a field"),
                                           ("", "an empty field name")])
def test_a_malformed_path_is_refused_with_what_is_wrong(path, problem):
    with pytest.raises(ValueError, match=problem):
        dropping([path])


def test_a_field_that_is_a_list_in_one_path_and_not_in_another_is_refused():
    with pytest.raises(ValueError, match="spec.containers.env.*containers is a list in one path and not"):
        dropping(["spec.containers[].image", "spec.containers.env"])
