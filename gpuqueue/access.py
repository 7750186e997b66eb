"""Every Kubernetes API call gpuqueue makes, declared in one table.

The installed RBAC (manifests/rbac/) must grant exactly these permissions, no more and no fewer:
tests/test_manifests_rbac.py compares the two. The table itself is checked against what the code
does: tests record every request each component makes to the API server stand-in
(tests/standin/) in its end-to-end scenarios and assert that each call is declared here and
each verb declared here is made (tests/test_access_extender.py, tests/test_webhook_cluster.py,
tests/test_certs_ensure.py). A call missing here fails those tests instead of failing with 403
on a cluster; a permission nobody uses any more fails them too, so it cannot linger in RBAC.
`require(...)` lets a client wrapper refuse an undeclared call before making it.

`component` is the process that makes the call; the manifests map components to ServiceAccounts
(gpuqueue-webhook runs `webhook` and its `certs` init container, gpuqueue-extender runs
`extender`, gpuqueue-certs runs the `certs` renewal CronJob). `explain` is a command people run
with their own credentials; the manifests ship its ClusterRole unbound.
"""

from __future__ import annotations

from dataclasses import dataclass

# The namespace the manifests install into; Role-scoped access (install_namespace=True) is
# granted there only.
INSTALL_NAMESPACE = "gpuqueue-system"
CERTS_SECRET = "gpuqueue-certs"
WEBHOOK_CONFIGURATION = "gpuqueue"
LEADER_ELECTION_LEASE = "gpuqueue-extender"

KUEUE = "kueue.x-k8s.io"
COMPONENTS = ("webhook", "extender", "certs", "explain")
# Components people run with their own credentials: a ClusterRole gpuqueue-COMPONENT each, unbound.
USER_COMPONENTS = ("explain",)


@dataclass(frozen=True)
class ApiAccess:
    component: str
    group: str  # "" is the core group
    resource: str  # "workloads" or a subresource such as "workloads/status"
    verbs: frozenset[str]
    why: str
    install_namespace: bool = False  # granted by a Role in INSTALL_NAMESPACE instead of cluster-wide
    resource_names: tuple[str, ...] = ()


def _a(component, group, resource, verbs, why, **kw) -> ApiAccess:
    return ApiAccess(component, group, resource, frozenset(verbs.split()), why, **kw)


LIST_WATCH = "list watch"  # informer-style: list, then watch from the list's resourceVersion

