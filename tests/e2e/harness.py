"""One real control plane for the whole end-to-end session, with gpuqueue installed as an operator
would install it, but run from this checkout:

- etcd, kube-apiserver, kube-controller-manager and kube-scheduler from the launcher
  (GPUQUEUE_E2E_REALCLUSTER, used as a library, never copied), kube-scheduler with gpuqueue's
  extender in its KubeSchedulerConfiguration and the client certificate `gpuqueue certs generate`
  issues it;
- the project's CRDs, RBAC and webhook configurations: the chart (charts/gpuqueue) rendered by
  GPUQUEUE_E2E_HELM for this server's version, in scheduler mode cluster-scheduler, with the
  webhooks pointed at the local `gpuqueue webhook` by url and caBundle (the value
  webhook.external, "gpuqueue outside the cluster": there is no Service), applied with `kubectl
  apply --server-side`;
- `gpuqueue webhook` and `gpuqueue extender` as subprocesses (the venv's console script), each
  logged in as its own ServiceAccount with a token from the TokenRequest API, so the manifests'
  RBAC is what they get, and the webhook's default controller identity is the extender's;
- a tiny "kubelet" (no real one runs; Nodes are created through the API): it reports bound pods
  Running and Ready (or never Ready, per namespace), finishes pods when a test says so, and
  completes the graceful deletion of bound pods as a kubelet does.

Every process is stopped by its PID at the end (the launcher's teardown); the run's folder (logs
of every process, kubeconfigs) is named in every failure message and kept when a test failed."""

from __future__ import annotations

import base64
import contextlib
import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.parse
from pathlib import Path

import yaml

from tests.e2e.env import realcluster_path
from tests.e2e.watch import Watch

GPU = "nvidia.com/gpu"
GH200 = {"nvidia.com/gpu.product": "NVIDIA-GH200-480GB"}
# Kinds of the chart's rendering that have no place without a kubelet or a Service network (the
# components are given the rendered ConfigMap's Configuration as a file instead).
NOT_APPLIED = {"Deployment", "Service", "PodDisruptionBudget", "CronJob", "Job", "APIService", "ConfigMap"}


def load_realcluster():
    spec = importlib.util.spec_from_file_location("gpuqueue_e2e_realcluster", realcluster_path())
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def documents(path: Path | str) -> list[dict]:
    return [d for d in yaml.safe_load_all(Path(path).read_text()) if d]


class E2EFailure(AssertionError):
    pass


@contextlib.contextmanager
def started(before_install=None):
    """A Cluster up (Cluster.start's `before_install`), stopped when done; a failure to come up
    names the run's folder, kept with every process's log."""
    def log(msg: str) -> None:
        if not msg.startswith("realcluster: kept"):   # the harness keeps its folder only to copy the logs
            print(msg, flush=True)
    cluster = Cluster(log=log)
    try:
        cluster.start(before_install=before_install)
    except Exception as e:
        cluster.failed = True
        cluster.stop()
        raise RuntimeError(f"the end-to-end control plane did not come up (logs of every process: "
                           f"{cluster.dir}/logs): {e}") from e
    except BaseException:
        cluster.failed = True
        cluster.stop()
        raise
    try:
        yield cluster
    finally:
        cluster.stop()


