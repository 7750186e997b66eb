"""Moving in from Kueue v0.18, and back (docs/migrate-from-kueue.md), on a control plane of its own:
Kueue's CRDs, controller, webhooks and objects first (kueue_v018.py, tests/kueue_objects.py: as
Kueue writes them), then the guide's commands (Kueue's Deployment, webhook configurations and
APIServices removed, its CRDs and objects kept), then gpuqueue installed as the other cases
install it.

- Two Jobs Kueue admitted keep running: not suspended, their pods not deleted, their Workloads
  (Kueue's names) kept, no second Workload made; they count against the ClusterQueue's quota, so
  a new Job that would exceed it waits; the second pod of one of them (two completions) is bound
  through gpuqueue's extender.
- A high-priority Job preempts the one Kueue admitted last, as Kueue would: it is suspended and
  its pod template put back as its Workload recorded it (Kueue's flavor nodeSelector taken off;
  1.24 refuses any change to a started Job's template, as it would refuse Kueue's).
- The pending Workloads keep Kueue's order (one, created first, was preempted and requeued after
  the others were created: it comes after them) and are admitted one by one as Jobs finish.
- Kueue's finalizer `kueue.x-k8s.io/resource-in-use` comes off a Workload once it is finished,
  as Kueue takes it off, so deleting its Job deletes it.
- The way back: gpuqueue stopped and its webhook configurations removed, Kueue's CRDs applied
  again: each Job has exactly one Workload, owned and labelled as Kueue finds it, an admitted one
  with Kueue's `status.admission` and its Job's containers (Kueue's equivalence check); what
  gpuqueue wrote that Kueue does not read is the one annotation docs/migrate-from-kueue.md names.
- gpuqueue's CRDs over Kueue's installed by Helm (a conflict, then the guide's commands) and over
  CRDs still storing v1beta1 (refused, then the guide's patch)."""

from tests.e2e.env import require

require()

import time  # noqa: E402

import pytest  # noqa: E402
import yaml  # noqa: E402

from tests import kueue_objects as KO  # noqa: E402
from tests.e2e import cases as C  # noqa: E402
from tests.e2e import kueue_v018 as K  # noqa: E402
from tests.e2e.harness import is_true, started  # noqa: E402

NS = "e2e-mig"
CQ = "e2e-mig"
QUEUE = "team"
HIGH = "e2e-mig-high"
POOL = {C.POOL: "mig"}
NODE = "e2e-mig-n1"
ADMITTED = ("run-a", "run-b")          # Kueue admitted a, then b
PENDING = ("wait-c", "wait-d")         # created after a and b
REQUEUED = "wait-e"                    # created first, preempted and requeued after d was created
WL = f"/apis/kueue.x-k8s.io/v1beta2/namespaces/{NS}/workloads"
# what gpuqueue writes on objects that Kueue does not read (docs/migrate-from-kueue.md)
ORIGINAL = "gpuqueue.io/original-pod-scheduling"
GPUQUEUE_ONLY = {f"Job annotation {ORIGINAL}"}


class Before:
    """What the cluster held under Kueue, noted for the checks after."""
    jobs: dict[str, dict] = {}
    pods: dict[str, set[str]] = {}