API_ACCESS: tuple[ApiAccess, ...] = (
    # webhook: the queue view it mutates and validates against
    _a("webhook", KUEUE, "localqueues", LIST_WATCH, "default a Job's queue to the namespace's LocalQueue 'default'"),
    _a("webhook", KUEUE, "cohorts", LIST_WATCH, "refuse cohort cycles"),
    _a("webhook", KUEUE, "workloadpriorityclasses", LIST_WATCH, "default the priority-class label"),
    _a("webhook", "", "namespaces", LIST_WATCH, "managedJobsNamespaceSelector"),
    # certs: `gpuqueue certs ensure` (init container of the webhook, and the renewal CronJob)
    _a("certs", "", "secrets", "create", "create the certs Secret on first install", install_namespace=True),
    _a("certs", "", "secrets", "get update", "read and renew the certs Secret", install_namespace=True, resource_names=(CERTS_SECRET,)),
    _a("certs", "admissionregistration.k8s.io", "mutatingwebhookconfigurations", "get patch", "inject caBundle", resource_names=(WEBHOOK_CONFIGURATION,)),
    _a("certs", "admissionregistration.k8s.io", "validatingwebhookconfigurations", "get patch", "inject caBundle", resource_names=(WEBHOOK_CONFIGURATION,)),
    # extender: controller and scheduler extender over one watch cache. Every write is a
    # read-modify-write (PUT) of the cached object; `get` is the fresh read after a 409 Conflict.
    # tests/test_access_extender.py records the calls of the controller's scenarios and checks
    # each verb here is made and nothing else is.
    _a("extender", "batch", "jobs", LIST_WATCH + " get update", "suspend/unsuspend Jobs, inject the flavor's nodeSelector and tolerations"),
    _a("extender", "batch", "jobs/finalizers", "update", "create Workloads owned by a Job with blockOwnerDeletion (OwnerReferencesPermissionEnforcement)"),
    _a("extender", KUEUE, "workloads", LIST_WATCH + " get create update delete", "one Workload per managed Job; its pod sets and queue updated when its pending Job changes (Kueue's updateWorkloadToMatchJob); deleted with its Job at once, before the garbage collector"),
    _a("extender", KUEUE, "workloads/status", "update", "admission, conditions"),
    _a("extender", KUEUE, "clusterqueues", LIST_WATCH + " get", "quota"),
    _a("extender", KUEUE, "clusterqueues/status", "update", "pending/admitted counts, usage, Active condition"),
    _a("extender", KUEUE, "localqueues", LIST_WATCH + " get", "queue lookup"),
    _a("extender", KUEUE, "localqueues/status", "update", "pending/admitted counts, usage"),
    _a("extender", KUEUE, "cohorts", LIST_WATCH, "cohort quota and hierarchy"),
    _a("extender", KUEUE, "resourceflavors", LIST_WATCH, "flavors' node labels and tolerations"),
    _a("extender", KUEUE, "workloadpriorityclasses", LIST_WATCH, "workload priority"),
    _a("extender", "scheduling.k8s.io", "priorityclasses", LIST_WATCH, "pod priority as workload priority"),
    _a("extender", "", "namespaces", LIST_WATCH, "ClusterQueue namespaceSelector"),
    _a("extender", "", "nodes", LIST_WATCH, "node capacity for /filter and /prioritize"),
    _a("extender", "", "pods", LIST_WATCH, "GPUs requested by bound pods; victims' pods gone"),
    _a("extender", "", "events", "create", "CreatedWorkload/QuotaReserved/Preempted/... Events on Jobs (each a new Event)"),
    _a("extender", "coordination.k8s.io", "leases", "create", "leader election: first start", install_namespace=True),
    _a("extender", "coordination.k8s.io", "leases", "get update", "leader election: renew, take over, release", install_namespace=True, resource_names=(LEADER_ELECTION_LEASE,)),
    # explain: `gpuqueue explain NAMESPACE/JOB`, run by a person with their own credentials
    # (ClusterRole gpuqueue-explain, bound by the operator to whom they choose)
    _a("explain", "batch", "jobs", "get", "the Job asked about"),
    _a("explain", KUEUE, "workloads", "get list", "its Workload; the other Workloads of its ClusterQueue"),
    _a("explain", KUEUE, "localqueues", "list", "which ClusterQueue each Workload's LocalQueue points to"),
    _a("explain", KUEUE, "clusterqueues", "list", "the cohort's members, for what must finish"),
)


class UndeclaredApiAccess(RuntimeError):
    pass


def declared(component: str, group: str, resource: str, verb: str, *, namespace: str | None = None, name: str | None = None) -> bool:
    """Whether API_ACCESS lets `component` do `verb` on `group/resource` (in `namespace`, on `name`)."""
    for access in API_ACCESS:
        if (access.component, access.group, access.resource) != (component, group, resource) or verb not in access.verbs:
            continue
        if access.install_namespace and namespace != INSTALL_NAMESPACE:
            continue
        if access.resource_names and name not in access.resource_names:
            continue
        return True
    return False


def require(component: str, group: str, resource: str, verb: str, *, namespace: str | None = None, name: str | None = None) -> None:
    """Raise UndeclaredApiAccess unless the call is in API_ACCESS (and so granted by the manifests)."""
    if not declared(component, group, resource, verb, namespace=namespace, name=name):
        where = f" in namespace {namespace}" if namespace else ""
        named = f" named {name}" if name else ""
        raise UndeclaredApiAccess(
            f"{component} may not {verb} {group or 'core'}/{resource}{named}{where}: add it to gpuqueue/access.py "
            "and to manifests/rbac/ (tests/test_manifests_rbac.py checks they agree)"
        )
