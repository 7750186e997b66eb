"""RBAC grants each ServiceAccount exactly the API calls its components declare in
gpuqueue/access.py: no wildcard, no verb nobody calls, nothing missing.

Which components a ServiceAccount runs is read from the manifests themselves: the first argument
of every container of every pod that uses it (`gpuqueue webhook ...`, `gpuqueue certs ensure ...`).
Components people run with their own credentials (`gpuqueue explain`) get a ClusterRole
gpuqueue-COMPONENT that the install binds to nobody.

Whether gpuqueue/access.py itself is true to the code is checked by recording the calls each
component makes (tests/test_access_extender.py and the webhook and certs tests).
"""

from __future__ import annotations

from collections import defaultdict

import pytest

from gpuqueue import access
from manifests.tools import render

OBJECTS = render.build()
NS = access.INSTALL_NAMESPACE

# (subject, scope, group, resource, resourceName or "", verb); scope is "cluster" or a namespace; the
# subject is a ServiceAccount, or "unbound ClusterRole NAME" for a user component's role
Grant = tuple[str, str, str, str, str, str]


def components_by_serviceaccount() -> dict[str, set[str]]:
    found = defaultdict(set)
    for obj in OBJECTS:
        for pod in render.pod_specs(obj):
            for c in pod.get("initContainers", []) + pod["containers"]:
                if c["image"].partition(":")[0] == "gpuqueue":  # not gpuqueue-scheduler's kube-scheduler
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


def bindings() -> list[dict]:
    return [o for o in OBJECTS if o["kind"] in ("ClusterRoleBinding", "RoleBinding")]


# gpuqueue-scheduler runs kube-scheduler, not a gpuqueue component: it gets kube-scheduler's
# built-in ClusterRoles, and its Lease (tests/test_manifests_scheduler.py).
KUBE_SCHEDULER = "gpuqueue-scheduler"
CALLER_ROLE_NAMES = {r.name for r in access.CALLER_ROLES}


def unbound_cluster_roles() -> list[str]:
    """Those of user components (a caller role is what gpuqueue checks, not what it calls: compared apart)."""
    bound = {b["roleRef"]["name"] for b in bindings() if b["roleRef"]["kind"] == "ClusterRole"}
    return [o["metadata"]["name"] for o in OBJECTS if o["kind"] == "ClusterRole" and o["metadata"]["name"] not in bound
            and o["metadata"]["name"] not in CALLER_ROLE_NAMES]


def granted() -> set[Grant]:
    grants = set()
    for name in unbound_cluster_roles():
        grants |= expand(f"unbound ClusterRole {name}", "cluster", rules_of("ClusterRole", name, None))
    for obj in bindings():
        if {s["name"] for s in obj["subjects"]} == {KUBE_SCHEDULER}:
            continue  # kube-scheduler's own rights: tests/test_manifests_scheduler.py
        ref = obj["roleRef"]
        namespace = obj["metadata"].get("namespace")
        scope = namespace if obj["kind"] == "RoleBinding" else "cluster"
        rules = rules_of(ref["kind"], ref["name"], namespace if ref["kind"] == "Role" else None)
        for subject in obj["subjects"]:
            assert subject["kind"] == "ServiceAccount" and subject["namespace"] == NS, subject
            assert subject["name"] != KUBE_SCHEDULER, "gpuqueue-scheduler shares no binding with gpuqueue's components"
            grants |= expand(subject["name"], scope, rules)
    return grants


def declared() -> set[Grant]:
    grants = set()
    subjects = dict(components_by_serviceaccount())
    for component in access.USER_COMPONENTS:
        subjects[f"unbound ClusterRole gpuqueue-{component}"] = {component}
    for sa, components in subjects.items():
        for a in access.API_ACCESS:
            if a.component in components:
                scope = NS if a.install_namespace else "cluster"
                for verb in a.verbs:
                    for name in a.resource_names or ("",):
                        grants.add((sa, scope, a.group, a.resource, name, verb))
    return grants