def under_kueue(cluster) -> None:
    """Kueue v0.18 installed and at work, then the guide's removal commands."""
    files = cluster.dir / "kueue"
    files.mkdir()
    (files / "crds.yaml").write_text(yaml.safe_dump_all(K.crds()))
    cluster.kubectl("apply", "--server-side", "-f", str(files / "crds.yaml"))
    cluster.wait_established()
    cluster.apply(K.controller(), server_side=True)
    cluster.namespace(NS)
    cluster.node(NODE, 4, POOL)
    cluster.apply([*K.quota(CQ, POOL, 4, NS, QUEUE, preemption={"withinClusterQueue": "LowerPriority"}),
                   {"apiVersion": C.KUEUE, "kind": "WorkloadPriorityClass", "metadata": {"name": HIGH}, "value": 1000}],
                  server_side=True)

    kueue = K.KueueWrites(cluster)
    jobs = {REQUEUED: kueue.job(NS, REQUEUED, QUEUE, 2)}
    for name in (*ADMITTED, *PENDING):
        time.sleep(1.1)   # creation timestamps have one-second resolution: the order is theirs
        jobs[name] = kueue.job(NS, name, QUEUE, 2, completions=2 if name == "run-a" else None)
    for name, at in zip(ADMITTED, (KO.now(-60), KO.now(-30))):
        kueue.admit(jobs[name], CQ, CQ, POOL, 2, at=at)
        Before.pods[name] = {p["metadata"]["uid"] for p in kueue.run_pods(NS, name, NODE)}
    for name in PENDING:
        kueue.status(jobs[name], KO.pending_status(CQ, 2))
    kueue.status(jobs[REQUEUED], KO.requeued_status(CQ, 2, KO.now(1)))
    Before.jobs = {n: cluster.job(NS, n) for n in jobs}

    cluster.apply(K.webhooks_and_apiservices(), server_side=True)
    refused = cluster.kubectl("create", "-f", "-", input=yaml.safe_dump(C.job(NS, "blocked", queue=QUEUE)), check=False)
    assert refused.returncode != 0 and "mjob.kb.io" in refused.stderr, refused.stderr

    # the guide: Kueue's controller, webhooks and APIServices go; its CRDs and objects stay
    cluster.kubectl("delete", "deployment", "-n", K.KUEUE_NS, "kueue-controller-manager")
    cluster.kubectl("delete", "mutatingwebhookconfiguration", K.WEBHOOK_CONFIGURATIONS[0])
    cluster.kubectl("delete", "validatingwebhookconfiguration", K.WEBHOOK_CONFIGURATIONS[1])
    cluster.kubectl("delete", "apiservice", *K.APISERVICES)
    for kind in ("clusterqueues", "resourceflavors", "topologies"):
        for obj in cluster.kubectl("get", kind, "-o", "name").stdout.split():
            cluster.kubectl("patch", obj, "--type=json", "-p", '[{"op":"remove","path":"/metadata/finalizers"}]')
    # no TAS workload admitted (the guide's check prints none)
    tas = cluster.kubectl("get", "workloads", "-A", "-o", "jsonpath={range .items[?(@.status.admission.podSetAssignments[0]"
                          ".topologyAssignment)]}{.metadata.namespace}/{.metadata.name}{\"\\n\"}{end}")
    assert tas.stdout.strip() == "", tas.stdout


@pytest.fixture(scope="module")
def c():
    """This module's control plane: Kueue's first (under_kueue), then gpuqueue."""
    with started(before_install=under_kueue) as cluster:
        yield cluster


def wl_of(cluster, name: str) -> dict:
    return cluster.get(f"{WL}/{KO.wl_name(Before.jobs[name])}")


def admitted(cluster, name: str) -> bool:
    return is_true(cluster.workload_of(NS, name), "Admitted")


def conditions(cluster) -> dict:
    return {w["metadata"]["name"]: [(x["type"], x["status"]) for x in (w.get("status") or {}).get("conditions") or ()]
            for w in cluster.workloads(NS)}


