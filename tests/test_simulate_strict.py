"""`gpuqueue simulate` reads strictly, as kubectl's strict field validation does: a misspelt field in
any document kind it reads is refused (exit 2, one line naming the document, the field path and
the nearest known name), instead of being dropped and answering another question."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from gpuqueue.cli import main
from gpuqueue.extender.simulate.fields import ACCEPTED_UNREAD, document_shape, Obj, ListOf, MapOf
from gpuqueue.extender.simulate.scenario import KINDS, load_scenario

ROOT = Path(__file__).resolve().parent.parent

FLAVOR = "apiVersion: kueue.x-k8s.io/v1beta2\nkind: ResourceFlavor\nmetadata: {name: default}\n"
CQ = """apiVersion: kueue.x-k8s.io/v1beta2
kind: ClusterQueue
metadata: {name: cq}
spec:
  namespaceSelector: {}
  resourceGroups:
  - coveredResources: [nvidia.com/gpu]
    flavors:
    - name: default
      resources: [{name: nvidia.com/gpu, nominalQuota: 4}]
"""
LQ = "apiVersion: kueue.x-k8s.io/v1beta2\nkind: LocalQueue\nmetadata: {namespace: ns, name: lq}\nspec: {clusterQueue: cq}\n"
JOB = """apiVersion: batch/v1
kind: Job
metadata: {namespace: ns, name: j, labels: {kueue.x-k8s.io/queue-name: lq}}
spec:
  template:
    spec:
      restartPolicy: Never
      containers: [{name: c, image: x, resources: {limits: {nvidia.com/gpu: 1}}}]
