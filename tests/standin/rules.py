"""Per-kind behaviour of kube-apiserver 1.24's registry: defaulting, validation, time formats, key order
and the events.k8s.io <-> core/v1 Event conversion. Kueue kinds are CRDs with a preserve-unknown-fields
schema, so beyond metadata nothing is defaulted or validated for them; kinds of an installed CRD with a
schema (crds.py) are pruned, defaulted and validated against it."""
from __future__ import annotations

import datetime as dt
import re

from . import crds
from . import resources as R
from .resources import ResourceType
from .status import ApiError, FieldError, bad_request, go_value, invalid

# --- names -----------------------------------------------------------------------------------------

_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_SUBDOMAIN_MSG = ("a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', "
                  "and must start and end with an alphanumeric character (e.g. 'example.com', regex used for "
                  "validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')")
_LABEL_MSG = ("a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must "
              "start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for "
              "validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')")


def name_errors(rt: ResourceType, name: str) -> list[FieldError]:
    if rt is R.NAMESPACES:
        if len(name) > 63 or not _LABEL.match(name):
            return [FieldError.invalid("metadata.name", go_value(name), _LABEL_MSG)]
        return []
    if len(name) > 253:
        return [FieldError.invalid("metadata.name", go_value(name), "must be no more than 253 characters")]
    if not _SUBDOMAIN.match(name):
        return [FieldError.invalid("metadata.name", go_value(name), _SUBDOMAIN_MSG)]
    return []


# --- times -----------------------------------------------------------------------------------------

def now() -> dt.datetime:
    return dt.datetime.now(dt.timezone.utc)