class Cluster:
    """The session's control plane and gpuqueue; see the module's docstring."""

    def __init__(self, log=print, replicas: int = 1, **control_plane) -> None:
        """`control_plane`: more RealCluster arguments (e.g. scheduler_client, controller_manager_args);
        `replicas` > 1: that many webhooks and extenders (--leader-elect), each kind behind a
        round-robin forwarder that stands in for its Service (start_replicas)."""
        self.replicas = replicas
        self.webhooks: list = []
        self.extenders: list = []
        self.forwarders: dict = {}
        self.rc = load_realcluster()
        self.control_plane = control_plane
        self.k8s_bin = os.environ["GPUQUEUE_E2E_K8S_BIN"]
        self.kubectl_bin = os.environ["GPUQUEUE_E2E_KUBECTL"]
        self.helm_bin = os.environ["GPUQUEUE_E2E_HELM"]
        self.log = log
        self.dir = Path(tempfile.mkdtemp(prefix="gpuqueue-e2e-"))
        self.certs = self.dir / "certs"
        self.gpuqueue = str(Path(sys.executable).with_name("gpuqueue"))
        self.c = None
        self.webhook = self.extender = None
        self.kubelet: Kubelet | None = None
        self.failed = False
        self.timings: dict[str, float] = {}
        self._deleting: list[str] = []

    # ---------- lifecycle ----------
    def start(self, before_install=None) -> "Cluster":
        """`before_install(cluster)`: called once the control plane is up, before gpuqueue is
        installed (a case that starts from a cluster another queueing system ran)."""
        t0 = time.monotonic()
        subprocess.run([self.gpuqueue, "certs", "generate", "--out", str(self.certs), "--ip", "127.0.0.1",
                        "--dns", "localhost"], check=True, capture_output=True, timeout=60)
        (self.ext_port, self.metrics_port, self.webhook_port,
         self.webhook_health_port) = self.rc.free_ports(4)
        extender = self.rc.extender_from_cert_dir(f"https://127.0.0.1:{self.ext_port}", str(self.certs))
        self.c = self.rc.RealCluster(k8s_bin=self.k8s_bin, etcd=os.environ["GPUQUEUE_E2E_ETCD"],
                                     extender=extender, log=self.log, **self.control_plane)
        self.c.start(scheduler=False)
        self.api = self.c.api
        self.version = self.c.k8s_version()
        self.timings["control plane"] = time.monotonic() - t0
        self.objects = self.render()
        if before_install is not None:
            before_install(self)
        self._install()
        self.config_path = self.dir / "config.yaml"
        (config,) = [o for o in self.objects if o["kind"] == "ConfigMap" and o["metadata"]["name"] == "gpuqueue-config"]
        self.config_path.write_text(config["data"]["config.yaml"])
        if self.replicas > 1:
            self.start_replicas()
        else:
            self.start_webhook()
            self.start_extender()
        self.kubectl("apply", "--server-side", "-f", str(self._webhook_configurations()))
        self.c.start_scheduler()
        self.kubelet = Kubelet(self)
        self.kubelet.start()
        self.timings["up"] = time.monotonic() - t0
        self.log(f"e2e: Kubernetes v{'.'.join(map(str, self.version))} and gpuqueue up in "
                 f"{self.timings['up']:.1f}s; run folder {self.dir}")
        return self

    def stop(self) -> None:
        if self.kubelet:
            self.kubelet.stop()
        for fwd in self.forwarders.values():
            fwd.stop()
        if self.c is None:
            return
        keep = self.failed or os.environ.get("GPUQUEUE_E2E_KEEP") == "1"
        logs = Path(self.c.path("logs")) if self.c.dir else None
        before = os.environ.get("REALCLUSTER_KEEP")
        os.environ["REALCLUSTER_KEEP"] = "1"   # its folder stays until the logs are copied
        try:
            for proc in reversed(self.c.procs):   # as c.stop() does, timed
                t0 = time.monotonic()
                proc.stop()
                self.timings[f"stop {proc.name}"] = time.monotonic() - t0
            self.c.stop()  # every process it spawned (webhook, extender too), by PID
        finally:
            if before is None:
                os.environ.pop("REALCLUSTER_KEEP", None)
            else:
                os.environ["REALCLUSTER_KEEP"] = before
        if keep and logs and logs.is_dir():
            shutil.copytree(logs, self.dir / "logs", dirs_exist_ok=True)
        slow = {k: round(v, 1) for k, v in self.timings.items() if k.startswith("stop") and v > 1}
        if slow:
            self.log(f"e2e: slow to stop (s): {slow}")
        if keep:
            self.log(f"e2e: kept {self.dir} (logs/: every process's log)")
        else:
            shutil.rmtree(self.dir, ignore_errors=True)
        if self.c.dir:
            shutil.rmtree(self.c.dir, ignore_errors=True)

    # ---------- installation ----------
    def chart_values(self) -> dict:
        """The chart's values for gpuqueue run from this checkout: the cluster's kube-scheduler calls
        the extender (GPU pods keep default-scheduler), the webhooks call the local process."""
        ca = base64.b64encode((self.certs / "ca.crt").read_bytes()).decode()
        return {"schedulerMode": "cluster-scheduler",
                "webhook": {"external": {"url": f"https://127.0.0.1:{self.webhook_port}", "caBundle": ca}}}

    def render(self, values: dict | None = None) -> list[dict]:
        """The chart rendered for this server's version with chart_values() (and `values` over them)."""
        from manifests.tools import render
        kube_version = f"{self.version[0]}.{self.version[1]}.0"
        merged = {**self.chart_values(), **(values or {})}
        return render.objects(render.template("--kube-version", kube_version, values=merged, helm=self.helm_bin))

    def _install(self) -> None:
        """The project's install, as far as it applies without a kubelet: namespace, CRDs, RBAC
        (and the JobSet CRD published by JobSet, read from the shared fixtures), before the
        components start, so the extender's informers see every kind."""
        objects = [o for o in self.objects if o["kind"] not in NOT_APPLIED
                   and not o["kind"].endswith("WebhookConfiguration")]
        path = self.dir / "install.yaml"
        path.write_text(yaml.safe_dump_all(objects))
        self.kubectl("apply", "--server-side", "-f", str(path))
        jobset = jobset_crd()
        if jobset:
            self.kubectl("apply", "--server-side", "-f", str(jobset))
        self.wait_established()

    def wait_established(self, timeout: float = 60) -> None:
        """Every CRD Established (`kubectl wait --for=condition=Established crd --all` fails on a CRD
        the server has not given conditions yet)."""
        def pending():
            return [c["metadata"]["name"] for c in self.items("/apis/apiextensions.k8s.io/v1/customresourcedefinitions")
                    if not is_true(c, "Established")]
        self.wait_for("every CRD Established", lambda: not pending(), timeout=timeout, show=pending)

    def _webhook_configurations(self) -> Path:
        p = self.dir / "webhookconfigurations.yaml"
        p.write_text(yaml.safe_dump_all([o for o in self.objects if o["kind"].endswith("WebhookConfiguration")]))
        return p

    def token_kubeconfig(self, namespace: str, sa: str, name: str | None = None, server: str | None = None) -> Path:
        """A kubeconfig logged in as ServiceAccount namespace/sa (a TokenRequest token, 2 h), for
        the API server or `server` (a forwarder in front of it)."""
        tr = self.api.post(f"/api/v1/namespaces/{namespace}/serviceaccounts/{sa}/token",
                           {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
                            "spec": {"expirationSeconds": 7200}})
        path = self.dir / f"{name or sa}.kubeconfig"
        ca = base64.b64encode(Path(self.c.path("pki", "ca.crt")).read_bytes()).decode()
        path.write_text(yaml.safe_dump({
            "apiVersion": "v1", "kind": "Config", "current-context": "e2e",
            "clusters": [{"name": "e2e", "cluster": {"server": server or self.c.server,
                                                     "certificate-authority-data": ca}}],
            "users": [{"name": sa, "user": {"token": tr["status"]["token"]}}],
            "contexts": [{"name": "e2e", "context": {"cluster": "e2e", "user": sa, "namespace": namespace}}]}))
        return path

    def start_webhook(self, port: int | None = None, name: str = "gpuqueue-webhook",
                      extra_args: tuple[str, ...] | list[str] = ()):
        """`gpuqueue webhook` on `port` (default: the one the webhook configurations name);
        `extra_args` go on its command line (its shutdown delay is short here unless they say
        otherwise: nothing routes to it that would need the time to go elsewhere)."""
        kc = self.token_kubeconfig("gpuqueue-system", "gpuqueue-webhook", name)
        port = port or self.webhook_port
        self.webhook = self.c.spawn(name, [
            self.gpuqueue, "webhook", "--cert-dir", str(self.certs), "--host", "127.0.0.1",
            "--port", str(port), "--config", str(self.config_path), "--shutdown-delay-seconds", "0.2",
            *extra_args], env={**os.environ, "KUBECONFIG": str(kc)})
        self._wait_https(self.webhook, port, "/readyz")
        return self.webhook

    def stop_webhook(self) -> None:
        """Stops the webhook process (an outage of every replica); start_webhook() brings it back."""
        self._stop_process("webhook")

    def restart_webhook(self, extra_args: tuple[str, ...] | list[str] = ()) -> None:
        self.stop_webhook()
        self.start_webhook(extra_args=extra_args)

    def start_extender(self, config: Path | None = None, port: int | None = None, metrics_port: int | None = None,
                       name: str = "gpuqueue-extender", leader_elect: bool = False, server: str | None = None):
        """`gpuqueue extender` (controller and extender verbs), with the session's Configuration
        or `config`; stop_extender() first when one runs."""
        kc = self.token_kubeconfig("gpuqueue-system", "gpuqueue-extender", name, server)
        metrics_port = metrics_port or self.metrics_port
        self.extender = self.c.spawn(name, [
            self.gpuqueue, "extender", "--kubeconfig", str(kc), "--config", str(config or self.config_path),
            "--cert-dir", str(self.certs), "--host", "127.0.0.1", "--port", str(port or self.ext_port),
            "--metrics-port", str(metrics_port), "--visibility-port", "0",
            *(["--leader-elect"] if leader_elect else [])])
        self._wait_https(self.extender, metrics_port, "/readyz")
        return self.extender

    def start_replicas(self) -> None:
        """`replicas` webhooks and extenders with --leader-elect, as the manifests deploy them; the
        webhook and extender ports are round-robin forwarders in front of them (tests/e2e/forwarder.py)."""
        from tests.e2e.forwarder import Forwarder
        n = self.replicas
        ports = self.rc.free_ports(3 * n)
        self.replica_ports = [{"webhook": ports[i], "extender": ports[n + i], "metrics": ports[2 * n + i]}
                              for i in range(n)]
        api = urllib.parse.urlsplit(self.c.server)
        for i in range(n):   # each extender's own path to the API server, to be stalled (Forwarder.stall)
            self.forwarders[f"api-{i}"] = Forwarder([(api.hostname, api.port)]).start()
        for i, p in enumerate(self.replica_ports):
            self.webhooks.append(self.start_webhook(p["webhook"], f"gpuqueue-webhook-{i}"))
        for i in range(n):
            self.start_extender_replica(i)
        self.forwarders |= {
            "webhook": Forwarder([("127.0.0.1", p["webhook"]) for p in self.replica_ports],
                                 port=self.webhook_port).start(),
            "extender": Forwarder([("127.0.0.1", p["extender"]) for p in self.replica_ports],
                                  port=self.ext_port).start()}

    def start_extender_replica(self, i: int):
        """(Again) extender replica i, on its own ports, behind the extender forwarder."""
        p = self.replica_ports[i]
        proc = self.start_extender(port=p["extender"], metrics_port=p["metrics"], name=f"gpuqueue-extender-{i}",
                                   leader_elect=True, server=f"https://127.0.0.1:{self.forwarders[f'api-{i}'].port}")
        if i < len(self.extenders):
            self.extenders[i] = proc
        else:
            self.extenders.append(proc)
        return proc

    def stop_extender(self) -> None:
        self._stop_process("extender")

    def _stop_process(self, attribute: str) -> None:
        p = getattr(self, attribute)
        setattr(self, attribute, None)
        if p is not None:
            p.stop()
            if p in self.c.procs:
                self.c.procs.remove(p)

    def _wait_https(self, proc, port: int, path: str, timeout: float = 90) -> None:
        import ssl
        ctx = ssl.create_default_context()
        ctx.check_hostname, ctx.verify_mode = False, ssl.CERT_NONE

        def ready():
            with self.rc.urlopen(f"https://127.0.0.1:{port}{path}", context=ctx, timeout=3) as r:
                return r.status == 200
        self.c._wait(proc, "ready", ready, timeout)

    # ---------- using it ----------
    def kubectl(self, *args: str, kubeconfig: Path | str | None = None, input: str | None = None,
                check: bool = True, timeout: float = 60) -> subprocess.CompletedProcess:
        env = {**os.environ, "KUBECONFIG": str(kubeconfig or self.c.kubeconfig)}
        for var in ("NO_PROXY", "no_proxy"):
            env[var] = ",".join(x for x in (env.get(var), "127.0.0.1,localhost") if x)
        r = subprocess.run([self.kubectl_bin, *args], env=env, input=input, capture_output=True, text=True,
                           timeout=timeout)
        if check and r.returncode != 0:
            self.fail(f"kubectl {' '.join(args)} exited {r.returncode}: {r.stderr.strip()}")
        return r

    def apply(self, objs: list[dict] | dict, server_side: bool = False) -> None:
        objs = [objs] if isinstance(objs, dict) else objs
        args = ["apply", "--server-side"] if server_side else ["apply"]
        self.kubectl(*args, "-f", "-", input=yaml.safe_dump_all(objs))

    def fail(self, message: str):
        self.failed = True
        raise E2EFailure(f"{message}\n(logs of every process: {self.dir}/logs, kept after the session)")

    def wait_for(self, what: str, probe, timeout: float = 30.0, poll: float = 0.2, show=None):
        """Poll `probe()` until it returns something truthy; fail naming `what` and its last value
        (or what `show()` returns then)."""
        deadline = time.monotonic() + timeout
        last = None
        while True:
            try:
                last = probe()
            except Exception as e:   # an API hiccup is a value, not the end of the wait
                last = e
            if last and not isinstance(last, Exception):
                return last
            if time.monotonic() >= deadline:
                if show is not None:
                    try:
                        last = show()
                    except Exception as e:
                        last = e
                self.fail(f"{what}: not within {timeout:.0f}s; last seen: {str(last)[:2000]}")
            time.sleep(poll)

    def get(self, path: str, **query):
        return self.api.get(path, query=query or None)

    def items(self, path: str, **query) -> list[dict]:
        return self.api.get(path, query=query or None)["items"]

    def namespace(self, name: str, labels: dict | None = None) -> None:
        self.api.post("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace",
                                             "metadata": {"name": name, "labels": labels or {}}})

    def node(self, name: str, gpus: int, labels: dict | None = None, cpu: str = "72", memory: str = "480Gi") -> None:
        """A fake Node: allocatable as a kubelet and device plugin would report, Ready."""
        alloc = {"cpu": cpu, "memory": memory, GPU: str(gpus), "pods": "110"}
        node = {"apiVersion": "v1", "kind": "Node",
                "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, **(labels or {})}},
                "status": {"capacity": alloc, "allocatable": alloc,
                           "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
                                           "message": "e2e fake kubelet"}]}}
        self.api.post("/api/v1/nodes", node)
        status = self.api.get(f"/api/v1/nodes/{name}").get("status") or {}
        if (status.get("allocatable") or {}).get(GPU) != str(gpus):   # a version that drops status on create
            self.api.patch(f"/api/v1/nodes/{name}/status", {"status": node["status"]})

    def delete_nodes(self, names) -> None:
        for n in names:
            self._delete(f"/api/v1/nodes/{n}")

    def delete_namespaces(self, names) -> None:
        for n in names:
            self._delete(f"/api/v1/namespaces/{n}")

    def delete_cluster_objects(self, plural: str, names) -> None:
        for n in names:
            self._delete(f"/apis/kueue.x-k8s.io/v1beta2/{plural}/{n}")

    def _delete(self, path: str) -> None:
        self.api.call("DELETE", path)
        self._deleting.append(path)

    def forget_deletions(self) -> None:
        self._deleting = []

    def settle(self, timeout: float = 90) -> None:
        """After a case: wait until what it deleted is gone (a namespace with its pods, whose
        graceful deletion the kubelet completes), so the next case, or the next run of the same
        one, starts from nothing of it."""
        paths, self._deleting = self._deleting, []
        for path in paths:
            self.wait_for(f"{path} deleted", lambda path=path: self.api.call("GET", path)[0] == 404,
                          timeout=timeout, poll=0.3)

    # Jobs, Workloads, pods
    def job(self, ns: str, name: str) -> dict:
        return self.api.get(f"/apis/batch/v1/namespaces/{ns}/jobs/{name}")

    def workloads(self, ns: str) -> list[dict]:
        return self.items(f"/apis/kueue.x-k8s.io/v1beta2/namespaces/{ns}/workloads")

    def workload_of(self, ns: str, name: str, kind: str = "Job") -> dict | None:
        for wl in self.workloads(ns):
            for ref in wl["metadata"].get("ownerReferences") or ():
                if ref.get("kind") == kind and ref.get("name") == name:
                    return wl
        return None

    def pods(self, ns: str, selector: str | None = None) -> list[dict]:
        q = {"labelSelector": selector} if selector else {}
        return self.items(f"/api/v1/namespaces/{ns}/pods", **q)

    def job_pods(self, ns: str, job: str) -> list[dict]:
        return [p for p in self.pods(ns, f"job-name={job}") if not p["metadata"].get("deletionTimestamp")]