"""
BASE = [FLAVOR, CQ, LQ, JOB]
EVENT_JOB = ("{apiVersion: batch/v1, kind: Job, metadata: {namespace: ns, name: e}, spec: {template: {spec: "
             "{restartPolicy: Never, containers: [{name: c, image: x}]}}}}")


def scenario_with(extra: str, replace: tuple[str, str] | None = None) -> str:
    docs = [d.replace(*replace) if replace and replace[0] in d else d for d in BASE]
    return "---\n".join(docs + ([extra] if extra else []))


PREFIX = "gpuqueue simulate: bad.yaml: "

# (case, scenario text, the exact line on stderr). Each case misspells one field of one kind.
CASES = [
    ("ResourceFlavor",
     "---\n".join([FLAVOR.replace("metadata: {name: default}", "metadata: {name: default}\nspec: {nodeLabel: {a: b}}")] + BASE[1:]),
     "document 1 (ResourceFlavor default): spec.nodeLabel: unknown field (did you mean nodeLabels?)"),
    ("Topology",
     "---\n".join(["apiVersion: kueue.x-k8s.io/v1beta2\nkind: Topology\nmetadata: {name: t}\n"
                   "spec: {levels: [{nodeLabels: kubernetes.io/hostname}]}\n"] + BASE),
     "document 1 (Topology t): spec.levels[0].nodeLabels: unknown field (did you mean nodeLabel?)"),
    ("ClusterQueue", scenario_with("", ("  resourceGroups:", "  resourceGroup:")),
     "document 2 (ClusterQueue cq): spec.resourceGroup: unknown field (did you mean resourceGroups?)"),
    ("ClusterQueue-nested", scenario_with("", ("nominalQuota: 4", "nominalQuote: 4")),
     "document 2 (ClusterQueue cq): spec.resourceGroups[0].flavors[0].resources[0].nominalQuote: unknown field "
     "(did you mean nominalQuota?)"),
    ("LocalQueue", scenario_with("", ("{clusterQueue: cq}", "{clusterQueu: cq}")),
     "document 3 (LocalQueue ns/lq): spec.clusterQueu: unknown field (did you mean clusterQueue?)"),
    ("Job", scenario_with("", ("resources: {limits:", "resources: {limit:")),
     "document 4 (Job ns/j): spec.template.spec.containers[0].resources.limit: unknown field (did you mean limits?)"),
    ("Job-metadata", scenario_with("", ("labels: {kueue", "label: {kueue")),
     "document 4 (Job ns/j): metadata.label: unknown field (did you mean labels?)"),
    ("Cohort", scenario_with("apiVersion: kueue.x-k8s.io/v1beta2\nkind: Cohort\nmetadata: {name: co}\nspec: {parentNam: x}\n"),
     "document 5 (Cohort co): spec.parentNam: unknown field (did you mean parentName?)"),
    ("WorkloadPriorityClass",
     scenario_with("apiVersion: kueue.x-k8s.io/v1beta2\nkind: WorkloadPriorityClass\nmetadata: {name: hi}\nvalu: 10\n"),
     "document 5 (WorkloadPriorityClass hi): valu: unknown field (did you mean value?)"),
    ("Configuration",
     scenario_with("apiVersion: config.kueue.x-k8s.io/v1beta2\nkind: Configuration\nmanageJobsWithoutQueueNames: true\n"),
     "document 5 (Configuration): manageJobsWithoutQueueNames: unknown field (did you mean manageJobsWithoutQueueName?)"),
    ("Configuration-enforcement",
     scenario_with("apiVersion: config.kueue.x-k8s.io/v1beta2\nkind: Configuration\nenforcement: {mod: Audit}\n"),
     "document 5 (Configuration): enforcement.mod: unknown field (did you mean mode?)"),
    ("Namespace", scenario_with("apiVersion: v1\nkind: Namespace\nmetadata: {name: ns, lables: {a: b}}\n"),
     "document 5 (Namespace ns): metadata.lables: unknown field (did you mean labels?)"),
    ("Node", scenario_with("apiVersion: v1\nkind: Node\nmetadata: {name: n1}\nstatus: {allocatabel: {nvidia.com/gpu: 4}}\n"),
     "document 5 (Node n1): status.allocatabel: unknown field (did you mean allocatable?)"),
    ("PriorityClass", scenario_with("apiVersion: scheduling.k8s.io/v1\nkind: PriorityClass\nmetadata: {name: pc}\nvalue: 5\n"
                                    "globalDefualt: false\n"),
     "document 5 (PriorityClass pc): globalDefualt: unknown field (did you mean globalDefault?)"),
    ("Scenario", scenario_with("apiVersion: gpuqueue.io/v1alpha1\nkind: Scenario\nevent:\n- {at: 1, finish: ns/j}\n"),
     "document 5 (Scenario): event: unknown field (did you mean events?)"),
    ("Scenario-event", scenario_with("apiVersion: gpuqueue.io/v1alpha1\nkind: Scenario\nevents:\n- {at: 1, evry: 2, count: 2, "
                                     "finish: ns/j}\n"),
     "document 5 (Scenario): events[0].evry: unknown field (did you mean every?)"),
    ("Scenario-delete", scenario_with("apiVersion: gpuqueue.io/v1alpha1\nkind: Scenario\nevents:\n- {at: 1, delete: "
                                      "{kind: Job, namespace: ns, nmae: j}}\n"),
     "document 5 (Scenario): events[0].delete.nmae: unknown field (did you mean name?)"),
    ("Scenario-submit", scenario_with("apiVersion: gpuqueue.io/v1alpha1\nkind: Scenario\nevents:\n- at: 1\n  submit: "
                                      + EVENT_JOB.replace("restartPolicy", "restartPolicie") + "\n"),
     "document 5 (Scenario): events[0].submit.spec.template.spec.restartPolicie: unknown field (did you mean restartPolicy?)"),
    ("Scenario-apply", scenario_with("apiVersion: gpuqueue.io/v1alpha1\nkind: Scenario\nevents:\n- at: 1\n  apply: "
                                     "{apiVersion: kueue.x-k8s.io/v1beta2, kind: LocalQueue, metadata: {namespace: ns, "
                                     "name: lq}, spec: {clusterQueue: cq, stopPolicie: Hold}}\n"),
     "document 5 (Scenario): events[0].apply.spec.stopPolicie: unknown field (did you mean stopPolicy?)"),
    ("far-from-anything", scenario_with("", ("{clusterQueue: cq}", "{clusterQueue: cq, zzz: 1}")),
     "document 3 (LocalQueue ns/lq): spec.zzz: unknown field (known: clusterQueue, fairSharing, stopPolicy)"),
]


@pytest.fixture
def run(tmp_path, capsys, monkeypatch):
    """`gpuqueue simulate bad.yaml --output json` on `text`: (exit code, stdout, stderr)."""
    monkeypatch.chdir(tmp_path)

    def go(text: str) -> tuple[int, str, str]:
        (tmp_path / "bad.yaml").write_text(text)
        code = main(["simulate", "bad.yaml", "--output", "json"])
        out = capsys.readouterr()
        return code, out.out, out.err

    return go


@pytest.mark.parametrize("case, text, line", CASES, ids=[c[0] for c in CASES])
def test_a_misspelt_field_is_refused_with_the_nearest_name(run, case, text, line):
    code, out, err = run(text)
    assert code == 2
    assert out == ""
    assert err.splitlines() == [PREFIX + line]


def test_every_kind_the_simulator_reads_has_a_misspelling_case():
    covered = {c[0].split("-")[0] for c in CASES}
    assert set(KINDS) | {"Scenario"} <= covered


def test_the_same_scenario_without_the_misspelling_runs(run):
    code, out, err = run(scenario_with(""))
    assert (code, err) == (0, "")
    assert '"admitted":["ns/j"]' in out


def test_what_kubectl_accepts_is_accepted(run):
    # fields gpuqueue does not read but Kubernetes (or the CRDs gpuqueue installs) define
    text = scenario_with(
        "apiVersion: v1\nkind: Node\nmetadata: {name: n1, finalizers: [x]}\nspec: {providerID: p}\n"
        "status: {allocatable: {nvidia.com/gpu: 4}, capacity: {nvidia.com/gpu: 4}}\n",
        ("restartPolicy: Never", "restartPolicy: Never\n      volumes: [{name: v, persistentVolumeClaim: {claimName: c}}]"),
    ).replace("spec:\n  template:", "spec:\n  backoffLimit: 2\n  ttlSecondsAfterFinished: 60\n  template:")
    text = text.replace("{name: c, image: x, ", "{name: c, image: x, command: [sh], volumeMounts: [{name: v, mountPath: /m}], ")
    code, out, err = run(text)
    assert (code, err) == (0, "")


def test_an_older_api_versions_names_only_in_that_version(run):
    v1beta1 = CQ.replace("v1beta2", "v1beta1").replace("  namespaceSelector: {}", "  cohort: pool\n  namespaceSelector: {}")
    code, _, err = run("---\n".join([FLAVOR, v1beta1, LQ, JOB]))
    assert (code, err) == (0, "")
    v1beta2 = CQ.replace("  namespaceSelector: {}", "  cohort: pool\n  namespaceSelector: {}")
    code, _, err = run("---\n".join([FLAVOR, v1beta2, LQ, JOB]))
    assert code == 2
    assert err.splitlines() == [PREFIX + "document 2 (ClusterQueue cq): spec.cohort: unknown field (did you mean cohortName?)"]


# -- the names for Kueue's kinds are those of the CRDs gpuqueue installs ---------------------------

def _crd_paths(schema: dict, prefix: str = "") -> set[str]:
    if schema.get("type") == "array":
        return _crd_paths(schema["items"], prefix)
    out = set()
    for name, sub in (schema.get("properties") or {}).items():
        path = f"{prefix}.{name}" if prefix else name
        out.add(path)
        out |= _crd_paths(sub, path)
    return out


def _shape_paths(shape, prefix: str = "") -> set[str]:
    while isinstance(shape, (ListOf, MapOf)):
        shape = shape.item if isinstance(shape, ListOf) else shape.value
    if not isinstance(shape, Obj):
        return set()
    out = set()
    for name, sub in shape.fields.items():
        path = f"{prefix}.{name}" if prefix else name
        out.add(path)
        out |= _shape_paths(sub, path)
    return out


CRDS = {doc["spec"]["names"]["kind"]: doc for doc in
        (yaml.safe_load(p.read_text()) for p in sorted((ROOT / "charts" / "gpuqueue" / "files" / "crds").glob("*.yaml")))}
KUEUE_KINDS = sorted(k for k, (versions, _) in KINDS.items() if versions[0].startswith("kueue.x-k8s.io/"))


def test_every_kueue_kind_the_simulator_reads_is_an_installed_crd():
    assert set(KUEUE_KINDS) <= set(CRDS)
    assert len(KUEUE_KINDS) == 6


@pytest.mark.parametrize("kind", KUEUE_KINDS)
def test_kueue_kinds_accept_exactly_the_fields_of_the_installed_crds(kind):
    doc = CRDS[kind]
    versions, model = KINDS[kind]
    schema = doc["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    from_crd = {p for p in _crd_paths(schema) if p != "metadata" and not p.startswith("status")}
    from_simulator = {p for p in _shape_paths(document_shape(kind, model, versions[0], versions[0]))
                      if p not in ("metadata", "status")}
    assert from_simulator == from_crd
    assert set(ACCEPTED_UNREAD) <= set(KINDS)


def test_every_shipped_scenario_is_read_strictly():
    for path in sorted((ROOT / "tests" / "scenarios").glob("*.yaml")) + sorted(
            p for p in (ROOT / "extender" / "simulate" / "examples").glob("*.yaml") if ".expect." not in p.name):
        load_scenario(path.read_text(), path.name)
