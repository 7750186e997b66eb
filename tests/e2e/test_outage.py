"""Issue 36, point 3: a gpuqueue outage harms no one else.

With the webhook process stopped (every replica gone), in a tenant namespace:
- a pod that wants no GPU and names no queue is created and bound by kube-scheduler where the
  server has matchConditions (1.28+); on an older server it is refused with the chart's default
  (podWebhooks.failurePolicy Fail), and created and bound with the value Ignore;
- a bare GPU pod is refused (its webhook is still called), and a queued Job that quota frees
  during the outage waits: the controller cannot admit it while the webhook that validates its
  writes is down, and is admitted, and its pod bound, once the webhook is back, with no one's help.

And the cost per pod, read from kube-apiserver's own admission metrics: how many webhook calls a
pod that wants no GPU costs with and without the matchConditions, and their latency."""

from tests.e2e.env import require

require()

import os  # noqa: E402
import re  # noqa: E402
import time  # noqa: E402

import yaml  # noqa: E402

from tests.e2e import cases as C  # noqa: E402
from tests.e2e.harness import is_true  # noqa: E402

NS = "e2e-outage"
POOL = {C.POOL: "outage"}
POD_HOOKS = ("pod.gpuqueue.io", "binding.gpuqueue.io")
METRIC = "apiserver_admission_webhook_admission_duration_seconds"


