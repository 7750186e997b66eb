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
(gpuqueue-webhook runs `webhook`, gpuqueue-extender runs `extender`, gpuqueue-certs runs `certs`:
the install Job and the renewal CronJob). The webhook's long-running process only reads: it can
change neither the webhook configurations nor the certificate Secret it serves. `explain` and
`kueuectl` (the verbs `gpuqueue list|stop|resume|create`) are commands people run with their own
credentials; the manifests ship their ClusterRoles unbound.
"""

from __future__ import annotations

from dataclasses import dataclass

# The namespace the manifests install into; Role-scoped access (install_namespace=True) is
# granted there only.
INSTALL_NAMESPACE = "gpuqueue-system"
CERTS_SECRET = "gpuqueue-certs"
WEBHOOK_CONFIGURATION = "gpuqueue"
LEADER_ELECTION_LEASE = "gpuqueue-extender"
AUTHENTICATION_CONFIGMAP = "extension-apiserver-authentication"
# The ServiceAccount the controller runs as (the extender's Deployment), and that of the
# kube-scheduler the install guide runs as a second scheduler.
CONTROLLER_SERVICE_ACCOUNT = "gpuqueue-extender"
SCHEDULER_SERVICE_ACCOUNT = "gpuqueue-scheduler"


def service_account_user(name: str, namespace: str = INSTALL_NAMESPACE) -> str:
    """The username the API server gives a ServiceAccount's requests (AdmissionReview userInfo)."""
    return f"system:serviceaccount:{namespace}:{name}"

KUEUE = "kueue.x-k8s.io"
COMPONENTS = ("webhook", "extender", "certs", "explain", "kueuectl")
# Components people run with their own credentials: a ClusterRole gpuqueue-COMPONENT each, unbound.
USER_COMPONENTS = ("explain", "kueuectl")


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


# The kinds with a suspend flag the controller queues besides batch/v1 Jobs (group, plural, kind).
QUEUED_KINDS = (
    ("jobset.x-k8s.io", "jobsets", "JobSet"),
    ("kubeflow.org", "pytorchjobs", "PyTorchJob"),
    ("kubeflow.org", "mpijobs", "MPIJob"),
    ("trainer.kubeflow.org", "trainjobs", "TrainJob"),
    ("ray.io", "rayjobs", "RayJob"),
    ("ray.io", "rayclusters", "RayCluster"),
)
LIST_WATCH = "list watch"  # informer-style: list, then watch from the list's resourceVersion

