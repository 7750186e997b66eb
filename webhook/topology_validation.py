"""Kueue's Topology Aware Scheduling objects as the CRD gpuqueue installs checks them
(charts/gpuqueue/files/crds/kueue.x-k8s.io_topologies.yaml, the ResourceFlavor CRD's topologyName rules), for
clusters that do not run the CRD's CEL rules (Kubernetes 1.24 ignores x-kubernetes-validations) or
run without its schema. The words are the API server's: a schema check names the field and the
bound, a CEL rule gives the rule's message with the value's type (``Invalid value: "array"``)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from gpuqueue.api.topology import HOSTNAME_LABEL
from gpuqueue.webhook.fielderrors import FieldError, invalid, required, too_many

MAX_LEVELS = 16
MAX_NODE_LABEL = 316
LABEL_KEY = re.compile(r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
                       r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])$")


def _cel(path: str, type_name: str, message: str) -> FieldError:
    return invalid(path, type_name, message)


def validate_topology(obj: Mapping[str, Any], old: Mapping[str, Any] | None, errs: list[FieldError]) -> None:
    spec = obj.get("spec")
    if not isinstance(spec, Mapping):
        errs.append(required("spec") if spec is None else invalid("spec", spec, "must be an object"))
        return
    levels = spec.get("levels")
    if levels is None:
        errs.append(required("spec.levels"))
        return
    if not isinstance(levels, list):
        errs.append(invalid("spec.levels", levels, "must be a list"))
        return
    if not levels:
        errs.append(invalid("spec.levels", 0, "spec.levels in body should have at least 1 items"))
        return
    if len(levels) > MAX_LEVELS:
        errs.append(too_many("spec.levels", len(levels), MAX_LEVELS))
    labels = []
    for i, level in enumerate(levels):
        path = f"spec.levels[{i}].nodeLabel"
        label = level.get("nodeLabel") if isinstance(level, Mapping) else None
        if label is None:
            errs.append(required(path))
        elif not isinstance(label, str):
            errs.append(invalid(path, label, "must be a string"))
        elif not label:
            errs.append(invalid(path, label, f"{path} in body should be at least 1 chars long"))
        elif len(label) > MAX_NODE_LABEL:
            errs.append(FieldError(path, "Too long", f"may not be longer than {MAX_NODE_LABEL}"))
        elif not LABEL_KEY.match(label):
            errs.append(invalid(path, label, f"{path} in body should match '{LABEL_KEY.pattern}'"))
        labels.append(level)
    if any(labels.count(lv) > 1 for lv in labels):
        errs.append(_cel("spec.levels", "array", "must be unique"))
    names = [lv.get("nodeLabel") if isinstance(lv, Mapping) else None for lv in labels]
    if HOSTNAME_LABEL in names and names[-1] != HOSTNAME_LABEL:
        errs.append(_cel("spec.levels", "array",
                         f"the {HOSTNAME_LABEL} label can only be used at the lowest level of topology"))
    old_spec = old.get("spec") if isinstance(old, Mapping) else None
    if isinstance(old_spec, Mapping) and old_spec.get("levels") is not None and old_spec.get("levels") != levels:
        errs.append(_cel("spec.levels", "array", "field is immutable"))


def validate_flavor_topology(spec: Mapping[str, Any], old: Mapping[str, Any] | None, errs: list[FieldError]) -> None:
    """The ResourceFlavor CRD's two rules for a TAS flavor."""
    if spec.get("topologyName") not in (None, "") and not spec.get("nodeLabels"):
        errs.append(_cel("spec", "object", "at least one nodeLabel is required when topology is set"))
    old_spec = old.get("spec") if isinstance(old, Mapping) else None
    if isinstance(old_spec, Mapping) and old_spec.get("topologyName") not in (None, "") and old_spec != spec:
        errs.append(_cel("spec", "object", "resourceFlavorSpec are immutable when topologyName is set"))