def plain_pod(name: str, **resources) -> dict:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"namespace": NS, "name": name},
            "spec": {"containers": [{"name": "c", "image": "busybox", "command": ["sleep", "600"],
                                     "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}, **resources}}]}}


def create_pod(e2e, pod: dict):
    return e2e.api.call("POST", f"/api/v1/namespaces/{NS}/pods", pod)


def bound(e2e, name: str, timeout: float = 30) -> str:
    return e2e.wait_for(f"pod {name} bound", lambda: e2e.get(f"/api/v1/namespaces/{NS}/pods/{name}")["spec"]
                        .get("nodeName"), timeout=timeout)


def has_match_conditions(e2e) -> bool:
    return tuple(e2e.version[:2]) >= (1, 28)


def apply_webhooks(e2e, values: dict | None = None) -> None:
    """The webhook configurations rendered with `values` over the session's (None: as the session has them)."""
    objects = [o for o in e2e.render(values) if o["kind"].endswith("WebhookConfiguration")]
    e2e.kubectl("apply", "--server-side", "--force-conflicts", "-f", "-", input=yaml.safe_dump_all(objects))


def webhook_calls(e2e) -> dict[tuple[str, str], tuple[float, float]]:
    """(webhook name, type) -> (calls, seconds) so far, as kube-apiserver counts them."""
    text = e2e.kubectl("get", "--raw", "/metrics").stdout
    out: dict[tuple[str, str], tuple[float, float]] = {}
    for line in text.splitlines():
        m = re.match(METRIC + r"_(count|sum)\{(.*)\} (\S+)$", line)
        if not m:
            continue
        labels = dict(re.findall(r'(\w+)="([^"]*)"', m.group(2)))
        if labels.get("name") not in POD_HOOKS:
            continue
        key = (labels["name"], labels.get("type", ""))
        n, s = out.get(key, (0.0, 0.0))
        out[key] = (n + float(m.group(3)), s) if m.group(1) == "count" else (n, s + float(m.group(3)))
    return out


def delta(before, after) -> tuple[int, float]:
    calls = sum(after.get(k, (0, 0))[0] - before.get(k, (0, 0))[0] for k in set(before) | set(after))
    seconds = sum(after.get(k, (0, 0))[1] - before.get(k, (0, 0))[1] for k in set(before) | set(after))
    return int(calls), seconds


def test_a_webhook_outage_stops_no_pod_that_wants_no_gpu(e2e):
    e2e.namespace(NS)
    e2e.node("e2e-outage-n1", 2, POOL)
    try:
        e2e.apply([C.flavor("e2e-outage", POOL), C.cluster_queue("e2e-outage", "e2e-outage", 1),
                   C.local_queue(NS, "lq", "e2e-outage")])
        # one GPU of quota: "first" runs, "second" waits for it
        for name in ("first", "second"):
            e2e.kubectl("create", "-f", "-", input=yaml.safe_dump(C.job(NS, name, queue="lq")))
        e2e.wait_for("first admitted", lambda: is_true(e2e.workload_of(NS, "first"), "Admitted"), timeout=30)
        e2e.wait_for("first's pod bound", lambda: [p for p in e2e.job_pods(NS, "first") if p["spec"].get("nodeName")],
                     timeout=30)
        assert not is_true(e2e.workload_of(NS, "second"), "Admitted")

        e2e.stop_webhook()
        t_down = time.monotonic()

        # a pod that wants no GPU and names no queue
        status, body = create_pod(e2e, plain_pod("plain"))
        if has_match_conditions(e2e):
            assert status == 201, body
            assert bound(e2e, "plain") == "e2e-outage-n1"
        else:
            assert status >= 500 and 'failed calling webhook "pod.gpuqueue.io"' in str(body), (status, body)
            apply_webhooks(e2e, {"podWebhooks": {"failurePolicy": "Ignore"}})
            status, body = create_pod(e2e, plain_pod("plain"))
            assert status == 201, body
            assert bound(e2e, "plain") == "e2e-outage-n1"

        # a bare GPU pod: still sent to the webhook, so refused (Fail), or with Ignore on an old
        # server created but refused a node by the extender (Strict enforcement)
        status, body = create_pod(e2e, plain_pod("bare-gpu", limits={C.GPU: "1"}))
        if has_match_conditions(e2e):
            assert status >= 500 and 'failed calling webhook "pod.gpuqueue.io"' in str(body), (status, body)
        else:
            assert status == 201, body
            time.sleep(3)
            assert not e2e.get(f"/api/v1/namespaces/{NS}/pods/bare-gpu")["spec"].get("nodeName")

        # the quota freed during the outage: "second" cannot be admitted while its writes are refused
        assert e2e.kubelet.finish(NS, "job-name=first") == 1
        e2e.wait_for("first finished", lambda: is_true(e2e.job(NS, "first"), "Complete"), timeout=30)
        time.sleep(5)
        assert not is_true(e2e.workload_of(NS, "second"), "Admitted"), "admitted with the webhook down?"
        assert not e2e.job_pods(NS, "second")
        e2e.log(f"e2e outage: webhook down {time.monotonic() - t_down:.1f}s; second waits")

        e2e.start_webhook()
        t_up = time.monotonic()
        if not has_match_conditions(e2e):
            apply_webhooks(e2e)   # the chart's defaults again
        e2e.wait_for("second admitted after the webhook is back",
                     lambda: is_true(e2e.workload_of(NS, "second"), "Admitted"), timeout=60)
        pods = e2e.wait_for("second's pod bound", lambda: [p for p in e2e.job_pods(NS, "second")
                                                           if p["spec"].get("nodeName")], timeout=60)
        assert pods[0]["spec"]["nodeName"] == "e2e-outage-n1"
        e2e.log(f"e2e outage: second admitted and bound {time.monotonic() - t_up:.1f}s after the webhook came back")
    finally:
        if e2e.webhook is None:
            e2e.start_webhook()
        e2e.delete_namespaces([NS])
        e2e.delete_nodes(["e2e-outage-n1"])
        e2e.delete_cluster_objects("clusterqueues", ["e2e-outage"])
        e2e.delete_cluster_objects("resourceflavors", ["e2e-outage"])


def webhook_cpu_seconds(e2e) -> float:
    """CPU time (user + system) the webhook process has used so far."""
    fields = open(f"/proc/{e2e.webhook.pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def test_the_webhooks_are_not_called_for_pods_that_want_no_gpu(e2e):
    """Webhook calls, their latency as kube-apiserver measures it, and the webhook's CPU per non-GPU
    pod (create and bind), with the chart's defaults and with podWebhooks.matchConditions=false
    (what every pod paid before)."""
    n = 40
    e2e.namespace(NS + "-cost")
    e2e.node("e2e-outage-n2", 0, {C.POOL: "outage-cost"})
    ns = NS + "-cost"
    figures = {}
    try:
        for label, values in (("no matchConditions", {"podWebhooks": {"matchConditions": False}}), ("chart defaults", None)):
            apply_webhooks(e2e, values)
            time.sleep(2)   # the API server's webhook configuration watch
            before, cpu = webhook_calls(e2e), webhook_cpu_seconds(e2e)
            for i in range(n):
                pod = plain_pod(f"{label.split()[0]}-{i}")
                pod["metadata"]["namespace"] = ns
                status, body = e2e.api.call("POST", f"/api/v1/namespaces/{ns}/pods", pod)
                assert status == 201, body
            e2e.wait_for(f"{n} pods bound", lambda: sum(1 for p in e2e.pods(ns) if p["spec"].get("nodeName")
                                                         and p["metadata"]["name"].startswith(label.split()[0])) == n,
                         timeout=60)
            figures[label] = (*delta(before, webhook_calls(e2e)), webhook_cpu_seconds(e2e) - cpu)
        e2e.log("e2e webhook calls per non-GPU pod (v{}): {}".format(
            ".".join(map(str, e2e.version[:2])),
            "; ".join(f"{k}: {c / n:.2f} calls, {s / n * 1000:.2f} ms of calls, {cpu / n * 1000:.2f} ms webhook CPU"
                      for k, (c, s, cpu) in figures.items())))
        assert figures["no matchConditions"][0] == 3 * n   # mutating pod, validating pod, binding
        assert figures["chart defaults"][0] == (0 if has_match_conditions(e2e) else 3 * n)
    finally:
        apply_webhooks(e2e)
        e2e.delete_namespaces([ns])
        e2e.delete_nodes(["e2e-outage-n2"])


def shapes() -> dict[str, tuple[dict, bool]]:
    """Pods by name: (the pod, whether its pod webhooks must be called)."""
    gpu = {"limits": {C.GPU: "1"}}
    def p(name, labels=None, init=None, node=None, **res):
        pod = plain_pod(name, **res)
        pod["metadata"]["namespace"] = NS + "-shapes"
        if labels:
            pod["metadata"]["labels"] = labels
        if init:
            pod["spec"]["initContainers"] = [{"name": "i", "image": "busybox", "resources": init}]
        if node:
            pod["spec"].update(nodeName=node, schedulerName="someone-else")
        return pod
    bare = p("no-resources")
    bare["spec"]["containers"][0].pop("resources")
    return {
        "cpu-memory": (p("cpu-memory"), False),
        "no-resources": (bare, False),
        "ephemeral-storage": (p("ephemeral-storage", limits={"ephemeral-storage": "1Gi", "memory": "64Mi"}), False),
        "other-label": (p("other-label", labels={"app": "x", "kueue.x-k8s.io.example/y": "z"}), False),
        "cpu-with-node": (p("cpu-with-node", node="nowhere"), False),
        "gpu-limit": (p("gpu-limit", **gpu), True),
        "gpu-init": (p("gpu-init", init=gpu), True),
        "fpga-request": (p("fpga-request", requests={"cpu": "1", "example.com/fpga": "1"}), True),
        "hugepages": (p("hugepages", limits={"hugepages-2Mi": "2Mi", "memory": "64Mi"}), True),
        "queue-label": (p("queue-label", labels={"kueue.x-k8s.io/queue-name": "lq"}), True),
        "group-label": (p("group-label", labels={"kueue.x-k8s.io/pod-group-name": "g"}), True),
        "gpu-with-node": (p("gpu-with-node", node="nowhere", **gpu), True),
    }


def review(e2e, path: str, pod: dict) -> dict:
    import json
    import ssl
    import urllib.request
    import uuid
    body = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
        "uid": str(uuid.uuid4()), "kind": {"group": "", "version": "v1", "kind": "Pod"},
        "resource": {"group": "", "version": "v1", "resource": "pods"}, "namespace": pod["metadata"]["namespace"],
        "name": pod["metadata"]["name"], "operation": "CREATE", "userInfo": {"username": "alice"},
        "object": pod, "dryRun": False}}
    ctx = ssl.create_default_context(cafile=str(e2e.certs / "ca.crt"))
    ctx.check_hostname = False
    req = urllib.request.Request(f"https://127.0.0.1:{e2e.webhook_port}{path}", json.dumps(body).encode(),
                                 {"Content-Type": "application/json"})
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}), urllib.request.HTTPSHandler(context=ctx))
    with opener.open(req, timeout=10) as r:
        return json.loads(r.read())["response"]


