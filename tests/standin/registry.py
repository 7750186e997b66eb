"""Kubernetes write and read semantics over the Store: create/update/patch/delete with preconditions,
status subresource rules, generation, dry run, finalizers, graceful pod deletion, garbage collection
by ownerReferences, and an observer called on every committed write."""
from __future__ import annotations

import asyncio
import base64
import contextvars
import datetime
import json
import logging
import random
import uuid
from dataclasses import dataclass
from typing import Callable

from . import managedfields
from . import crds
from . import patches
from . import resources as R
from . import status as S
from . import rules
from .resources import ResourceType
from .selectors import parse_field_selector, parse_label_selector
from .store import Key, Store, StoredEvent, json_copy

log = logging.getLogger(__name__)

_NAME_CHARS = "bcdfghjklmnpqrstvwxz2456789"  # apimachinery's utilrand alphabet for generateName


# Who sent the request being served (its User-Agent): kube-apiserver knows the user of every write
# (audit log, managedFields); tests tell a tenant's writes from the controller's by it.
CURRENT_USER: contextvars.ContextVar[str | None] = contextvars.ContextVar("standin_user", default=None)
_CLIENT_VERBS = ("create", "update", "patch", "delete")


@dataclass(frozen=True)
class Write:
    """What an observer sees for every committed write."""
    verb: str  # create / update / patch / delete / gc / kubelet / job-controller
    type: str  # ADDED / MODIFIED / DELETED
    resource: ResourceType
    namespace: str
    name: str
    subresource: str | None
    old: dict | None  # rendered as the resource's own API version
    new: dict  # for DELETED: the last state
    rv: int
    user: str | None = None  # the client's User-Agent for a client's write; None for the stand-in's own controllers


def default_propagation(rt: ResourceType) -> str:
    # batch/v1 Jobs keep the pre-GC default: their pods are orphaned unless the caller asks otherwise.
    return "Orphan" if rt is R.JOBS else "Background"


