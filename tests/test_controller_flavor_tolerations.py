"""A flavor with tolerations (GH200 nodes tainted for GPU work only): the admitted Job is started
with them in its pod template. The controller used to write the reservation and then fail on
every attempt to start the Job (its flavors' tolerations were not pod-spec dicts)."""

from tests.controller_support import Harness, eventually

GPU = "nvidia.com/gpu"
TOLERATION = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}


async def test_an_admitted_job_starts_with_its_flavors_tolerations():
    async with Harness() as h:
        await h.apply({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor", "metadata": {"name": "gh200"},
                       "spec": {"nodeLabels": {"nvidia.com/gpu.product": "NVIDIA-GH200-480GB"},
                                "nodeTaints": [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}],
                                "tolerations": [TOLERATION]}})
        await h.apply({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue", "metadata": {"name": "cq"},
                       "spec": {"namespaceSelector": {}, "resourceGroups": [{"coveredResources": [GPU], "flavors": [
                           {"name": "gh200", "resources": [{"name": GPU, "nominalQuota": 4}]}]}]}})
        await h.apply({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "LocalQueue",
                       "metadata": {"namespace": "team-a", "name": "q"}, "spec": {"clusterQueue": "cq"}})
        await h.controller()
        await h.submit({"apiVersion": "batch/v1", "kind": "Job",
                        "metadata": {"namespace": "team-a", "name": "train", "labels": {"kueue.x-k8s.io/queue-name": "q"}},
                        "spec": {"template": {"spec": {"restartPolicy": "Never", "containers": [
                            {"name": "c", "image": "x", "resources": {"limits": {GPU: "1"}}}]}}}})
        await eventually(lambda: h.running("team-a", "train"), what="the admitted Job runs")
        spec = h.job("team-a", "train")["spec"]["template"]["spec"]
        assert spec["tolerations"] == [TOLERATION]
        assert spec["nodeSelector"] == {"nvidia.com/gpu.product": "NVIDIA-GH200-480GB"}