def test_the_server_skips_exactly_pods_the_webhook_would_let_through_unchanged(e2e):
    """With the webhook down, a pod is created iff kube-apiserver did not call the pod webhooks
    (their matchConditions); each pod it skipped, sent to the webhook once it is back, is allowed
    with no patch and no warning: the conditions lose nothing the webhook enforces."""
    if not has_match_conditions(e2e):
        import pytest
        pytest.skip("no matchConditions before 1.28: every pod is sent (test_a_webhook_outage_... covers it)")
    ns = NS + "-shapes"
    e2e.namespace(ns)
    cases = shapes()
    try:
        e2e.stop_webhook()
        created = {}
        for name, (pod, _) in cases.items():
            status, body = e2e.api.call("POST", f"/api/v1/namespaces/{ns}/pods", pod)
            created[name] = status == 201
            if status != 201:
                assert 'failed calling webhook "pod.gpuqueue.io"' in str(body), (name, status, body)
        e2e.start_webhook()
        assert {n: not c for n, c in created.items()} == {n: called for n, (_, called) in cases.items()}
        for name, (pod, called) in cases.items():
            if called:
                continue
            for path in ("/mutate--v1-pod", "/validate--v1-pod"):
                answer = review(e2e, path, pod)
                assert answer["allowed"] and "patch" not in answer and not answer.get("warnings"), (name, path, answer)
        e2e.log(f"e2e matchConditions on v{e2e.version[0]}.{e2e.version[1]}: skipped "
                f"{sorted(n for n, c in created.items() if c)}, sent {sorted(n for n, c in created.items() if not c)}")
    finally:
        if e2e.webhook is None:
            e2e.start_webhook()
        e2e.delete_namespaces([ns])