API_ACCESS: tuple[ApiAccess, ...] = (
    # webhook: the queue view it mutates and validates against
    _a("webhook", KUEUE, "localqueues", LIST_WATCH, "default a Job's queue to the namespace's LocalQueue 'default'"),
    _a("webhook", KUEUE, "cohorts", LIST_WATCH, "refuse cohort cycles"),
    _a("webhook", KUEUE, "workloadpriorityclasses", LIST_WATCH, "default the priority-class label"),
    _a("webhook", "", "namespaces", LIST_WATCH, "managedJobsNamespaceSelector"),
    _a("webhook", KUEUE, "clusterqueues", LIST_WATCH, "covered resources: which pods need an admission"),
    _a("webhook", "", "pods", "get", "the pod of a binding made by someone other than the schedulers"),
    # certs: `gpuqueue certs ensure` (the install Job and the renewal CronJob)
    _a("certs", "", "secrets", "create", "create the certs Secret on first install", install_namespace=True),
    _a("certs", "", "secrets", "get update", "read and renew the certs Secret", install_namespace=True, resource_names=(CERTS_SECRET,)),
    _a("certs", "admissionregistration.k8s.io", "mutatingwebhookconfigurations", "get patch", "inject caBundle", resource_names=(WEBHOOK_CONFIGURATION,)),
    _a("certs", "admissionregistration.k8s.io", "validatingwebhookconfigurations", "get patch", "inject caBundle", resource_names=(WEBHOOK_CONFIGURATION,)),
    # extender: controller and scheduler extender over one watch cache. Every write is a
    # read-modify-write of the cached object, sent as a merge patch carrying its resourceVersion
    # (a 409 Conflict if it changed since); `get` is the fresh read after a 409 Conflict.
    # tests/test_access_extender.py records the calls of the controller's scenarios and checks
    # each verb here is made and nothing else is.
    _a("extender", "batch", "jobs", LIST_WATCH + " get patch", "suspend/unsuspend Jobs, inject the flavor's nodeSelector and tolerations"),
    _a("extender", "batch", "jobs/finalizers", "update", "create Workloads owned by a Job with blockOwnerDeletion (OwnerReferencesPermissionEnforcement)"),
    # the other kinds it queues (integrations.frameworks), and the RayClusters of RayJobs: read
    # and written as Jobs are; a Workload is owned by its object with blockOwnerDeletion
    *(_a("extender", group, plural, LIST_WATCH + " get patch", f"suspend/unsuspend {kind}s, inject each pod set's flavor")
      for group, plural, kind in QUEUED_KINDS),
    *(_a("extender", group, f"{plural}/finalizers", "update", f"create Workloads owned by a {kind} with blockOwnerDeletion")
      for group, plural, kind in QUEUED_KINDS),
    _a("extender", "leaderworkerset.x-k8s.io", "leaderworkersets", LIST_WATCH, "a LeaderWorkerSet's groups are queued through their pods: its size, templates and uid name and own each group's Workload"),
    _a("extender", "leaderworkerset.x-k8s.io", "leaderworkersets/finalizers", "update", "create Workloads owned by a LeaderWorkerSet with blockOwnerDeletion"),
    _a("extender", "trainer.kubeflow.org", "clustertrainingruntimes", LIST_WATCH, "a TrainJob's pod sets come from its runtime"),
    _a("extender", "trainer.kubeflow.org", "trainingruntimes", LIST_WATCH, "a TrainJob's pod sets come from its runtime"),
    _a("extender", KUEUE, "workloads", LIST_WATCH + " get create patch delete", "one Workload per managed Job; its pod sets and queue updated when its pending Job changes (Kueue's updateWorkloadToMatchJob); deleted with its Job at once, before the garbage collector"),
    _a("extender", KUEUE, "workloads/status", "patch", "admission, conditions"),
    _a("extender", KUEUE, "clusterqueues", LIST_WATCH + " get", "quota"),
    _a("extender", KUEUE, "clusterqueues/status", "patch", "pending/admitted counts, usage, Active condition"),
    _a("extender", KUEUE, "localqueues", LIST_WATCH + " get", "queue lookup"),
    _a("extender", KUEUE, "localqueues/status", "patch", "pending/admitted counts, usage"),
    _a("extender", KUEUE, "cohorts", LIST_WATCH, "cohort quota and hierarchy"),
    _a("extender", KUEUE, "resourceflavors", LIST_WATCH, "flavors' node labels and tolerations"),
    _a("extender", KUEUE, "topologies", LIST_WATCH, "a TAS flavor's topology levels"),
    _a("extender", KUEUE, "workloadpriorityclasses", LIST_WATCH, "workload priority"),
    _a("extender", "scheduling.k8s.io", "priorityclasses", LIST_WATCH, "pod priority as workload priority"),
    _a("extender", "", "namespaces", LIST_WATCH, "ClusterQueue namespaceSelector"),
    _a("extender", "", "namespaces", "patch", "the label gpuqueue.io/default-local-queue on namespaces with a LocalQueue named default, which the webhook configurations select on (default_queue_label.py)"),
    _a("extender", "", "nodes", LIST_WATCH, "node capacity for /filter and /prioritize"),
    _a("extender", "", "pods", LIST_WATCH, "GPUs requested by bound pods; victims' pods gone"),
    _a("extender", "", "pods", "get patch delete", "the pod integration: ungate an admitted pod with its flavor, delete a preempted one (a pod cannot be suspended), remove Kueue's finalizer"),
    _a("extender", "", "pods/finalizers", "update", "create Workloads owned by a Pod with blockOwnerDeletion"),
    _a("extender", "", "events", "create", "CreatedWorkload/QuotaReserved/Preempted/... Events on Jobs (each a new Event)"),
    _a("extender", "coordination.k8s.io", "leases", "create", "leader election: first start", install_namespace=True),
    _a("extender", "coordination.k8s.io", "leases", "get update", "leader election: renew, take over, release", install_namespace=True, resource_names=(LEADER_ELECTION_LEASE,)),
    # extender: who calls /metrics and the visibility API, and may they (delegated_auth.py)
    _a("extender", "authentication.k8s.io", "tokenreviews", "create", "who a bearer token on /metrics or the visibility API is"),
    _a("extender", "authorization.k8s.io", "subjectaccessreviews", "create", "whether that caller may get /metrics or pending workloads"),
    _a("extender", "", "configmaps", "get", "kube-aggregator's front-proxy CA and headers, in kube-system (the name is pinned, the namespace cannot be without a kube-system Role)", resource_names=(AUTHENTICATION_CONFIGMAP,)),
    # explain: `gpuqueue explain NAMESPACE/JOB`, run by a person with their own credentials
    # (ClusterRole gpuqueue-explain, bound by the operator to whom they choose)
    _a("explain", "batch", "jobs", "get", "the Job asked about"),
    _a("explain", "", "namespaces", "get", "its namespace's labels: is it within managedJobsNamespaceSelector (why a Job has no Workload)"),
    _a("explain", KUEUE, "workloads", "list", "its Workload (by its owner's uid); the other Workloads of its ClusterQueue"),
    _a("explain", KUEUE, "localqueues", "list", "which ClusterQueue each Workload's LocalQueue points to"),
    _a("explain", KUEUE, "clusterqueues", "list", "the cohort's members, for what must finish; what the quota covers"),
    _a("explain", "", "pods", "list", "the Job's pods waiting for a node, and why the extender holds them back"),
    _a("explain", "visibility.kueue.x-k8s.io", "localqueues/pendingworkloads", "get", "its place in the queue, as the visibility API gives it"),
    # kueuectl: `gpuqueue list|stop|resume|create ...` (and `kubectl gpuqueue ...`), run by a queue
    # operator with their own credentials (ClusterRole gpuqueue-kueuectl, bound as they choose)
    _a("kueuectl", KUEUE, "workloads", "list patch", "list workloads; stop/resume workload (spec.active)"),
    _a("kueuectl", KUEUE, "localqueues", "list create patch", "list localqueues, a Workload's ClusterQueue; create localqueue; stop/resume localqueue (spec.stopPolicy)"),
    _a("kueuectl", KUEUE, "clusterqueues", "get list patch", "list clusterqueues; create localqueue checks its ClusterQueue; stop/resume clusterqueue (spec.stopPolicy)"),
    _a("kueuectl", "visibility.kueue.x-k8s.io", "localqueues/pendingworkloads", "get", "list workloads: POSITION IN QUEUE, as the visibility API gives it"),
)


