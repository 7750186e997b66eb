"""What the controller keeps of the cluster's pods with every pod-queueing kind enabled (pod,
LeaderWorkerSet): its caches of pods, their objects and bytes, against the API server stand-in.

    python bench/pod_caches.py [--pods 3000]

Creates N ordinary pods (a Deployment's, not queued: every pod of the cluster is watched all the
same), starts the controller, waits until its caches are whole, and reports per informer that lists
pods the number of objects and the bytes of their JSON, and the traced Python memory the caches
hold (tracemalloc, taken before and after the start). One run; not part of the test suite.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import tracemalloc

import bench_env  # noqa: E402,F401  (the repository on sys.path, or one line saying why not)

import orjson  # noqa: E402
from kubernetes_asyncio import client  # noqa: E402

from gpuqueue.extender.controller.client import kinds as K  # noqa: E402
from gpuqueue.extender.controller.controller import Controller  # noqa: E402
from gpuqueue.jobframework.registry import IntegrationsConfig  # noqa: E402
from tests.controller_support import FAST  # noqa: E402
from tests.standin import ApiServer  # noqa: E402

FRAMEWORKS = IntegrationsConfig(("batch/job", "pod", "leaderworkerset.x-k8s.io/leaderworkerset"))


def pod(i: int) -> dict:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"namespace": "web", "name": f"web-{i}", "labels": {"app": "web", "pod-template-hash": "5d9f"}},
            "spec": {"nodeName": f"node-{i % 50}", "containers": [{
                "name": "web", "image": "nginx:1.27", "command": ["nginx", "-g", "daemon off;"],
                "env": [{"name": f"VAR_{k}", "value": "x" * 40} for k in range(8)],
                "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}}}]}}


async def main(n: int) -> None:
    async with ApiServer(kubernetes_minor=27) as api:
        api.install_crds("leaderworkersets.leaderworkerset.x-k8s.io")
        kube = client.ApiClient(api.client_configuration())
        core = client.CoreV1Api(kube)
        for ns in ("web", "gpuqueue-system"):
            await core.create_namespace({"metadata": {"name": ns}})
        for i in range(n):
            await core.create_namespaced_pod("web", pod(i))
        tracemalloc.start()
        before = tracemalloc.get_traced_memory()[0]
        ctl_api = client.ApiClient(api.client_configuration())
        ctl = Controller(ctl_api, dataclasses.replace(FAST, integrations=FRAMEWORKS))
        await ctl.start()
        while not ctl.ready:
            await asyncio.sleep(0.1)
        held = tracemalloc.get_traced_memory()[0] - before
        tracemalloc.stop()
        print(f"{n} pods; the controller's informers that list pods:")
        for name, inf in ctl.informers.items():
            kind = next((k for k in (*K.WATCHED, *ctl.crd_kinds) if k.name == name), None)
            if kind is not None and kind.path() == K.PODS.path():
                objs = inf.list()
                print(f"  {name:24} {len(objs):6} objects, {sum(len(orjson.dumps(o)) for o in objs) / 1e6:6.2f} MB of JSON")
        print(f"  traced memory the controller holds once ready: {held / 1e6:.1f} MB")
        await ctl.stop()
        await ctl_api.close()
        await kube.close()


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pods", type=int, default=3000)
    asyncio.run(main(ap.parse_args().pods))
