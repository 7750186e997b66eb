"""Who a caller is and what they may do, as kube-apiserver decides it for the reviews it answers.

- TokenReview (authentication.k8s.io/v1): tokens the test registers (`add_token`,
  `service_account_token`, as a ServiceAccount's projected token would be); an unknown token is
  `authenticated: false` with an error, as the API server's token authenticators answer.
- SubjectAccessReview (authorization.k8s.io/v1): RBAC over the stored ClusterRoles, Roles and their
  bindings (rbac/v1 evaluation: verbs, apiGroups, resources with `resource/subresource` and
  `*/subresource`, resourceNames, nonResourceURLs with a trailing `*`; non-resource URLs only
  through ClusterRoleBindings); the group system:masters may do anything. Exactly one of
  resourceAttributes and nonResourceAttributes, and a user or a group, are required (422).
- The caller of a request, for the requests the stand-in proxies to aggregated APIs: the user of
  its bearer token; a request without credentials is `system:admin` in system:masters (the
  stand-in serves every such request, like a kind cluster's admin kubeconfig).
"""

from __future__ import annotations

import copy
import uuid

from . import resources as R
from . import status as S

DEFAULT_AUDIENCES = ["https://kubernetes.default.svc.cluster.local"]
ADMIN = {"username": "system:admin", "groups": ["system:masters", "system:authenticated"]}


class Authn:
    def __init__(self) -> None:
        self.tokens: dict[str, dict] = {}

    def add_token(self, token: str, username: str, groups: list[str] = (), uid: str | None = None) -> dict:
        user = {"username": username, "uid": uid or str(uuid.uuid4()),
                "groups": [*groups, "system:authenticated"]}
        self.tokens[token] = user
        return user

    def service_account_token(self, namespace: str, name: str) -> str:
        token = f"sa-{namespace}-{name}-{uuid.uuid4().hex}"
        self.add_token(token, f"system:serviceaccount:{namespace}:{name}",
                       ["system:serviceaccounts", f"system:serviceaccounts:{namespace}"])
        return token

    def user_of(self, authorization: str | None) -> dict | None:
        """The caller named by an Authorization header (None: a token nobody issued)."""
        if not authorization:
            return ADMIN
        scheme, _, token = authorization.partition(" ")
        if scheme.lower() != "bearer":
            return None
        return self.tokens.get(token.strip())

    def token_review(self, body: dict) -> dict:
        spec = body.get("spec") if isinstance(body.get("spec"), dict) else {}
        token = spec.get("token") or ""
        audiences = spec.get("audiences") or DEFAULT_AUDIENCES
        user = self.tokens.get(token)
        if user is None or not set(audiences) & set(DEFAULT_AUDIENCES):
            status = {"user": {}, "error": "[invalid bearer token, token lookup failed]"}
        else:
            status = {"authenticated": True, "user": copy.deepcopy(user), "audiences": list(audiences)}
        return _answer(R.TOKEN_REVIEWS, body, status)


def subject_access_review(store, body: dict) -> dict:
    spec = body.get("spec") if isinstance(body.get("spec"), dict) else {}
    resource, non_resource = spec.get("resourceAttributes"), spec.get("nonResourceAttributes")
    errors = []
    if (resource is None) == (non_resource is None):
        errors.append(S.FieldError.invalid("spec.resourceAttributes", "", "exactly one of nonResourceAttributes "
                                           "or resourceAttributes must be specified"))
    if not spec.get("user") and not spec.get("groups"):
        errors.append(S.FieldError.invalid("spec.user", '""', "at least one of user or group must be specified"))
    if errors:
        raise S.invalid(R.SUBJECT_ACCESS_REVIEWS, "", errors)
    allowed, reason = rbac_allows(store, spec.get("user", ""), spec.get("groups") or [], resource, non_resource)
    status = {"allowed": allowed}
    if reason:
        status["reason"] = reason
    return _answer(R.SUBJECT_ACCESS_REVIEWS, body, status)


def _answer(rt, body: dict, status: dict) -> dict:
    return {"kind": rt.kind, "apiVersion": rt.api_version, "metadata": {"creationTimestamp": None},
            "spec": body.get("spec") or {}, "status": status}


# -- RBAC -----------------------------------------------------------------------------------------------

def rbac_allows(store, user: str, groups: list[str], resource: dict | None, non_resource: dict | None):
    """(allowed, reason) by rbac/v1's rules."""
    if "system:masters" in groups:
        return True, ""
    namespace = (resource or {}).get("namespace") or ""
    bindings = [("ClusterRoleBinding", b) for b in store.kind(R.CLUSTER_ROLE_BINDINGS.storage_key).values()]
    if resource is not None and namespace:
        bindings += [("RoleBinding", b) for (ns, _), b in store.kind(R.ROLE_BINDINGS.storage_key).items()
                     if ns == namespace]
    for kind, binding in bindings:
        subject = _matching_subject(binding, user, groups)
        if subject is None:
            continue
        ref = binding.get("roleRef") or {}
        if ref.get("kind") == "ClusterRole":
            role = store.get(R.CLUSTER_ROLES.storage_key, ("", ref.get("name", "")))
        else:
            role = store.get(R.ROLES.storage_key, (binding["metadata"].get("namespace", ""), ref.get("name", "")))
        for rule in (role or {}).get("rules") or ():
            ok = (_resource_rule(rule, resource) if resource is not None
                  else kind == "ClusterRoleBinding" and _non_resource_rule(rule, non_resource))
            if ok:
                where = f' in namespace "{namespace}"' if kind == "RoleBinding" else ""
                return True, (f'RBAC: allowed by {kind} "{binding["metadata"]["name"]}"{where} of {ref.get("kind")} '
                              f'"{ref.get("name")}" to {subject}')
    return False, ""


def _matching_subject(binding: dict, user: str, groups: list[str]) -> str | None:
    for s in binding.get("subjects") or ():
        kind, name = s.get("kind"), s.get("name")
        if kind == "User" and name == user:
            return f'User "{name}"'
        if kind == "Group" and name in groups:
            return f'Group "{name}"'
        if kind == "ServiceAccount" and user == f"system:serviceaccount:{s.get('namespace', '')}:{name}":
            return f'ServiceAccount "{name}/{s.get("namespace", "")}"'
    return None


def _resource_rule(rule: dict, attrs: dict) -> bool:
    verb, group = attrs.get("verb", ""), attrs.get("group", "")
    res, sub, name = attrs.get("resource", ""), attrs.get("subresource", ""), attrs.get("name", "")
    if not _has(rule.get("verbs"), verb) or not _has(rule.get("apiGroups"), group):
        return False
    combined = f"{res}/{sub}" if sub else res
    resources = rule.get("resources") or []
    if not ("*" in resources or combined in resources or (sub and f"*/{sub}" in resources)):
        return False
    names = rule.get("resourceNames") or []
    return not names or name in names


def _non_resource_rule(rule: dict, attrs: dict) -> bool:
    if not _has(rule.get("verbs"), attrs.get("verb", "")):
        return False
    path = attrs.get("path", "")
    for url in rule.get("nonResourceURLs") or ():
        if url == "*" or url == path or (url.endswith("*") and path.startswith(url.rstrip("*"))):
            return True
    return False


def _has(values, wanted: str) -> bool:
    values = values or []
    return "*" in values or wanted in values