def test_components_run_by_each_serviceaccount():
    assert components_by_serviceaccount() == {
        "gpuqueue-webhook": {"webhook"},
        "gpuqueue-extender": {"extender"},
        "gpuqueue-certs": {"certs"},
    }
    assert set(access.COMPONENTS) == {a.component for a in access.API_ACCESS}
    run_by_pods = set().union(*components_by_serviceaccount().values())
    assert run_by_pods.isdisjoint(access.USER_COMPONENTS)
    assert run_by_pods | set(access.USER_COMPONENTS) == set(access.COMPONENTS)


def test_user_components_get_a_cluster_role_bound_to_nobody():
    assert unbound_cluster_roles() == [f"gpuqueue-{c}" for c in access.USER_COMPONENTS] == ["gpuqueue-explain",
                                                                                       "gpuqueue-kueuectl"]
    assert not any(a.install_namespace for a in access.API_ACCESS if a.component in access.USER_COMPONENTS)


def test_no_wildcards_anywhere():
    for obj in OBJECTS:
        for rule in obj.get("rules", []) if obj["kind"] in ("Role", "ClusterRole") else []:
            for field in ("apiGroups", "resources", "verbs", "resourceNames"):
                assert "*" not in rule.get(field, []), f"{obj['kind']}/{obj['metadata']['name']}: {field} has *"
            assert "nonResourceURLs" not in rule or obj["metadata"]["name"] in CALLER_ROLE_NAMES
            assert not {"escalate", "bind", "impersonate"} & set(rule["verbs"])


def test_rbac_grants_exactly_the_declared_calls():
    have, need = granted(), declared()
    assert sorted(have - need) == [], "granted but no code declares it in gpuqueue/access.py"
    assert sorted(need - have) == [], "declared in gpuqueue/access.py but not granted by manifests/rbac/"


def test_the_webhook_only_reads():
    """The webhook's long-running process serves every tenant's requests: it may not change the
    webhook configurations, the certificate Secret it serves, or anything else."""
    webhook = {(g, r, v) for sa, _scope, g, r, _name, v in granted() if sa == "gpuqueue-webhook"}
    assert webhook and {v for _g, _r, v in webhook} <= {"get", "list", "watch"}, sorted(webhook)
    assert not {r for _g, r, _v in webhook} & {"secrets", "mutatingwebhookconfigurations",
                                               "validatingwebhookconfigurations"}
    writers = {sa for sa, _s, _g, r, _n, v in granted()
               if r in ("secrets", "mutatingwebhookconfigurations", "validatingwebhookconfigurations")}
    assert writers == {"gpuqueue-certs"}


def test_secrets_and_leases_only_in_the_install_namespace():
    for sa, scope, _group, resource, name, verb in granted():
        if resource in ("secrets", "leases"):
            assert scope == NS, (sa, resource, verb)
            if verb != "create":
                assert name, f"{sa} may {verb} any {resource}: pin resourceNames"
    assert not any(sa == "gpuqueue-extender" and res == "secrets" for sa, _s, _g, res, _n, _v in granted())


def test_the_deployed_extender_elects_its_leader_where_the_role_grants_the_lease():
    """The Lease namespace and name the extender's Deployment runs with, as its command line parses
    them, are those the Role grants (a Lease in kube-system would be refused with 403)."""
    import argparse

    from gpuqueue.extender import command

    deployment = next(o for o in OBJECTS if o["kind"] == "Deployment" and o["metadata"]["name"] == "gpuqueue-extender")
    container = next(c for c in render.pod_specs(deployment)[0]["containers"] if c["args"][0] == "extender")
    env = {}
    for var in container.get("env", []):
        if "valueFrom" in var:
            assert var["valueFrom"] == {"fieldRef": {"fieldPath": "metadata.namespace"}}, var
            env[var["name"]] = deployment["metadata"]["namespace"]
        else:
            env[var["name"]] = var["value"]
    parser = argparse.ArgumentParser()
    with pytest.MonkeyPatch.context() as mp:
        mp.delenv("POD_NAMESPACE", raising=False)
        for k, v in env.items():
            mp.setenv(k, v)
        command.add_parser(parser.add_subparsers())
        args = parser.parse_args(container["args"])
    assert args.leader_elect
    from gpuqueue.extender.controller.options import Options

    assert (args.lease_namespace, Options().lease_name) == (NS, access.LEADER_ELECTION_LEASE)
    role_grants = {(sa, scope, name, verb) for sa, scope, _g, res, name, verb in granted() if res == "leases"}
    assert ("gpuqueue-extender", args.lease_namespace, Options().lease_name, "update") in role_grants