class Cluster:
    def __init__(self, *, history_size: int = 1000, pod_deletion_delay: float | None = 0.0,
                 kubernetes_minor: int = 24, managed_fields: bool = False):
        self.store = Store(history_size)
        self.kubernetes_minor = kubernetes_minor  # the Job update rules of 1.<minor> (rules.job_update_errors)
        self.managed_fields = managed_fields  # keep metadata.managedFields (managedfields.py)
        # What is served: the built-in kinds, and those of every CustomResourceDefinition created.
        self.by_path: dict[tuple[str, str, str], ResourceType] = dict(R.BY_PATH)
        self.by_storage: dict[str, list[ResourceType]] = {k: list(v) for k, v in R.BY_STORAGE.items()}
        self.pod_deletion_delay = pod_deletion_delay
        self.observers: list[Callable[[Write], None]] = []
        self.observer_errors: list[BaseException] = []
        self._gc_scheduled = False
        self._tasks: set[asyncio.Task] = set()

    # --- helpers -----------------------------------------------------------------------------------

    def render(self, rt: ResourceType, stored: dict) -> dict:
        obj = rules.event_from_storage(rt, stored) if rt.storage_key == "events" else dict(stored)
        obj["kind"], obj["apiVersion"] = rt.kind, rt.api_version
        return rules.canonical(rt, obj)

    def _key(self, rt: ResourceType, namespace: str | None, name: str) -> Key:
        return (namespace or "" if rt.namespaced else "", name)

    def _require_namespace(self, rt: ResourceType, namespace: str | None) -> None:
        if rt.namespaced and self.store.get(R.NAMESPACES.storage_key, ("", namespace or "")) is None:
            raise S.namespace_not_found(namespace or "")

    def _lookup(self, rt: ResourceType, namespace: str | None, name: str) -> dict:
        stored = self.store.get(rt.storage_key, self._key(rt, namespace, name))
        if stored is None:
            raise S.not_found(rt, name)
        return stored

    def _commit(self, rt: ResourceType, type_: str, new: dict, old: dict | None, verb: str,
                subresource: str | None = None) -> StoredEvent:
        if self.managed_fields and type_ != "DELETED":
            new["metadata"]["managedFields"] = managedfields.record(old, new, verb, subresource, rt.api_version,
                                                                     rules.fmt_time(rules.now()))
        rv = self.store.next_rv()
        new["metadata"]["resourceVersion"] = str(rv)
        key = self._key(rt, new["metadata"].get("namespace"), new["metadata"]["name"])
        event = self.store.commit(rt.storage_key, type_, key, new, old, rv)
        if self.observers:
            write = Write(verb, type_, rt, key[0], key[1], subresource,
                          self.render(rt, old) if old is not None else None, self.render(rt, new), rv,
                          CURRENT_USER.get() if verb in _CLIENT_VERBS else None)
            for fn in list(self.observers):
                try:
                    fn(write)
                except Exception as exc:  # noqa: BLE001 - an observer is test code; keep serving, report later
                    log.exception("observer failed on %s %s/%s", verb, key[0], key[1])
                    self.observer_errors.append(exc)
        if type_ == "DELETED" or any(o is not None and (o["metadata"].get("ownerReferences")
                                                        or o["metadata"].get("deletionTimestamp")) for o in (new, old)):
            self._schedule_gc()
        return event

    # --- reads -------------------------------------------------------------------------------------

    def get(self, rt: ResourceType, namespace: str | None, name: str) -> dict:
        return self.render(rt, self._lookup(rt, namespace, name))

    def matcher(self, rt: ResourceType, namespace: str | None, label_selector: str | None,
                field_selector: str | None) -> Callable[[dict], bool]:
        labels_ok = parse_label_selector(label_selector)
        fields_ok = parse_field_selector(field_selector, rt.storage_key, rt.kind, rt.api_version)
        ns = namespace if rt.namespaced else None

        def match(stored: dict) -> bool:
            meta = stored["metadata"]
            if ns and meta.get("namespace") != ns:
                return False
            return labels_ok(meta.get("labels") or {}) and fields_ok(stored)
        return match

    def list(self, rt: ResourceType, namespace: str | None, *, label_selector: str | None = None,
             field_selector: str | None = None, limit: int | None = None, continue_token: str | None = None,
             resource_version: str | None = None, resource_version_match: str | None = None) -> dict:
        match = self.matcher(rt, namespace, label_selector, field_selector)
        sk = rt.storage_key
        start_after = ""
        at_rv: int | None = None
        if continue_token:
            try:
                token = json.loads(base64.urlsafe_b64decode(continue_token + "=" * (-len(continue_token) % 4)))
                at_rv, start_after = int(token["rv"]), token["start"]
            except (ValueError, KeyError, TypeError):
                raise S.bad_request("continue key is not valid: incorrect encoded start resourceVersion "
                                    "(version meta.k8s.io/v1)")
            if at_rv >= 0 and self.store.too_old(sk, at_rv) is not None:
                fresh = self._continue_token(-1, start_after)
                raise S.expired("The provided continue parameter is too old to display a consistent list result. "
                                "You can start a new list without the continue parameter, or use the continue "
                                "token in this response to retrieve the remainder of the results. Continuing with "
                                "the provided token results in an inconsistent list - objects that were created, "
                                "modified, or deleted between the time the first chunk was returned and now may "
                                "show up in the list.", metadata={"continue": fresh})
        elif resource_version and resource_version_match == "Exact":
            at_rv = int(resource_version)
            if self.store.too_old(sk, at_rv) is not None:
                raise S.expired("The resourceVersion for the provided list is too old.")
        if at_rv is not None and at_rv >= 0:
            objects, list_rv = self.store.snapshot(sk, at_rv), at_rv
        else:
            objects, list_rv = self.store.kind(sk), self.store.rv
        keys = sorted(k for k in objects if self._etcd_key(k) > start_after)
        items, next_start, remaining = [], None, 0
        for i, k in enumerate(keys):
            if not match(objects[k]):
                continue
            if limit and len(items) == limit:
                next_start = self._etcd_key(keys[i - 1])
                remaining = sum(1 for kk in keys[i:] if match(objects[kk]))
                break
            items.append(objects[k])
        meta: dict = {"resourceVersion": str(list_rv)}
        if next_start is not None:
            meta["continue"] = self._continue_token(list_rv, next_start + "\u0000")
            if not label_selector and not field_selector:
                meta["remainingItemCount"] = remaining
        rendered = [self.render(rt, o) for o in items]
        if rt.custom:
            meta.setdefault("continue", "")
            return {"apiVersion": rt.api_version, "items": rendered, "kind": f"{rt.kind}List", "metadata": meta}
        for item in rendered:  # built-in list items carry no kind/apiVersion (fact 19)
            item.pop("kind", None)
            item.pop("apiVersion", None)
        return {"kind": f"{rt.kind}List", "apiVersion": rt.api_version, "metadata": meta, "items": rendered}

    @staticmethod
    def _etcd_key(key: Key) -> str:
        return f"{key[0]}/{key[1]}" if key[0] else key[1]

    @staticmethod
    def _continue_token(rv: int, start: str) -> str:
        raw = json.dumps({"v": "meta.k8s.io/v1", "rv": rv, "start": start}, separators=(",", ":"))
        return base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")

    # --- create ------------------------------------------------------------------------------------

    def create(self, rt: ResourceType, namespace: str | None, body, *, dry_run: bool = False,
               verb: str = "create", owned: bool = False) -> dict:
        """`owned`: the body is the caller's to give away (decoded from a request), no copy needed."""
        if not isinstance(body, dict) or not isinstance(body.get("metadata", {}), dict):
            raise S.bad_request(f"the body of the request could not be decoded as a {rt.kind}")
        obj = rules.event_to_storage(rt, body if owned else json_copy(body))
        obj.pop("kind", None)
        obj.pop("apiVersion", None)
        meta = obj.setdefault("metadata", {})
        if rt.namespaced:
            if meta.get("namespace") and meta["namespace"] != namespace:
                raise S.bad_request("the namespace of the provided object does not match the namespace sent on "
                                    "the request")
            meta["namespace"] = namespace
        else:
            meta.pop("namespace", None)
        if not meta.get("name"):
            if meta.get("generateName"):
                meta["name"] = meta["generateName"] + "".join(random.choices(_NAME_CHARS, k=5))
            else:
                raise S.invalid(rt, "", [S.FieldError.required("metadata.name", "name or generateName is required")])
        errs = rules.name_errors(rt, meta["name"])
        if errs:
            raise S.invalid(rt, meta["name"], errs)
        self._require_namespace(rt, namespace)
        if meta.get("resourceVersion"):
            raise S.internal_error("resourceVersion should not be set on objects to be created")
        if self.store.get(rt.storage_key, self._key(rt, namespace, meta["name"])) is not None:
            raise S.already_exists(rt, meta["name"])
        for k in ("uid", "deletionTimestamp", "deletionGracePeriodSeconds", "generation", "managedFields",
                  "selfLink"):
            meta.pop(k, None)
        meta["uid"] = str(uuid.uuid4())
        meta["creationTimestamp"] = rules.fmt_time(rules.now())
        if rt.has_generation:
            meta["generation"] = 1
        if rt.status_subresource and rt is not R.NODES:
            obj.pop("status", None)
        if not rt.custom:
            rules.normalize_times(obj, rt.kind)
        rules.apply_defaults(rt, obj)
        errs = rules.prepare_create(rt, obj)
        if rt is R.PODS:
            errs += self._prepare_pod(obj)
        if errs:
            raise S.invalid(rt, meta["name"], errs)
        if dry_run:
            return self.render(rt, obj)
        self._commit(rt, "ADDED", obj, None, verb)
        if rt is R.CUSTOM_RESOURCE_DEFINITIONS:
            self._serve(obj)
        return self.render(rt, obj)

    # --- CustomResourceDefinitions -------------------------------------------------------------------

    def _serve(self, crd: dict) -> None:
        for crt in crds.resource_types(crd):
            self.by_path[(crt.group, crt.version, crt.plural)] = crt
            self.by_storage.setdefault(crt.storage_key, []).append(crt)

    def _unserve(self, crd: dict) -> None:
        spec = crd.get("spec") or {}
        storage = f"{(spec.get('names') or {}).get('plural')}.{spec.get('group')}"
        for crt in self.by_storage.pop(storage, []):
            self.by_path.pop((crt.group, crt.version, crt.plural), None)
        self.store.objects.pop(storage, None)

    def _prepare_pod(self, pod: dict) -> list:
        spec = pod.setdefault("spec", {})
        rules.default_pod_spec(spec, pod=True)
        value, policy = None, None
        pc_name = spec.get("priorityClassName")
        if pc_name:
            pc = self.store.get(R.PRIORITY_CLASSES.storage_key, ("", pc_name))
            if pc is None:
                raise S.ApiError(403, S.status_body(403, "Forbidden", f'pods "{pod["metadata"]["name"]}" is '
                                 f'forbidden: no PriorityClass with name {pc_name} was found', {
                                     "name": pod["metadata"]["name"], "kind": "pods"}))
            value, policy = pc.get("value"), pc.get("preemptionPolicy")
        return rules.prepare_pod_create(pod, value, policy)

    # --- pods/binding ----------------------------------------------------------------------------------

    def bind(self, namespace: str, name: str, node: str, *, uid: str | None = None, verb: str = "scheduler") -> dict:
        """POST pods/NAME/binding as kube-scheduler sends it: sets spec.nodeName once and the
        PodScheduled condition; a second binding, or one to a pod being deleted, is a 409."""
        old = self._lookup(R.PODS, namespace, name)
        meta = old["metadata"]
        if uid is not None and meta.get("uid") != uid:
            raise S.conflict(R.PODS, name, f"Precondition failed: UID in precondition: {uid}, UID in object meta: "
                                           f"{meta.get('uid')}")
        if meta.get("deletionTimestamp"):
            raise S.conflict(R.PODS, name, "pod is being deleted, cannot be assigned to a host")
        if (old.get("spec") or {}).get("nodeName"):
            raise S.conflict(R.PODS, name, f"pod {name} is already assigned to node \"{old['spec']['nodeName']}\"")
        new = json_copy(old)
        new["spec"]["nodeName"] = node
        status = new.setdefault("status", {})
        status["conditions"] = [c for c in status.get("conditions") or () if c.get("type") != "PodScheduled"] + [
            {"type": "PodScheduled", "status": "True", "lastProbeTime": None,
             "lastTransitionTime": rules.fmt_time(rules.now())}]
        self._commit(R.PODS, "MODIFIED", new, old, verb)
        return self.render(R.PODS, new)

    # --- update / patch ------------------------------------------------------------------------------

    def update(self, rt: ResourceType, namespace: str | None, name: str, body, *, subresource: str | None = None,
               dry_run: bool = False, verb: str = "update", owned: bool = False) -> dict:
        """`owned`: as for create. Stored objects are never mutated, so the new one shares with
        the old what a status write leaves as it was."""
        if subresource not in (None, "status") or (subresource == "status" and not rt.status_subresource):
            raise S.page_not_found()
        old = self._lookup(rt, namespace, name)
        if not isinstance(body, dict) or not isinstance(body.get("metadata", {}), dict):
            raise S.bad_request(f"the body of the request could not be decoded as a {rt.kind}")
        new = rules.event_to_storage(rt, body if owned else json_copy(body))
        new.pop("kind", None)
        new.pop("apiVersion", None)
        meta = new.setdefault("metadata", {})
        if meta.get("name", name) != name:
            raise S.bad_request(f"the name of the object ({meta['name']}) does not match the name on the request "
                                f"({name})")
        if rt.namespaced and meta.get("namespace", namespace) != namespace:
            raise S.bad_request("the namespace of the provided object does not match the namespace sent on the "
                                "request")
        rv = meta.get("resourceVersion")
        if rv and rv != old["metadata"]["resourceVersion"]:
            raise S.conflict(rt, name)
        if subresource == "status":
            status = new.get("status")
            new = dict(old)
            new["metadata"] = meta = dict(old["metadata"])
            if status is None:
                new.pop("status", None)
            else:
                new["status"] = status
        else:
            for k in ("uid", "creationTimestamp", "deletionTimestamp", "deletionGracePeriodSeconds", "namespace",
                      "generation"):
                if k in old["metadata"]:
                    meta[k] = old["metadata"][k]
                else:
                    meta.pop(k, None)
            meta["name"] = name
            # a body's managedFields are not taken; the stored ones stay (and _commit updates them)
            if "managedFields" in old["metadata"]:
                meta["managedFields"] = old["metadata"]["managedFields"]
            else:
                meta.pop("managedFields", None)
            if rt.status_subresource:
                if "status" in old:
                    new["status"] = json_copy(old["status"])
                else:
                    new.pop("status", None)
            if not rt.custom:
                rules.normalize_times(new, rt.kind)
            rules.apply_defaults(rt, new)
            errs = rules.update_errors(rt, new, old, self.kubernetes_minor)
            if errs:
                raise S.invalid(rt, name, errs)
        if not rt.custom and subresource == "status" and "status" in new:
            rules.normalize_times(new["status"], rt.kind)  # the rest is the stored object's, canonical
        meta["resourceVersion"] = old["metadata"]["resourceVersion"]
        if rt.has_generation and _spec_part(new) != _spec_part(old):
            meta["generation"] = old["metadata"].get("generation", 0) + 1
        if subresource == "status" and rt.schema is not None:
            rules.apply_defaults(rt, new)
            errs = rules.update_errors(rt, new, old)
            if errs:
                raise S.invalid(rt, name, errs)
        if new == old or dry_run:
            return self.render(rt, new)  # a no-op write is not persisted: no new resourceVersion, no event
        if meta.get("deletionTimestamp") and not meta.get("finalizers"):
            self._commit(rt, "DELETED", new, old, verb, subresource)
        else:
            self._commit(rt, "MODIFIED", new, old, verb, subresource)
        return self.render(rt, new)

    def patch(self, rt: ResourceType, namespace: str | None, name: str, content_type: str, patch_body, *,
              subresource: str | None = None, dry_run: bool = False, verb: str = "patch") -> dict:
        current = json_copy(self.render(rt, self._lookup(rt, namespace, name)))
        if content_type == patches.MERGE_PATCH:
            patched = patches.merge_patch(current, patch_body)
        elif content_type == patches.STRATEGIC_MERGE_PATCH and not rt.custom:
            patched = patches.strategic_merge_patch(current, patch_body)
        elif content_type == patches.JSON_PATCH:
            patched = patches.json_patch(current, patch_body)
        else:
            raise S.unsupported_media_type(content_type)
        if not isinstance(patched, dict):
            raise S.bad_request("the patch did not produce an object")
        # The stored resourceVersion only counts as a precondition if the patch itself set one.
        if (patched.get("metadata") or {}).get("resourceVersion") == current["metadata"]["resourceVersion"]:
            patched["metadata"].pop("resourceVersion", None)
        return self.update(rt, namespace, name, patched, subresource=subresource, dry_run=dry_run, verb=verb,
                           owned=True)

    # --- delete --------------------------------------------------------------------------------------

    def delete(self, rt: ResourceType, namespace: str | None, name: str, *, propagation: str | None = None,
               grace_period: int | None = None, preconditions: dict | None = None, dry_run: bool = False,
               verb: str = "delete") -> dict:
        old = self._lookup(rt, namespace, name)
        meta = old["metadata"]
        pre = preconditions or {}
        if pre.get("uid") and pre["uid"] != meta.get("uid"):
            raise S.conflict(rt, name, f"Precondition failed: UID in precondition: {pre['uid']}, UID in object "
                                       f"meta: {meta.get('uid')}")
        if pre.get("resourceVersion") and pre["resourceVersion"] != meta["resourceVersion"]:
            raise S.conflict(rt, name, f"Precondition failed: ResourceVersion in precondition: "
                                       f"{pre['resourceVersion']}, ResourceVersion in object meta: "
                                       f"{meta['resourceVersion']}")
        if dry_run:
            return self.render(rt, old)
        if propagation not in (None, "Orphan", "Background", "Foreground"):
            raise S.invalid(rt, name, [S.FieldError.unsupported("propagationPolicy", propagation,
                                                                  ["Foreground", "Background", "Orphan"])])
        propagation = propagation or default_propagation(rt)
        new = json_copy(old)
        nmeta = new["metadata"]
        finalizers = list(nmeta.get("finalizers") or [])
        if propagation == "Foreground" and "foregroundDeletion" not in finalizers and self._dependents(meta["uid"]):
            finalizers.append("foregroundDeletion")
        if propagation == "Orphan" and "orphan" not in finalizers and self._dependents(meta["uid"]):
            finalizers.append("orphan")
        if rt is R.PODS:
            grace = grace_period if grace_period is not None else (old.get("spec") or {}).get(
                "terminationGracePeriodSeconds", 30)
            if grace and not finalizers:
                if not nmeta.get("deletionTimestamp"):
                    at = rules.now() + datetime.timedelta(seconds=grace)
                    nmeta["deletionTimestamp"] = rules.fmt_time(at)
                    nmeta["deletionGracePeriodSeconds"] = grace
                    self._commit(rt, "MODIFIED", new, old, verb)
                    self._kubelet_removal(rt, namespace, name, nmeta["uid"])
                return self.render(rt, self._lookup(rt, namespace, name))
        if finalizers:
            if not nmeta.get("deletionTimestamp"):
                nmeta["deletionTimestamp"] = rules.fmt_time(rules.now())
                nmeta["deletionGracePeriodSeconds"] = 0
            nmeta["finalizers"] = finalizers
            if new != old:
                self._commit(rt, "MODIFIED", new, old, verb)
            return self.render(rt, new)
        self._commit(rt, "DELETED", new, old, verb)
        if rt is R.CUSTOM_RESOURCE_DEFINITIONS:
            self._unserve(new)
        return self.render(rt, new)

    def _kubelet_removal(self, rt: ResourceType, namespace: str | None, name: str, uid: str) -> None:
        if self.pod_deletion_delay is None:
            return  # no kubelet: the pod stays Terminating until force-deleted (fixture 24)

        async def remove() -> None:
            await asyncio.sleep(self.pod_deletion_delay)
            stored = self.store.get(rt.storage_key, self._key(rt, namespace, name))
            if stored is not None and stored["metadata"].get("uid") == uid:
                self.delete(rt, namespace, name, grace_period=0, verb="kubelet")
        self.spawn(remove())

    def spawn(self, coro) -> None:
        try:
            task = asyncio.get_running_loop().create_task(coro)
        except RuntimeError:
            coro.close()
            return
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # --- garbage collection ----------------------------------------------------------------------------

    def _dependents(self, uid: str) -> list[tuple[ResourceType, dict]]:
        found = []
        for sk, objects in self.store.objects.items():
            rt = self.by_storage[sk][0]
            for obj in objects.values():
                if any(ref.get("uid") == uid for ref in obj["metadata"].get("ownerReferences") or ()):
                    found.append((rt, obj))
        return found

    def _schedule_gc(self) -> None:
        if self._gc_scheduled:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return
        self._gc_scheduled = True
        loop.call_soon(self.collect_garbage)

    def collect_garbage(self) -> None:
        """One pass of the garbage collector: delete dependents whose owners are all gone or being
        foreground-deleted, drop owner references of orphaning owners, finish owners whose wait is over."""
        self._gc_scheduled = False
        uids = self.store.by_uid
        for sk, objects in list(self.store.objects.items()):
            rt = self.by_storage[sk][0]
            for obj in list(objects.values()):
                meta = obj["metadata"]
                refs = meta.get("ownerReferences") or []
                if refs:
                    self._collect_dependent(rt, obj, refs, uids)
                finalizers = meta.get("finalizers") or []
                if meta.get("deletionTimestamp") and set(finalizers) & {"orphan", "foregroundDeletion"}:
                    self._finish_owner(rt, obj)

    def _owner_state(self, ref: dict, uids) -> str:
        loc = uids.get(ref.get("uid"))
        if loc is None:
            return "absent"
        owner = self.store.get(*loc)
        fin = (owner or {}).get("metadata", {}).get("finalizers") or []
        if "orphan" in fin:
            return "orphaning"
        if "foregroundDeletion" in fin:
            return "foreground"
        return "present"

    def _collect_dependent(self, rt: ResourceType, obj: dict, refs: list, uids) -> None:
        meta = obj["metadata"]
        states = [self._owner_state(ref, uids) for ref in refs]
        if "orphaning" in states:
            keep = [ref for ref, st in zip(refs, states) if st != "orphaning"]
            new = json_copy(obj)
            if keep:
                new["metadata"]["ownerReferences"] = keep
            else:
                new["metadata"].pop("ownerReferences", None)
            self._commit(rt, "MODIFIED", new, obj, "gc")
            return
        if all(st in ("absent", "foreground") for st in states) and not meta.get("deletionTimestamp"):
            policy = "Foreground" if "foreground" in states else "Background"
            self.delete(rt, meta.get("namespace"), meta["name"], propagation=policy, verb="gc")

    def _finish_owner(self, rt: ResourceType, obj: dict) -> None:
        meta = obj["metadata"]
        if self._dependents(meta["uid"]):
            return
        new = json_copy(obj)
        left = [f for f in meta.get("finalizers") or [] if f not in ("orphan", "foregroundDeletion")]
        if left:
            new["metadata"]["finalizers"] = left
            self._commit(rt, "MODIFIED", new, obj, "gc")
        else:
            new["metadata"].pop("finalizers", None)
            self._commit(rt, "DELETED", new, obj, "gc")


def _spec_part(obj: dict) -> dict:
    return {k: v for k, v in obj.items() if k not in ("metadata", "status", "kind", "apiVersion")}
