"""Case 1, the FLAME walkthrough (shared/examples/flame.yaml, its checks flame.expect.yaml) on a real
control plane: the quota objects applied and the Jobs submitted with kubectl; B runs its 2
guaranteed GPUs and C borrows 4; A claims its 4 and exactly two of C's Jobs are preempted
(suspended, `Preempted`/`InCohortReclamation`), B untouched; A's pods finish and C's two resume by
themselves. Every admitted Job's pod is bound by the real kube-scheduler, to a GH200 node, within
BOUND seconds."""

from tests.e2e.env import require

require()

import yaml  # noqa: E402

from tests.e2e.harness import GH200, GPU, condition, is_true  # noqa: E402
from tests.shared_fixtures import SHARED  # noqa: E402

BOUND = 20.0   # seconds for every pod of a stage's admitted Jobs to be bound (kube-scheduler 1.24 parks
               # a refused pod for a minute or more: that must not happen)
EXAMPLE = SHARED / "examples" / "flame.yaml"
EXPECT = SHARED / "examples" / "flame.expect.yaml"
TEAMS = ("team-a", "team-b", "team-c")
CQS = ("group-a", "group-b", "group-c")


def _scenario():
    objects, nodes, jobs, later = [], [], [], []
    for doc in yaml.safe_load_all(EXAMPLE.read_text()):
        if not doc:
            continue
        kind = doc["kind"]
        if kind == "Scenario":
            later = [e["submit"] for e in doc["events"] if "submit" in e]
        elif kind == "Node":
            nodes.append(doc)
        elif kind == "Job":
            jobs.append(doc)
        else:
            objects.append(doc)
    return objects, nodes, jobs, later


def _checks():
    return {c["at"]: c for c in yaml.safe_load(EXPECT.read_text())["checks"]}


def _key(job):
    return job["metadata"]["namespace"], job["metadata"]["name"]


def running(e2e, ns, name):
    """Admitted and unsuspended, as the simulator's `running` means."""
    wl = e2e.workload_of(ns, name)
    return is_true(wl, "Admitted") and e2e.job(ns, name)["spec"].get("suspend") is False


def usage(e2e, cq):
    """ClusterQueue status: flavor -> resource -> reserved total (as flame.expect.yaml writes it)."""
    st = e2e.get(f"/apis/kueue.x-k8s.io/v1beta2/clusterqueues/{cq}").get("status") or {}
    out = {}
    for fl in st.get("flavorsReservation") or ():
        res = {r["name"]: str(r["total"]) for r in fl.get("resources") or () if str(r.get("total")) not in ("0", "")}
        if res:
            out[fl["name"]] = res
    return out


def bound_on_flavor(e2e, keys, labels=GH200):
    """Each Job's one live pod bound to a node carrying `labels`; the pods, else None."""
    out = []
    for ns, name in keys:
        pods = e2e.job_pods(ns, name)
        if len(pods) != 1 or not pods[0]["spec"].get("nodeName"):
            return None
        out.append(pods[0])
    for pod in out:
        node = e2e.get(f"/api/v1/nodes/{pod['spec']['nodeName']}")
        assert labels.items() <= node["metadata"]["labels"].items(), (pod["metadata"]["name"], node["metadata"])
        assert labels.items() <= (pod["spec"].get("nodeSelector") or {}).items(), pod["spec"]
    return out


def test_flame_borrow_reclaim_resume_with_pods_bound_by_kube_scheduler(e2e):
    objects, nodes, jobs, later = _scenario()
    checks = _checks()
    for ns in TEAMS:
        e2e.namespace(ns)
    for node in nodes:
        e2e.node(node["metadata"]["name"], int(node["status"]["allocatable"][GPU]), node["metadata"]["labels"])
    try:
        _walkthrough(e2e, objects, jobs, later, checks)
    finally:
        e2e.delete_namespaces(TEAMS)
        e2e.delete_nodes(n["metadata"]["name"] for n in nodes)
        e2e.delete_cluster_objects("clusterqueues", CQS)
        e2e.delete_cluster_objects("cohorts", ["flame"])
        e2e.delete_cluster_objects("resourceflavors", ["gh200"])