def test_admitted_keep_running_pending_keep_their_order_and_finalizers_go_as_kueue_would(c):
    # the CRDs are gpuqueue's now: v1beta2 only, no conversion webhook left pointing at Kueue's Service
    crd = c.get("/apis/apiextensions.k8s.io/v1/customresourcedefinitions/workloads.kueue.x-k8s.io")
    assert [v["name"] for v in crd["spec"]["versions"]] == ["v1beta2"], crd["spec"]["versions"]
    assert (crd["spec"].get("conversion") or {}).get("strategy", "None") == "None", crd["spec"].get("conversion")
    assert crd["status"]["storedVersions"] == ["v1beta2"]
    cq = c.get(f"/apis/kueue.x-k8s.io/v1beta2/clusterqueues/{CQ}")
    assert not cq["metadata"].get("finalizers"), cq["metadata"]

    c.wait_for("ClusterQueue status: Kueue's two admitted Workloads reserve the 4 GPUs, three wait", lambda: (
        lambda st: st.get("reservingWorkloads") == 2 and st.get("pendingWorkloads") == 3)(
            c.get(f"/apis/kueue.x-k8s.io/v1beta2/clusterqueues/{CQ}").get("status") or {}), timeout=30)
    c.kubectl("create", "-f", "-", input=yaml.safe_dump(C.job(NS, "new-f", gpus=1, queue=QUEUE)))
    c.wait_for("new-f's Workload made", lambda: c.workload_of(NS, "new-f"), timeout=20)
    time.sleep(3)
    for name in ("new-f", *PENDING, REQUEUED):
        assert not admitted(c, name), c.workload_of(NS, name)
    for name in ADMITTED:
        job, wl = c.job(NS, name), wl_of(c, name)
        assert job["spec"]["suspend"] is False
        assert is_true(wl, "Admitted") and wl["status"]["admission"]["clusterQueue"] == CQ, wl
        assert {p["metadata"]["uid"] for p in c.job_pods(NS, name)} == Before.pods[name]
    for name, job in Before.jobs.items():
        wls = [w["metadata"]["name"] for w in c.workloads(NS)
               if any(r.get("uid") == job["metadata"]["uid"] for r in w["metadata"].get("ownerReferences") or ())]
        assert wls == [KO.wl_name(job)], (name, wls)

    # a high-priority Job preempts the one Kueue admitted last; its template is put back as recorded
    high = C.job(NS, "urgent-h", gpus=2, queue=QUEUE)
    high["metadata"]["labels"]["kueue.x-k8s.io/priority-class"] = HIGH
    c.kubectl("create", "-f", "-", input=yaml.safe_dump(high))
    c.wait_for("run-b preempted and suspended", lambda: c.job(NS, "run-b")["spec"].get("suspend") is True, timeout=30,
               show=lambda: conditions(c))
    c.wait_for("urgent-h admitted", lambda: admitted(c, "urgent-h"), timeout=30, show=lambda: conditions(c))
    job_b = c.wait_for("run-b's pods gone", lambda: not c.job_pods(NS, "run-b") and c.job(NS, "run-b"), timeout=30)
    if c.version >= (1, 27):
        c.wait_for("run-b's template as its Workload recorded it", lambda: "nodeSelector" not in c.job(
            NS, "run-b")["spec"]["template"]["spec"], timeout=15, show=lambda: c.job(NS, "run-b")["spec"]["template"])
    else:   # 1.24 keeps startTime on suspension and refuses the change (as it refuses Kueue's)
        assert job_b["spec"]["template"]["spec"]["nodeSelector"] == POOL
        assert job_b["metadata"]["annotations"][ORIGINAL] == "{}"
    assert not c.job(NS, "run-a")["spec"].get("suspend")
    assert {p["metadata"]["uid"] for p in c.job_pods(NS, "run-a")} == Before.pods["run-a"]

    # run-a (two completions, one pod at a time) makes its second pod: kube-scheduler binds it
    # through gpuqueue's extender, on Kueue's admission
    assert c.kubelet.finish(NS, "job-name=run-a") == 1
    second = c.wait_for("run-a's second pod bound", lambda: [p for p in c.job_pods(NS, "run-a") if p["spec"].get(
        "nodeName") and p["metadata"]["uid"] not in Before.pods["run-a"] and p["status"].get("phase") != "Succeeded"],
        timeout=30)
    assert second[0]["spec"]["nodeName"] == NODE and not admitted(c, "wait-c")

    # Jobs finish one at a time: the waiting ones are admitted in Kueue's order
    steps = (("run-a", "wait-c"), ("urgent-h", "wait-d"), ("wait-c", "wait-e"), ("wait-d", "new-f"))
    for i, (done, nxt) in enumerate(steps):
        c.wait_for(f"{done}'s pod bound", lambda done=done: [p for p in c.job_pods(NS, done) if p["spec"].get("nodeName")],
                   timeout=30)
        c.kubelet.finish(NS, f"job-name={done}")
        c.wait_for(f"{nxt} admitted once {done} finished", lambda nxt=nxt: admitted(c, nxt), timeout=30,
                   show=lambda: conditions(c))
        for later, _ in ((n, None) for _, n in steps[i + 1:]):
            assert not admitted(c, later), conditions(c)
        assert not admitted(c, "run-b"), conditions(c)
        if done in Before.jobs:
            c.wait_for(f"{done}'s Workload finished and Kueue's finalizer off", lambda done=done: (
                lambda w: is_true(w, "Finished") and K.FINALIZER not in (w["metadata"].get("finalizers") or ()))(
                    wl_of(c, done)), timeout=30)

    # a finished Job deleted as kubectl deletes it: its Workload goes too (no finalizer holds it)
    gone = KO.wl_name(Before.jobs["run-a"])
    c.kubectl("delete", "job", "-n", NS, "run-a")
    c.wait_for(f"Workload {gone} deleted with its Job", lambda: c.api.call("GET", f"{WL}/{gone}")[0] == 404, timeout=30)


def gpuqueue_only(objs: list[dict], what: str) -> set[str]:
    out = set()
    for o in objs:
        meta = o["metadata"]
        for field in ("labels", "annotations"):
            for k in meta.get(field) or {}:
                if "gpuqueue.io" in k:
                    out.add(f"{what} {field[:-1]} {k}")
    return out