def test_require_refuses_an_undeclared_call():
    access.require("extender", "batch", "jobs", "patch")
    access.require("certs", "", "secrets", "get", namespace=NS, name=access.CERTS_SECRET)
    with pytest.raises(access.UndeclaredApiAccess, match="delete batch/jobs"):
        access.require("extender", "batch", "jobs", "delete")
    with pytest.raises(access.UndeclaredApiAccess, match="update batch/jobs"):
        access.require("extender", "batch", "jobs", "update")
    with pytest.raises(access.UndeclaredApiAccess):
        access.require("extender", "coordination.k8s.io", "leases", "update", namespace="kube-system",
                       name=access.LEADER_ELECTION_LEASE)
    with pytest.raises(access.UndeclaredApiAccess):
        access.require("certs", "", "secrets", "get", namespace=NS, name="someone-elses-secret")
    with pytest.raises(access.UndeclaredApiAccess):
        access.require("certs", "", "secrets", "create", namespace="default")
    with pytest.raises(access.UndeclaredApiAccess):
        access.require("webhook", "batch", "jobs", "get")


def test_the_comparison_would_catch_an_extra_verb(monkeypatch):
    extra = access.ApiAccess("extender", "", "nodes", frozenset({"delete"}), "test")
    monkeypatch.setattr(access, "API_ACCESS", access.API_ACCESS + (extra,))
    assert ("gpuqueue-extender", "cluster", "", "nodes", "", "delete") in declared() - granted()


def test_install_docs_list_exactly_the_declared_permissions():
    """docs/install.md's table under "Permissions (RBAC)" says what access.py says."""
    from pathlib import Path

    text = (Path(__file__).resolve().parents[1] / "docs" / "install.md").read_text()
    section = text.split("## Permissions (RBAC)", 1)[1].split("\n## ", 1)[0]
    documented = set()
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 6 or cells[0].startswith(("component", "---")):
            continue
        component, group, resources, names, verbs, where = cells
        for resource in resources.split(", "):
            for verb in verbs.split(", "):
                documented.add((component.split()[0], "" if group == "core" else group, resource, names,
                                verb, where))
    expected = {(a.component, a.group, a.resource, ", ".join(a.resource_names), verb,
                 NS if a.install_namespace else "cluster") for a in access.API_ACCESS for verb in a.verbs}
    assert len(documented) > 20
    assert sorted(documented - expected) == [], "documented but not in gpuqueue/access.py"
    assert sorted(expected - documented) == [], "in gpuqueue/access.py but not in docs/install.md"


def test_caller_roles_are_shipped_unbound_as_declared():
    """The ClusterRoles for Prometheus and the visibility API's users grant exactly what the extender's
    SubjectAccessReviews ask, and the install binds them to nobody."""
    shipped = {o["metadata"]["name"]: o["rules"] for o in OBJECTS
               if o["kind"] == "ClusterRole" and o["metadata"]["name"] in CALLER_ROLE_NAMES}
    assert shipped == {r.name: list(r.rules) for r in access.CALLER_ROLES}
    bound = {b["roleRef"]["name"] for b in bindings()}
    assert not bound & CALLER_ROLE_NAMES