def _walkthrough(e2e, objects, jobs, later, checks):
    e2e.apply(objects)
    # No namespace label: the LocalQueue named "default" queues them, once the controller has marked
    # the namespaces (within a second or so, docs/install.md)
    e2e.wait_for("team namespaces marked gpuqueue.io/default-local-queue=true", lambda: all(
        (e2e.get(f"/api/v1/namespaces/{ns}")["metadata"].get("labels") or {}).get(
            "gpuqueue.io/default-local-queue") == "true" for ns in TEAMS), timeout=20)

    # 1. borrowing: B's 2, C's 4 (C borrows A's idle 2 and the cohort's 2)
    e2e.kubectl("create", "-f", "-", input=yaml.safe_dump_all(jobs))
    first = [_key(j) for j in jobs]
    check = checks[0]
    e2e.wait_for("B's 2 and C's 4 Jobs admitted and unsuspended",
                 lambda: all(running(e2e, *k) for k in first), timeout=30)
    e2e.wait_for(f"the six Jobs' pods bound to GH200 nodes", lambda: bound_on_flavor(e2e, first), timeout=BOUND)
    for cq, n in check["running_count"].items():
        assert sum(running(e2e, *k) for k in first if k[0] == "team-" + cq[-1]) == n, cq
    for cq in CQS:
        e2e.wait_for(f"{cq}'s reserved usage {check['usage'][cq]}", lambda cq=cq: usage(e2e, cq) == check["usage"][cq]
                     or None, timeout=10)
    for key, flavors in check["flavor"].items():
        ns, name = key.split("/")
        wl = e2e.workload_of(ns, name)
        assert wl["status"]["admission"]["podSetAssignments"][0]["flavors"] == flavors

    # 2. reclaim: A submits its 4; exactly two of C's are preempted, B is never a target
    e2e.kubectl("create", "-f", "-", input=yaml.safe_dump_all(later))
    a_keys = [_key(j) for j in later]
    check = checks[100]
    e2e.wait_for("A's 4 Jobs admitted", lambda: all(running(e2e, *k) for k in a_keys), timeout=45)
    e2e.wait_for("A's pods bound to GH200 nodes", lambda: bound_on_flavor(e2e, a_keys), timeout=BOUND)
    c_keys = [k for k in first if k[0] == "team-c"]
    victims = [k for k in c_keys if not running(e2e, *k)]
    assert len(victims) == check["preempted"]["group-c"], victims
    for k in victims:
        wl = e2e.workload_of(*k)
        assert condition(wl, "Preempted").get("reason") == check["reasons_all"], wl["status"]
        assert condition(wl, "Evicted").get("reason") == "Preempted", wl["status"]
        assert e2e.job(*k)["spec"]["suspend"] is True
        e2e.wait_for(f"{k}: requeued, its pod gone", lambda k=k: is_true(e2e.workload_of(*k), "Requeued")
                     and not e2e.job_pods(*k), timeout=30)
    for k in first:
        if k[0] == "team-b":
            assert running(e2e, *k) and not condition(e2e.workload_of(*k), "Evicted"), k
    for cq in CQS:
        e2e.wait_for(f"{cq}'s reserved usage {check['usage'][cq]}", lambda cq=cq: usage(e2e, cq) == check["usage"][cq]
                     or None, timeout=15)
    workloads = {k: e2e.workload_of(*k)["metadata"]["name"] for k in victims}
    out = e2e.kubectl("get", "workloads", "-n", "team-c").stdout
    for k, name in workloads.items():   # what a user sees: the victims not admitted any more
        line = next(l for l in out.splitlines() if l.startswith(name))
        assert "group-c" not in line.split()[2:3], out

    # 3. A's Jobs finish: C's two resume by themselves, without resubmission
    for ns, name in a_keys:
        assert e2e.kubelet.finish(ns, f"job-name={name}") == 1
    e2e.wait_for("A's Jobs complete", lambda: all(is_true(e2e.job(*k), "Complete") for k in a_keys), timeout=30)
    check = checks[200]
    e2e.wait_for("C's preempted Jobs admitted again", lambda: all(running(e2e, *k) for k in victims), timeout=30)
    e2e.wait_for("C's resumed pods bound to GH200 nodes", lambda: bound_on_flavor(e2e, c_keys), timeout=BOUND)
    for cq in CQS:
        if cq in check["usage"]:
            e2e.wait_for(f"{cq}'s reserved usage {check['usage'][cq]}",
                         lambda cq=cq: usage(e2e, cq) == check["usage"][cq] or None, timeout=15)
    assert sum(running(e2e, *k) for k in c_keys) == check["running_count"]["group-c"]
    assert not e2e.kubelet.errors, e2e.kubelet.errors