def fmt_time(t: dt.datetime) -> str:
    """metav1.Time: RFC 3339, seconds, UTC."""
    return t.astimezone(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def fmt_micro_time(t: dt.datetime) -> str:
    return t.astimezone(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


_MICRO_LAYOUT = "2006-01-02T15:04:05.000000Z07:00"
_ZONE = re.compile(r"^(Z|[+-]\d\d:\d\d)$")
TIME_KEYS = {"creationTimestamp", "deletionTimestamp", "startTime", "completionTime", "lastTransitionTime",
             "lastProbeTime", "firstTimestamp", "lastTimestamp", "startedAt", "finishedAt",
             "lastHeartbeatTime", "lastUpdateTime", "deprecatedFirstTimestamp", "deprecatedLastTimestamp"}
MICRO_TIME_KEYS = {"acquireTime", "renewTime", "eventTime", "lastObservedTime"}


def parse_micro_time(value: str, kind: str) -> str:
    """Go's time.Parse with the MicroTime layout: exactly 6 fractional digits and a zone (fact 28)."""
    def fail(rest: str, elem: str) -> ApiError:
        return bad_request(f'{kind} in version "v1" cannot be handled as a {kind}: parsing time "{value}" as '
                           f'"{_MICRO_LAYOUT}": cannot parse "{rest}" as "{elem}"')
    m = re.match(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(.*)$", value)
    if not m:
        raise fail(value, "2006")
    base, rest = m.groups()
    frac = re.match(r"^\.(\d+)(.*)$", rest)
    if not frac or len(frac.group(1)) < 6:
        raise fail(rest, ".000000")
    digits, zone = frac.group(1), frac.group(2)
    if len(digits) > 6:
        zone = digits[6:] + zone
    if not _ZONE.match(zone):
        raise fail(zone, "Z07:00")
    parsed = dt.datetime.fromisoformat(base + "." + digits[:6] + ("+00:00" if zone == "Z" else zone))
    return fmt_micro_time(parsed)


def parse_time(value: str, kind: str) -> str:
    try:
        parsed = dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        parsed = None
    if parsed is None or parsed.tzinfo is None:
        raise bad_request(f'{kind} in version "v1" cannot be handled as a {kind}: parsing time "{value}" as '
                          f'"2006-01-02T15:04:05Z07:00": cannot parse "{value}" as "2006-01-02T15:04:05Z07:00"')
    return fmt_time(parsed)


def normalize_times(obj, kind: str):
    """Built-in kinds store times in canonical form: metav1.Time at seconds in UTC, MicroTime strict."""
    if isinstance(obj, dict):
        for key, value in obj.items():
            if isinstance(value, str) and key in MICRO_TIME_KEYS:
                obj[key] = parse_micro_time(value, kind)
            elif isinstance(value, str) and key in TIME_KEYS:
                obj[key] = parse_time(value, kind)
            elif isinstance(value, (dict, list)):
                normalize_times(value, kind)
    elif isinstance(obj, list):
        for item in obj:
            normalize_times(item, kind)


# --- key order -------------------------------------------------------------------------------------

META_ORDER = ("name", "generateName", "namespace", "selfLink", "uid", "resourceVersion", "generation",
              "creationTimestamp", "deletionTimestamp", "deletionGracePeriodSeconds", "labels", "annotations",
              "ownerReferences", "finalizers", "managedFields")
JOB_SPEC_ORDER = ("parallelism", "completions", "activeDeadlineSeconds", "podFailurePolicy", "backoffLimit",
                  "selector", "manualSelector", "template", "ttlSecondsAfterFinished", "completionMode", "suspend")
POD_SPEC_ORDER = ("volumes", "initContainers", "containers", "ephemeralContainers", "restartPolicy",
                  "terminationGracePeriodSeconds", "activeDeadlineSeconds", "dnsPolicy", "nodeSelector",
                  "serviceAccountName", "serviceAccount", "automountServiceAccountToken", "nodeName", "hostNetwork",
                  "hostPID", "hostIPC", "shareProcessNamespace", "securityContext", "imagePullSecrets", "hostname",
                  "subdomain", "affinity", "schedulerName", "tolerations", "hostAliases", "priorityClassName",
                  "priority", "dnsConfig", "readinessGates", "runtimeClassName", "enableServiceLinks",
                  "preemptionPolicy", "overhead", "topologySpreadConstraints")
CONTAINER_ORDER = ("name", "image", "command", "args", "workingDir", "ports", "envFrom", "env", "resources",
                   "volumeMounts", "volumeDevices", "livenessProbe", "readinessProbe", "startupProbe", "lifecycle",
                   "terminationMessagePath", "terminationMessagePolicy", "imagePullPolicy", "securityContext")
CORE_EVENT_ORDER = ("kind", "apiVersion", "metadata", "involvedObject", "reason", "message", "source",
                    "firstTimestamp", "lastTimestamp", "count", "type", "eventTime", "series", "action", "related",
                    "reportingComponent", "reportingInstance")
EVENTS_V1_ORDER = ("kind", "apiVersion", "metadata", "eventTime", "series", "reportingController",
                   "reportingInstance", "action", "reason", "regarding", "related", "note", "type",
                   "deprecatedSource", "deprecatedFirstTimestamp", "deprecatedLastTimestamp", "deprecatedCount")


def ordered(d: dict, order: tuple[str, ...]) -> dict:
    out = {k: d[k] for k in order if k in d}
    out.update((k, v) for k, v in d.items() if k not in out)
    return out


def canonical(rt: ResourceType, obj: dict) -> dict:
    """Built-in objects in Go struct order (kind, apiVersion, metadata, spec, status ...)."""
    if rt.custom:
        return obj
    obj = ordered(obj, CORE_EVENT_ORDER if rt is R.EVENTS else EVENTS_V1_ORDER if rt is R.EVENTS_V1
                  else ("kind", "apiVersion", "metadata", "spec", "status"))
    if isinstance(obj.get("metadata"), dict):
        obj["metadata"] = ordered(obj["metadata"], META_ORDER)
    spec = obj.get("spec")
    if rt is R.JOBS and isinstance(spec, dict):
        obj["spec"] = spec = ordered(spec, JOB_SPEC_ORDER)
        if isinstance(spec.get("template"), dict):
            spec["template"] = ordered(spec["template"], ("metadata", "spec"))
            if isinstance(spec["template"].get("spec"), dict):
                spec["template"]["spec"] = _ordered_pod_spec(spec["template"]["spec"])
    elif rt is R.PODS and isinstance(spec, dict):
        obj["spec"] = _ordered_pod_spec(spec)
    return obj


def _ordered_pod_spec(spec: dict) -> dict:
    spec = ordered(spec, POD_SPEC_ORDER)
    for field in ("initContainers", "containers"):
        if isinstance(spec.get(field), list):
            spec[field] = [ordered(c, CONTAINER_ORDER) if isinstance(c, dict) else c for c in spec[field]]
    return spec


# --- events: one storage, two API groups (fact 29) ---------------------------------------------------

_V1_TO_CORE = {"note": "message", "regarding": "involvedObject", "reportingController": "reportingComponent",
               "deprecatedSource": "source", "deprecatedFirstTimestamp": "firstTimestamp",
               "deprecatedLastTimestamp": "lastTimestamp", "deprecatedCount": "count"}
_CORE_TO_V1 = {v: k for k, v in _V1_TO_CORE.items()}


def event_to_storage(rt: ResourceType, obj: dict) -> dict:
    """Events are stored as core/v1 Events; events.k8s.io/v1 bodies are converted on the way in."""
    if rt is not R.EVENTS_V1:
        return obj
    core = {_V1_TO_CORE.get(k, k): v for k, v in obj.items()}
    core["apiVersion"] = "v1"
    return core


def event_from_storage(rt: ResourceType, stored: dict) -> dict:
    if rt is R.EVENTS:
        out = dict(stored)
        for key, empty in (("involvedObject", {}), ("source", {}), ("firstTimestamp", None),
                           ("lastTimestamp", None), ("eventTime", None), ("reportingComponent", ""),
                           ("reportingInstance", "")):
            out.setdefault(key, empty)
        return out
    out = {_CORE_TO_V1.get(k, k): v for k, v in stored.items()}
    out["apiVersion"] = rt.api_version
    out.setdefault("eventTime", None)
    for key in ("reportingController", "reportingInstance"):
        if out.get(key) == "":
            del out[key]
    if not out.get("deprecatedCount"):
        out.pop("deprecatedCount", None)
    out.setdefault("regarding", {})
    for key, empty in (("deprecatedSource", {}), ("deprecatedFirstTimestamp", None),
                       ("deprecatedLastTimestamp", None)):
        out.setdefault(key, empty)
    return out


# --- defaulting and validation on create ------------------------------------------------------------

def _default_container(c: dict, pod: bool) -> None:
    c.setdefault("terminationMessagePath", "/dev/termination-log")
    c.setdefault("terminationMessagePolicy", "File")
    image = c.get("image", "")
    tag = image.rsplit("/", 1)[-1]
    c.setdefault("imagePullPolicy", "Always" if (":" not in tag or tag.endswith(":latest")) and "@" not in tag
                 else "IfNotPresent")
    if pod:  # requests default to limits on Pods (not on pod templates: fixture job.create-response.201)
        res = c.get("resources") or {}
        limits = res.get("limits") or {}
        if limits:
            requests = dict(res.get("requests") or {})
            for k, v in limits.items():
                requests.setdefault(k, v)
            res["requests"] = requests
            c["resources"] = res


def default_pod_spec(spec: dict, pod: bool) -> None:
    spec.setdefault("restartPolicy", "Always")
    spec.setdefault("terminationGracePeriodSeconds", 30)
    spec.setdefault("dnsPolicy", "ClusterFirst")
    spec.setdefault("securityContext", {})
    spec.setdefault("schedulerName", "default-scheduler")
    for c in spec.get("containers") or []:
        if isinstance(c, dict):
            _default_container(c, pod)
    for c in spec.get("initContainers") or []:
        if isinstance(c, dict):
            _default_container(c, pod)
    if pod:
        spec.setdefault("serviceAccountName", "default")
        spec.setdefault("serviceAccount", spec["serviceAccountName"])
        # DefaultTolerationSeconds admission plugin
        tolerations = list(spec.get("tolerations") or [])
        for key in ("node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable"):
            if not any(t.get("key") == key and t.get("effect") in ("NoExecute", None, "") for t in tolerations):
                tolerations.append({"key": key, "operator": "Exists", "effect": "NoExecute",
                                    "tolerationSeconds": 300})
        spec["tolerations"] = tolerations
        spec.setdefault("enableServiceLinks", True)


def _qos_class(spec: dict) -> str:
    requests_any, guaranteed = False, True
    for c in spec.get("containers") or []:
        res = c.get("resources") or {}
        req, lim = res.get("requests") or {}, res.get("limits") or {}
        if req or lim:
            requests_any = True
        for r in ("cpu", "memory"):
            if r not in lim or str(req.get(r, lim.get(r))) != str(lim[r]):
                guaranteed = False
    if not requests_any:
        return "BestEffort"
    return "Guaranteed" if guaranteed else "Burstable"


def pod_template_errors(template: dict, prefix: str) -> list[FieldError]:
    spec = template.get("spec") if isinstance(template, dict) else None
    if not isinstance(spec, dict) or not spec.get("containers"):
        return [FieldError.required(f"{prefix}.spec.containers")]
    errs = []
    for i, c in enumerate(spec["containers"]):
        if not isinstance(c, dict) or not c.get("name"):
            errs.append(FieldError.required(f"{prefix}.spec.containers[{i}].name"))
    return errs


def default_job(job: dict) -> None:
    """SetDefaults_Job: applied when any Job body is decoded (create, update, patch result)."""
    spec = job.setdefault("spec", {})
    if spec.get("completions") is None and spec.get("parallelism") is None:
        spec["completions"] = 1
        spec["parallelism"] = 1
    spec.setdefault("parallelism", 1)
    spec.setdefault("backoffLimit", 6)
    spec.setdefault("completionMode", "NonIndexed")
    spec.setdefault("suspend", False)
    template = spec.setdefault("template", {})
    template.setdefault("metadata", {}).setdefault("creationTimestamp", None)
    if isinstance(template.setdefault("spec", {}), dict):
        default_pod_spec(template["spec"], pod=False)
    job.setdefault("status", {})


def prepare_job_create(job: dict) -> list[FieldError]:
    """The Job strategy's PrepareForCreate (generated selector and labels) and create validation."""
    meta, spec = job["metadata"], job["spec"]
    template = spec["template"]
    if not spec.get("manualSelector"):
        spec["selector"] = {"matchLabels": {"controller-uid": meta["uid"]}}
        labels = dict(template["metadata"].get("labels") or {})
        labels.update({"controller-uid": meta["uid"], "job-name": meta["name"]})
        template["metadata"]["labels"] = labels
    errs = pod_template_errors(template, "spec.template")
    if not errs and template["spec"].get("restartPolicy") not in ("OnFailure", "Never"):
        errs.append(FieldError.unsupported("spec.template.spec.restartPolicy", template["spec"].get("restartPolicy"),
                                           ["OnFailure", "Never"]))
    return errs


def apply_defaults(rt: ResourceType, obj: dict) -> None:
    if rt.schema is not None:
        crds.prune_and_default(rt.schema, obj)
    elif rt is R.JOBS:
        default_job(obj)
    elif rt is R.PODS and isinstance(obj.get("spec"), dict):
        default_pod_spec(obj["spec"], pod=True)
    elif rt is R.PRIORITY_CLASSES:
        obj.setdefault("preemptionPolicy", "PreemptLowerPriority")


def prepare_pod_create(pod: dict, priority: int | None, preemption_policy: str | None) -> list[FieldError]:
    spec = pod["spec"]
    errs = pod_template_errors(pod, "")
    errs = [FieldError(e.reason, e.field.lstrip("."), e.detail) for e in errs]
    spec.setdefault("priority", priority or 0)
    spec.setdefault("preemptionPolicy", preemption_policy or "PreemptLowerPriority")
    pod["status"] = {"phase": "Pending", "qosClass": _qos_class(spec)}
    return errs


def prepare_create(rt: ResourceType, obj: dict) -> list[FieldError]:
    """Defaults and validation beyond metadata for kinds that need them."""
    if rt.schema is not None:
        return crds.validation_errors(rt.schema, obj)
    if rt is R.JOBS:
        return prepare_job_create(obj)
    if rt is R.NAMESPACES:
        meta = obj["metadata"]
        meta["labels"] = {**(meta.get("labels") or {}), "kubernetes.io/metadata.name": meta["name"]}
        obj["spec"] = {"finalizers": ["kubernetes"]}
        obj["status"] = {"phase": "Active"}
    elif rt is R.EVENTS_V1 and not obj.get("eventTime"):
        return [FieldError.required("eventTime")]
    elif rt is R.PRIORITY_CLASSES:
        if "value" not in obj:
            return [FieldError.required("value")]
    elif rt in (R.NODES,):
        obj.setdefault("spec", {})
        obj.setdefault("status", {})
    return []


# --- validation on update ---------------------------------------------------------------------------

_SCHEDULING_DIRECTIVES = ("nodeSelector", "tolerations")


def _template_immutable_text(template: dict) -> str:
    # kube-apiserver dumps the whole Go core.PodTemplateSpec here (fact 25); nobody should parse it, so the
    # stand-in keeps the frame of that message and leaves the dump out.
    return "core.PodTemplateSpec{...}"


def job_update_errors(new: dict, old: dict, minor: int = 24) -> list[FieldError]:
    """ValidateJobSpecUpdate of Kubernetes 1.<minor>. In 1.24: completions, selector, completionMode and
    the pod template are immutable; with the old Job suspended and never started (status.startTime
    unset) the template's nodeSelector, tolerations, nodeAffinity, labels and annotations may change
    (JobMutableNodeSchedulingDirectives). Later releases relax it:

    - 1.27+ (ElasticIndexedJob): an Indexed Job's completions may change together with parallelism,
      as long as the two stay equal;
    - 1.36+ (MutablePodResourcesForSuspendedJobs and MutableSchedulingDirectivesForSuspendedJobs, beta
      and on by default): while the old Job is suspended and has no active pod, its containers' and
      init containers' resources may change, and so may the scheduling fields even if it has started."""
    spec, old_spec = new.get("spec") or {}, old.get("spec") or {}
    errs = []
    elastic = (minor >= 27 and old_spec.get("completionMode") == "Indexed"
               and spec.get("completions") == spec.get("parallelism"))
    for field in ("completions", "selector", "completionMode"):
        if spec.get(field) != old_spec.get(field) and not (field == "completions" and elastic):
            value = spec.get(field)
            text = go_value(value) if not isinstance(value, dict) else "v1.LabelSelector{...}"
            errs.append(FieldError.immutable(f"spec.{field}", text))
    template, old_template = _editable(spec.get("template") or {}), _editable(old_spec.get("template") or {})
    old_status = old.get("status") or {}
    suspended = bool(old_spec.get("suspend"))
    mutable = suspended and (not old_status.get("startTime") or (minor >= 36 and not old_status.get("active")))
    if mutable:
        tspec, otspec = template.setdefault("spec", {}), old_template.setdefault("spec", {})
        for field in _SCHEDULING_DIRECTIVES:
            _copy_field(tspec, otspec, field)
        new_aff, old_aff = tspec.get("affinity"), otspec.get("affinity")
        if new_aff is None and old_aff is not None:
            rest = {k: v for k, v in old_aff.items() if k != "nodeAffinity"}
            otspec.pop("affinity") if not rest else otspec.__setitem__("affinity", rest)
        elif new_aff is not None:
            merged = {k: v for k, v in (old_aff or {}).items() if k != "nodeAffinity"}
            if "nodeAffinity" in new_aff:
                merged["nodeAffinity"] = new_aff["nodeAffinity"]
            otspec["affinity"] = merged
        tmeta, otmeta = template.setdefault("metadata", {}), old_template.setdefault("metadata", {})
        for field in ("labels", "annotations"):
            _copy_field(tmeta, otmeta, field)
        if minor >= 36:
            for field in ("containers", "initContainers"):
                _copy_resources(tspec, otspec, field)
    if template != old_template:
        errs.append(FieldError.immutable("spec.template", _template_immutable_text(template)))
    return errs


def _copy_resources(src: dict, dst: dict, field: str) -> None:
    """The resources of each container in src[field] onto the container of the same index in
    dst[field] (copies of both lists and containers), so that only the resources may differ."""
    new, old = src.get(field), dst.get(field)
    if not isinstance(new, list) or not isinstance(old, list) or len(new) != len(old):
        return
    merged = []
    for n, o in zip(new, old):
        if isinstance(n, dict) and isinstance(o, dict):
            o = dict(o)
            _copy_field(n, o, "resources")
        merged.append(o)
    dst[field] = merged


def _editable(template: dict) -> dict:
    """A copy of a pod template whose spec and metadata fields can be set and dropped (the only
    edits job_update_errors makes) without touching the original."""
    out = dict(template)
    for key in ("spec", "metadata"):
        if isinstance(out.get(key), dict):
            out[key] = dict(out[key])
    return out


def _copy_field(src: dict, dst: dict, field: str) -> None:
    if field in src:
        dst[field] = src[field]
    else:
        dst.pop(field, None)


def update_errors(rt: ResourceType, new: dict, old: dict, minor: int = 24) -> list[FieldError]:
    if rt.schema is not None:
        return crds.validation_errors(rt.schema, new)
    if rt is R.JOBS:
        return job_update_errors(new, old, minor)
    if rt is R.PRIORITY_CLASSES and new.get("value") != old.get("value"):
        return [FieldError("FieldValueForbidden", "value", "Forbidden: may not be changed in an update.")]
    return []