def test_the_way_back_leaves_objects_kueue_adopts(c):
    c.stop_extender()
    c.kubectl("delete", "mutatingwebhookconfiguration", "gpuqueue")
    c.kubectl("delete", "validatingwebhookconfiguration", "gpuqueue")
    c.kubectl("apply", "--server-side", "-f", str(c.dir / "kueue" / "crds.yaml"))
    crd = c.get("/apis/apiextensions.k8s.io/v1/customresourcedefinitions/workloads.kueue.x-k8s.io")
    assert [v["name"] for v in crd["spec"]["versions"]] == ["v1beta1", "v1beta2"]
    assert crd["spec"]["conversion"]["strategy"] == "Webhook" and crd["status"]["storedVersions"] == ["v1beta2"]

    jobs = c.items(f"/apis/batch/v1/namespaces/{NS}/jobs")
    wls = c.workloads(NS)
    for job in jobs:
        uid = job["metadata"]["uid"]
        mine = [w for w in wls if any(r.get("uid") == uid and r.get("controller") for r in w["metadata"]["ownerReferences"])]
        assert len(mine) == 1, (job["metadata"]["name"], mine)
        wl = mine[0]
        assert wl["metadata"]["name"] == KO.wl_name(job)
        assert wl["metadata"]["labels"]["kueue.x-k8s.io/job-uid"] == uid
        assert wl["spec"]["queueName"] == QUEUE
        if is_true(wl, "Admitted"):
            assert job["spec"]["suspend"] is False
            for psa in wl["status"]["admission"]["podSetAssignments"]:
                assert set(psa) >= {"name", "flavors", "resourceUsage", "count"}, psa
            # Kueue's EquivalentToWorkload: the Job's containers are its Workload's
            assert job["spec"]["template"]["spec"]["containers"] == wl["spec"]["podSets"][0]["template"]["spec"]["containers"]
    found = gpuqueue_only(jobs, "Job") | gpuqueue_only(wls, "Workload") | gpuqueue_only(c.pods(NS), "Pod")
    found |= gpuqueue_only([j["spec"]["template"] | {"metadata": j["spec"]["template"].get("metadata") or {}}
                            for j in jobs], "pod template")
    assert found <= GPUQUEUE_ONLY, found
    for name in ("wait-e", "new-f"):
        assert admitted(c, name) and not c.job(NS, name)["spec"]["suspend"]


def test_gpuqueues_crds_over_kueues_installed_by_helm_or_still_storing_v1beta1(c):
    """The guide's step 0 and 2 for the other installs, on Kueue's CRDs (applied again above):
    owned by Helm's field manager, gpuqueue's apply conflicts, `--force-conflicts` takes the
    versions but leaves the conversion webhook, which the guide's patch removes; with `v1beta1`
    among the stored versions the API server refuses gpuqueue's CRDs until the guide's patch."""
    from manifests.tools import render
    ours = c.dir / "gpuqueue-crds.yaml"
    ours.write_text(yaml.safe_dump_all([o for o in render.build() if o["kind"] == "CustomResourceDefinition"]))
    kueue = str(c.dir / "kueue" / "crds.yaml")
    c.kubectl("apply", "--server-side", "--force-conflicts", "--field-manager=helm", "-f", kueue)
    path = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/workloads.kueue.x-k8s.io"

    refused = c.kubectl("apply", "--server-side", "-f", str(ours), check=False)
    assert refused.returncode != 0 and 'conflicts with "helm"' in refused.stderr and ".spec.versions" in refused.stderr, \
        refused.stderr
    c.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(ours))
    crd = c.get(path)
    assert [v["name"] for v in crd["spec"]["versions"]] == ["v1beta2"]
    assert crd["spec"]["conversion"]["strategy"] == "Webhook"   # still Helm's
    for name in ("workloads", "clusterqueues", "localqueues", "cohorts"):
        c.kubectl("patch", "crd", f"{name}.kueue.x-k8s.io", "--type=json", "-p",
                  '[{"op":"replace","path":"/spec/conversion","value":{"strategy":"None"}}]')
    assert c.get(path)["spec"]["conversion"] == {"strategy": "None"}
    assert {w["metadata"]["name"] for w in c.workloads(NS)} >= {KO.wl_name(j) for n, j in Before.jobs.items() if n != "run-a"}

    # a cluster that ran Kueue before v0.16: v1beta1 among the stored versions
    c.kubectl("apply", "--server-side", "--force-conflicts", "-f", kueue)
    c.kubectl("patch", "crd", "workloads.kueue.x-k8s.io", "--subresource=status", "--type=merge",
              "-p", '{"status":{"storedVersions":["v1beta1","v1beta2"]}}')
    refused = c.kubectl("apply", "--server-side", "-f", str(ours), check=False)
    assert refused.returncode != 0 and 'status.storedVersions[0]: Invalid value: "v1beta1"' in refused.stderr, \
        refused.stderr
    c.kubectl("patch", "crd", "workloads.kueue.x-k8s.io", "--subresource=status", "--type=merge",
              "-p", '{"status":{"storedVersions":["v1beta2"]}}')
    c.kubectl("apply", "--server-side", "-f", str(ours))
    assert [v["name"] for v in c.get(path)["spec"]["versions"]] == ["v1beta2"]