@dataclass(frozen=True)
class CallerRole:
    """A ClusterRole the install ships, bound to nobody, for those who call gpuqueue's servers: what
    the extender's SubjectAccessReviews ask (delegated_auth.py). tests/test_manifests_rbac.py
    checks manifests/rbac/callers.yaml holds exactly these."""

    name: str
    rules: tuple[dict, ...]
    why: str


VISIBILITY = "visibility.kueue.x-k8s.io"
CALLER_ROLES: tuple[CallerRole, ...] = (
    CallerRole("gpuqueue-metrics-reader", ({"nonResourceURLs": ["/metrics"], "verbs": ["get"]},),
               "scrape the extender's /metrics (bind it to Prometheus' ServiceAccount)"),
    CallerRole("gpuqueue-pending-workloads-cq-viewer",
               ({"apiGroups": [VISIBILITY], "resources": ["clusterqueues/pendingworkloads"], "verbs": ["get"]},),
               "list the pending workloads of any ClusterQueue (every namespace's workload names)"),
    CallerRole("gpuqueue-pending-workloads-lq-viewer",
               ({"apiGroups": [VISIBILITY], "resources": ["localqueues/pendingworkloads"], "verbs": ["get"]},),
               "list the pending workloads of LocalQueues; bind with a RoleBinding for one namespace"),
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