def condition(obj: dict | None, ctype: str) -> dict:
    for c in ((obj or {}).get("status") or {}).get("conditions") or ():
        if c.get("type") == ctype:
            return c
    return {}


def is_true(obj: dict | None, ctype: str) -> bool:
    return condition(obj, ctype).get("status") == "True"


def jobset_crd() -> Path | None:
    from tests.shared_fixtures import FIXTURES
    path = FIXTURES / "crds" / "jobset" / "jobset.x-k8s.io_jobsets.yaml"
    return path if path.is_file() else None


class Kubelet(Watch):
    """What a kubelet does that the suite needs, for every fake Node: a bound pod is reported
    Running with Ready=True (or Running and never Ready, in the namespaces in `never_ready`); a
    bound pod being deleted gracefully is deleted for good (the kubelet's part of a deletion);
    `finish()` reports a Job's pods Succeeded. Driven by a watch of all pods. It also notes when it
    first saw each pod bound (`bound_at`, monotonic time)."""

    def __init__(self, cluster: Cluster) -> None:
        super().__init__(cluster.api, "/api/v1/pods", name="e2e-kubelet")
        self.cluster = cluster
        self.never_ready: set[str] = set()
        self.passive = False  # only note bindings and finish deletions (a benchmark's timing)
        self.bound_at: dict[str, float] = {}
        self._done: set[tuple[str, str]] = set()    # (uid, what) already written

    def on_event(self, arrived: float, typ: str, obj: dict) -> None:
        if typ in ("ADDED", "MODIFIED"):
            self._handle(obj)

    def _handle(self, pod: dict) -> None:
        meta, spec, status = pod["metadata"], pod["spec"], pod.get("status") or {}
        uid, ns, name = meta["uid"], meta["namespace"], meta["name"]
        if not spec.get("nodeName"):
            return
        self.bound_at.setdefault(uid, time.monotonic())
        if self.passive and not meta.get("deletionTimestamp"):
            return
        if meta.get("deletionTimestamp"):
            if (uid, "deleted") not in self._done:
                self._done.add((uid, "deleted"))
                self.api.call("DELETE", f"/api/v1/namespaces/{ns}/pods/{name}",
                              {"apiVersion": "v1", "kind": "DeleteOptions", "gracePeriodSeconds": 0,
                               "preconditions": {"uid": uid}})
            return
        if status.get("phase", "Pending") == "Pending" and (uid, "running") not in self._done:
            self._done.add((uid, "running"))
            ready = ns not in self.never_ready
            self._set_status(pod, "Running", ready)

    def _set_status(self, pod: dict, phase: str, ready: bool) -> None:
        meta = pod["metadata"]
        now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        flag = "True" if ready else "False"
        containers = pod["spec"]["containers"]
        if phase == "Succeeded":
            state = {"terminated": {"exitCode": 0, "reason": "Completed", "startedAt": now, "finishedAt": now}}
            flag = "False"
        else:
            state = {"running": {"startedAt": now}}
        status = {"phase": phase, "hostIP": "10.1.0.1", "podIP": "10.2.0.1", "startTime": now,
                  "conditions": [{"type": t, "status": s, "lastTransitionTime": now} for t, s in (
                      ("Initialized", "True"), ("Ready", flag), ("ContainersReady", flag), ("PodScheduled", "True"))],
                  "containerStatuses": [{"name": c["name"], "image": c.get("image", ""), "imageID": "",
                                         "ready": flag == "True", "restartCount": 0, "started": phase == "Running",
                                         "state": state} for c in containers]}
        s, body = self.api.call("PATCH", f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}/status",
                                {"status": status}, content_type=self.api.MERGE)
        if s >= 400 and s != 404:
            self.errors.append(f"status of {meta['namespace']}/{meta['name']}: HTTP {s}: {str(body)[:200]}")

    def finish(self, ns: str, selector: str) -> int:
        """Every bound pod matching `selector` in `ns` exits 0 (phase Succeeded); how many."""
        n = 0
        for pod in self.cluster.pods(ns, selector):
            if pod["spec"].get("nodeName") and not pod["metadata"].get("deletionTimestamp"):
                self._done.add((pod["metadata"]["uid"], "running"))
                self._set_status(pod, "Succeeded", False)
                n += 1
        return n
