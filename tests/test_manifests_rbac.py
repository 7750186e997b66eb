"""RBAC grants each ServiceAccount exactly the API calls its components declare in
gpuqueue/access.py: no wildcard, no verb nobody calls, nothing missing.

Which components a ServiceAccount runs is read from the manifests themselves: the first argument
of every container of every pod that uses it (`gpuqueue webhook ...`, `gpuqueue certs ensure ...`).
"""

from __future__ import annotations

from collections import defaultdict

import pytest

from gpuqueue import access
from manifests.tools import render

OBJECTS = render.build()
NS = access.INSTALL_NAMESPACE

# (serviceaccount, scope, group, resource, resourceName or "", verb); scope is "cluster" or a namespace
Grant = tuple[str, str, str, str, str, str]


def components_by_serviceaccount() -> dict[str, set[str]]:
    found = defaultdict(set)
    for obj in OBJECTS:
        for pod in render.pod_specs(obj):
            for c in pod.get("initContainers", []) + pod["containers"]:
                found[pod["serviceAccountName"]].add(c["args"][0])
    return found


def rules_of(kind: str, name: str, namespace: str | None) -> list[dict]:
    for obj in OBJECTS:
        if obj["kind"] == kind and obj["metadata"]["name"] == name and obj["metadata"].get("namespace") == namespace:
            return obj["rules"]
    raise AssertionError(f"binding refers to missing {kind} {name}")


def expand(sa: str, scope: str, rules: list[dict]) -> set[Grant]:
    grants = set()
    for rule in rules:
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                for verb in rule["verbs"]:
                    for name in rule.get("resourceNames") or [""]:
                        grants.add((sa, scope, group, resource, name, verb))
    return grants


def granted() -> set[Grant]:
    grants = set()
    for obj in OBJECTS:
        if obj["kind"] not in ("ClusterRoleBinding", "RoleBinding"):
            continue
        ref = obj["roleRef"]
        namespace = obj["metadata"].get("namespace")
        scope = namespace if obj["kind"] == "RoleBinding" else "cluster"
        rules = rules_of(ref["kind"], ref["name"], namespace if ref["kind"] == "Role" else None)
        for subject in obj["subjects"]:
            assert subject["kind"] == "ServiceAccount" and subject["namespace"] == NS, subject
            grants |= expand(subject["name"], scope, rules)
    return grants


def declared() -> set[Grant]:
    grants = set()
    for sa, components in components_by_serviceaccount().items():
        for a in access.API_ACCESS:
            if a.component in components:
                scope = NS if a.install_namespace else "cluster"
                for verb in a.verbs:
                    for name in a.resource_names or ("",):
                        grants.add((sa, scope, a.group, a.resource, name, verb))
    return grants


def test_components_run_by_each_serviceaccount():
    assert components_by_serviceaccount() == {
        "gpuqueue-webhook": {"webhook", "certs"},
        "gpuqueue-extender": {"extender"},
        "gpuqueue-certs": {"certs"},
    }
    assert set(access.COMPONENTS) == {a.component for a in access.API_ACCESS}


def test_no_wildcards_anywhere():
    for obj in OBJECTS:
        for rule in obj.get("rules", []) if obj["kind"] in ("Role", "ClusterRole") else []:
            for field in ("apiGroups", "resources", "verbs", "resourceNames"):
                assert "*" not in rule.get(field, []), f"{obj['kind']}/{obj['metadata']['name']}: {field} has *"
            assert "nonResourceURLs" not in rule
            assert not {"escalate", "bind", "impersonate"} & set(rule["verbs"])


def test_rbac_grants_exactly_the_declared_calls():
    have, need = granted(), declared()
    assert sorted(have - need) == [], "granted but no code declares it in gpuqueue/access.py"
    assert sorted(need - have) == [], "declared in gpuqueue/access.py but not granted by manifests/rbac/"


def test_secrets_and_leases_only_in_the_install_namespace():
    for sa, scope, _group, resource, name, verb in granted():
        if resource in ("secrets", "leases"):
            assert scope == NS, (sa, resource, verb)
            if verb != "create":
                assert name, f"{sa} may {verb} any {resource}: pin resourceNames"
    assert not any(sa == "gpuqueue-extender" and res == "secrets" for sa, _s, _g, res, _n, _v in granted())


def test_require_refuses_an_undeclared_call():
    access.require("extender", "batch", "jobs", "patch")
    access.require("certs", "", "secrets", "get", namespace=NS, name=access.CERTS_SECRET)
    with pytest.raises(access.UndeclaredApiAccess, match="delete batch/jobs"):
        access.require("extender", "batch", "jobs", "delete")
    with pytest.raises(access.UndeclaredApiAccess):
        access.require("certs", "", "secrets", "get", namespace=NS, name="someone-elses-secret")
    with pytest.raises(access.UndeclaredApiAccess):
        access.require("certs", "", "secrets", "create", namespace="default")
    with pytest.raises(access.UndeclaredApiAccess):
        access.require("webhook", "batch", "jobs", "get")


def test_the_comparison_would_catch_an_extra_verb(monkeypatch):
    extra = access.ApiAccess("extender", "", "pods", frozenset({"delete"}), "test")
    monkeypatch.setattr(access, "API_ACCESS", access.API_ACCESS + (extra,))
    assert ("gpuqueue-extender", "cluster", "", "pods", "", "delete") in declared() - granted()
