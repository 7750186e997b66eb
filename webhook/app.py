"""The admission webhook HTTPS server (``gpuqueue.http11`` behind ``gpuqueue.listener``): routes,
body limits, answers.

Every handler answers HTTP 200 with an AdmissionReview echoing the request's uid,
whatever the body; only a body over the size limit gets HTTP 413 (it is not read,
so there is no uid to echo). The decisions themselves are the pure functions of
``gpuqueue.jobframework.mutation``, ``job_validation``, ``kueue_validation``,
``pod_admission`` and ``workload_validation``. Every integration's kind is served at Kueue's
paths (controller-runtime's ``/mutate-<group with dashes>-<version>-<kind>``, ``/validate-...``;
``kind_path``), by the same decisions through its integration; a kind whose integration is not
enabled (``integrations.frameworks``) is let through untouched, as Kueue's webhooks for disabled
integrations do; the one I/O a decision makes is reading the
pod of a binding that no scheduler makes (``PodLookup``).
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from gpuqueue.jobframework.enforcement import EnforcementConfig
from gpuqueue.jobframework.integration import GATE, Integration
from gpuqueue.jobframework.kinds.pods import PodTemplateOwner
from gpuqueue.jobframework.managed import ManagedJobsConfig, QueueView, StaticQueueView
from gpuqueue.jobframework.mutation import mutate_job
from gpuqueue.jobframework.registry import INTEGRATIONS, IntegrationsConfig
from gpuqueue.jobframework.unqueued import enforced_requests, why_unqueued
from gpuqueue.http11 import JSON, TEXT, Answer, Connection, Route, Server
from gpuqueue.listener import ConnectionLimits, GuardedListener
from gpuqueue.webhook import pod_admission, review
from gpuqueue.webhook.cluster import NoPods, PodLookup
from gpuqueue.webhook.fielderrors import aggregate
from gpuqueue.webhook.job_validation import DEFAULT_CONTROLLER_USERNAMES, validate_job
from gpuqueue.webhook.kind_validation import parent_update_errors
from gpuqueue.webhook.kueue_validation import KINDS, CohortView, NoCohorts, validate_kueue_object
from gpuqueue.webhook.pod_admission import DEFAULT_SCHEDULER_USERNAMES, PodContext, PodQueueing, PodVerdict
from gpuqueue.webhook.workload_validation import validate_workload

log = logging.getLogger("gpuqueue.webhook")

DEFAULT_MAX_BODY = 8 * 1024 * 1024  # the API server caps objects near 3 MiB; a review holds two
KUEUE_GROUP = "kueue.x-k8s.io"
VALIDATE_KUEUE_PATH = "/validate-kueue"
# Kueue's paths for its pod and Workload webhooks (controller-runtime's /mutate-<group>-<version>-<kind>,
# the core group being empty); the binding one follows the same pattern.
MUTATE_POD_PATH = "/mutate--v1-pod"
VALIDATE_POD_PATH = "/validate--v1-pod"
VALIDATE_BINDING_PATH = "/validate--v1-binding"
VALIDATE_WORKLOAD_PATH = "/validate-kueue-x-k8s-io-v1beta2-workload"
# gpuqueue's own: warnings only, for every queued kind (failurePolicy Ignore in the configuration)
WARN_UNQUEUED_PATH = "/warn-unqueued"


def kind_path(verb: str, integration: Integration) -> str:
    """Kueue's webhook path for a kind: controller-runtime's /<verb>-<group>-<version>-<kind>."""
    return f"/{verb}-{integration.group.replace('.', '-')}-{integration.version}-{integration.kind.lower()}"


# The kinds served at their own paths (pods are served at the pod paths above, with enforcement).
# Deployments, StatefulSets and LeaderWorkerSets have their pod templates marked on CREATE and their
# updates checked as Kueue does (kind_validation.parent_update_errors); what holds them is their
# pods' gate, validated with the pods.
QUEUED_KINDS = tuple(i for i in INTEGRATIONS if i.hold != GATE or isinstance(i, PodTemplateOwner))
VALIDATED_KINDS = tuple(i for i in INTEGRATIONS if i.hold != GATE)
PARENT_KINDS = tuple(i for i in INTEGRATIONS if isinstance(i, PodTemplateOwner))
MUTATE_JOB_PATH = kind_path("mutate", INTEGRATIONS[0])
VALIDATE_JOB_PATH = kind_path("validate", INTEGRATIONS[0])


@dataclass
class WebhookSettings:
    config: ManagedJobsConfig = field(default_factory=ManagedJobsConfig)
    enforcement: EnforcementConfig = field(default_factory=EnforcementConfig)
    controller_usernames: tuple[str, ...] = DEFAULT_CONTROLLER_USERNAMES
    scheduler_usernames: tuple[str, ...] = DEFAULT_SCHEDULER_USERNAMES
    max_body: int = DEFAULT_MAX_BODY
    integrations: IntegrationsConfig = field(default_factory=IntegrationsConfig)
    # Whether the API server keeps scheduling gates (1.27+): the pod integration needs them.
    scheduling_gates: bool = True
    server_version: str = ""  # as /version reports it, for messages


def _is_kind(req: review.AdmissionRequest, integration: Integration) -> bool:
    return req.kind.group == integration.group and req.kind.kind == integration.kind


def _is_core(req: review.AdmissionRequest, kind: str) -> bool:
    return req.kind.group == "" and req.kind.kind == kind


def _verdict(uid: str, verdict: PodVerdict) -> bytes:
    if verdict.denial is not None:
        return review.deny(uid, verdict.denial, warnings=list(verdict.warnings))
    return review.allow(uid, list(verdict.patch), list(verdict.warnings))


def _not_here(req: review.AdmissionRequest, expected: str) -> bytes:
    return review.bad_request(req.uid, f"kind {req.kind.kind!r} of group {req.kind.group!r} is not served here; "
                                       f"expected {expected}")


class AdmissionHandlers:
    """``covered``: the resources ClusterQueues cover (None: unknown, every extended resource
    counts); ``pods``: reads the pod of a binding."""

    def __init__(self, settings: WebhookSettings, queues: QueueView, cohorts: CohortView,
                 ready: Callable[[], bool] = lambda: True,
                 covered: Callable[[], frozenset[str] | None] = lambda: None,
                 pods: PodLookup = NoPods()) -> None:
        self.settings = settings
        self.queues = queues
        self.cohorts = cohorts
        self.ready = ready
        self.covered = covered
        self.pods = pods

    # -- the decisions, on a parsed request ------------------------------------
    @property
    def frameworks(self) -> tuple[str, ...]:
        return self.settings.integrations.frameworks

    def serves(self, integration: Integration) -> bool:
        """Whether ``integration`` is on: enabled, and for the kinds held by their pods' gate, the
        pod integration too (which needs scheduling gates: Kubernetes 1.27)."""
        if not self.settings.integrations.enabled(integration):
            return False
        return integration.hold != GATE or self.settings.scheduling_gates

    def mutate(self, req: review.AdmissionRequest, integration: Integration = INTEGRATIONS[0]) -> bytes:
        if req.operation != "CREATE" or not _is_kind(req, integration) or not self.serves(integration):
            return review.allow(req.uid)
        try:
            result = mutate_job(req.object, self.queues, self.settings.config, namespace=req.namespace or None,
                                integration=integration, frameworks=self.frameworks)
        except ValueError as exc:
            return review.bad_request(req.uid, f"cannot queue this {integration.kind}: {exc}")
        return review.allow(req.uid, result.patch)

    def validate_job(self, req: review.AdmissionRequest, integration: Integration = INTEGRATIONS[0]) -> bytes:
        if req.operation not in ("CREATE", "UPDATE") or not _is_kind(req, integration) or not self.serves(integration):
            return review.allow(req.uid)
        namespace = req.namespace
        if not namespace:
            return review.bad_request(req.uid, f"request.namespace: Required value: a {integration.kind} is namespaced")
        denial = validate_job(req.operation, req.object, req.oldObject, req.userInfo.username, namespace,
                              self.queues, self.settings.config, self.settings.controller_usernames,
                              integration, self.frameworks)
        return review.allow(req.uid) if denial is None else review.deny(req.uid, denial)

    def validate_parent(self, req: review.AdmissionRequest, integration: Integration) -> bytes:
        if req.operation != "UPDATE" or not _is_kind(req, integration) or not self.serves(integration):
            return review.allow(req.uid)
        if not isinstance(req.object, dict) or not isinstance(req.oldObject, dict):
            return review.bad_request(req.uid, f"object, oldObject: Required value: an UPDATE review carries the "
                                               f"{integration.kind} before and after")
        errors = parent_update_errors(integration.kind, req.object, req.oldObject)
        return review.allow(req.uid) if not errors else review.deny(req.uid, aggregate(errors))

    def warn_unqueued(self, req: review.AdmissionRequest) -> bytes:
        """Warnings, never a refusal: a workload of a queued kind that requests what Strict
        enforcement checks, which nothing will admit (gpuqueue.jobframework.unqueued)."""
        integration = next((i for i in QUEUED_KINDS if _is_kind(req, i)), None)
        if req.operation != "CREATE" or integration is None or not req.namespace or not isinstance(req.object, dict):
            return review.allow(req.uid)
        frameworks = tuple(f for f in self.frameworks if f != integration.framework or self.serves(integration))
        found = why_unqueued(req.object, integration.kind, integration.framework, req.namespace,
                             lambda: enforced_requests(integration, req.object, req.namespace,
                                                       self.settings.enforcement, self.covered()),
                             self.queues, self.settings.config, frameworks)
        return review.allow(req.uid, warnings=[found.message] if found else None)

    def _pod_context(self, req: review.AdmissionRequest) -> PodContext:
        s = self.settings
        queueing = PodQueueing(self.queues, s.config, self.frameworks, s.controller_usernames, s.scheduling_gates,
                               s.server_version)
        return PodContext(req.namespace, req.userInfo.username, s.enforcement, self.covered(), queueing)

    def _pod_review(self, req: review.AdmissionRequest, decide) -> bytes:
        if req.operation != "CREATE":
            return review.allow(req.uid)
        if not _is_core(req, "Pod"):
            return _not_here(req, "Pod of the core group")
        if not req.namespace:
            return review.bad_request(req.uid, "request.namespace: Required value: a Pod is namespaced")
        try:
            return _verdict(req.uid, decide(req.object, self._pod_context(req)))
        except ValueError as exc:
            return review.bad_request(req.uid, f"cannot check this pod: {exc}")

    def mutate_pod(self, req: review.AdmissionRequest) -> bytes:
        return self._pod_review(req, pod_admission.mutate_pod)

    def validate_pod(self, req: review.AdmissionRequest) -> bytes:
        if req.operation == "UPDATE":
            return self.validate_pod_update(req)
        return self._pod_review(req, pod_admission.validate_pod)

    def validate_pod_update(self, req: review.AdmissionRequest) -> bytes:
        """The pod integration's checks of an update (enforcement checks only creations)."""
        if not _is_core(req, "Pod"):
            return _not_here(req, "Pod of the core group")
        if not req.namespace or not isinstance(req.object, dict) or not isinstance(req.oldObject, dict):
            return review.bad_request(req.uid, "request.namespace, object, oldObject: Required value: a pod update "
                                               "names its namespace and carries the pod before and after")
        ctx = self._pod_context(req)
        try:
            for side in (req.object, req.oldObject):
                pod_admission.pod_facts(side, ctx)  # shaped like a pod, or ValueError naming the field
        except ValueError as exc:
            return review.bad_request(req.uid, f"cannot check this pod: {exc}")
        denial = pod_admission.pod_queueing_denial(req.object, req.oldObject, ctx, "UPDATE")
        return review.allow(req.uid) if denial is None else review.deny(req.uid, denial)

    async def validate_binding(self, req: review.AdmissionRequest) -> bytes:
        if req.operation != "CREATE":
            return review.allow(req.uid)
        if not _is_core(req, "Binding"):
            return _not_here(req, "Binding of the core group (pods/binding, bindings)")
        meta = req.object.get("metadata") if isinstance(req.object, dict) else None
        name = req.name or (meta.get("name") if isinstance(meta, dict) else None)
        if not req.namespace or not isinstance(name, str) or not name:
            return review.bad_request(req.uid, "request.name, request.namespace: Required value: the pod to bind")
        ctx = self._pod_context(req)
        usernames = self.settings.scheduler_usernames
        if pod_admission.binding_is_unchecked(ctx, usernames):
            return review.allow(req.uid)
        try:
            pod = await self.pods.get_pod(req.namespace, name)
        except LookupError as exc:
            return _verdict(req.uid, pod_admission.unreadable_pod_binding(ctx, name, str(exc)))
        try:
            return _verdict(req.uid, pod_admission.validate_binding(pod, ctx, usernames))
        except ValueError as exc:
            return _verdict(req.uid, pod_admission.unreadable_pod_binding(ctx, name, str(exc)))

    def validate_workload(self, req: review.AdmissionRequest) -> bytes:
        if req.kind.group != KUEUE_GROUP or req.kind.kind != "Workload":
            return _not_here(req, f"Workload of {KUEUE_GROUP}")
        denial = validate_workload(req.operation, req.object, req.oldObject, req.userInfo.username,
                                   self.settings.controller_usernames)
        return review.allow(req.uid) if denial is None else review.deny(req.uid, denial)

    def validate_kueue(self, req: review.AdmissionRequest) -> bytes:
        if req.operation not in ("CREATE", "UPDATE"):
            return review.allow(req.uid)
        if req.kind.group != KUEUE_GROUP or req.kind.kind not in KINDS:
            return review.bad_request(req.uid, f"kind {req.kind.kind!r} of group {req.kind.group!r} is not validated "
                                      f"here; expected one of {', '.join(KINDS)} of {KUEUE_GROUP}")
        errors = validate_kueue_object(req.kind.kind, req.object, req.oldObject, self.cohorts)
        if not errors:
            return review.allow(req.uid)
        return review.deny(req.uid, f'{req.kind.kind}.{KUEUE_GROUP} "{req.name}" is invalid: {aggregate(errors)}')

    # -- HTTP ---------------------------------------------------------------------
    def _endpoint(self, decide: Callable[[review.AdmissionRequest], bytes | Awaitable[bytes]]) -> Route:
        def crashed(uid: str) -> Answer:  # a bug must not become a 5xx (the API server would fail the request anyway)
            log.exception("unexpected error answering review %s", uid)
            return Answer(200, JSON, review.deny(uid, "internal error in the gpuqueue webhook; see its log", 500,
                                                 "InternalError"))

        async def later(uid: str, pending: Awaitable[bytes]) -> Answer:
            try:
                return Answer(200, JSON, await pending)
            except Exception:
                return crashed(uid)

        def handle(body: bytes, conn: Connection) -> Answer | Awaitable[Answer]:
            parsed = review.parse_review(body)
            if isinstance(parsed, review.ReviewError):
                return Answer(200, JSON, review.bad_request(parsed.uid, parsed.message))
            try:
                answer = decide(parsed)
                return later(parsed.uid, answer) if inspect.isawaitable(answer) else Answer(200, JSON, answer)
            except Exception:
                return crashed(parsed.uid)

        return Route(b"POST", handle)

    def _readiness(self, body: bytes, conn: Connection) -> Answer:
        if self.ready():
            return Answer(200, TEXT, b"ok\n")
        return Answer(503, TEXT, b"queue view not synced yet\n")

    def routes(self) -> dict[bytes, Route]:
        """Every path served, Kueue's for each kind, and the probes."""
        routes: dict[str, Route] = {}
        for integration in QUEUED_KINDS:
            routes[kind_path("mutate", integration)] = self._endpoint(lambda req, i=integration: self.mutate(req, i))
        for integration in VALIDATED_KINDS:
            routes[kind_path("validate", integration)] = self._endpoint(
                lambda req, i=integration: self.validate_job(req, i))
        for integration in PARENT_KINDS:
            routes[kind_path("validate", integration)] = self._endpoint(
                lambda req, i=integration: self.validate_parent(req, i))
        routes[VALIDATE_KUEUE_PATH] = self._endpoint(self.validate_kueue)
        routes[MUTATE_POD_PATH] = self._endpoint(self.mutate_pod)
        routes[VALIDATE_POD_PATH] = self._endpoint(self.validate_pod)
        routes[VALIDATE_BINDING_PATH] = self._endpoint(self.validate_binding)
        routes[VALIDATE_WORKLOAD_PATH] = self._endpoint(self.validate_workload)
        routes[WARN_UNQUEUED_PATH] = self._endpoint(self.warn_unqueued)
        routes["/healthz"] = Route(b"GET", lambda body, conn: Answer(200, TEXT, b"ok\n"))
        routes["/readyz"] = Route(b"GET", self._readiness)
        return {path.encode(): route for path, route in routes.items()}

    def server(self) -> Server:
        limit = self.settings.max_body
        too_big = Answer(413, JSON, review.deny("", f"request body over the {limit} byte limit: refused without "
                                                    f"reading it", 413, "RequestEntityTooLarge"))
        return Server(self.routes(), limit, name="gpuqueue webhook", too_large=lambda size: too_big)


@dataclass
class RunningServer:
    server: Server
    listener: GuardedListener

    @property
    def port(self) -> int:
        return self.listener.port

    def drain(self) -> None:
        """Answer each request from now on with `Connection: close`: every kept-alive connection
        carries one more call at most, and the client's next one opens a connection the Service
        routes to a replica that stays. Closing them instead could race a call being sent, which
        kube-apiserver does not send again (a POST)."""
        self.server.draining = True

    async def close(self) -> None:
        await self.listener.close()
        await self.server.cleanup()


async def start_server(server: Server, host: str, port: int, ssl_context,
                       limits: ConnectionLimits = ConnectionLimits()) -> RunningServer:
    """Start serving over TLS within ``limits``; port 0 picks a free port (see ``.port``). The
    listener closes idle connections (aborting them), so the server's own idle timer is not started."""
    listener = GuardedListener(server.connection, ssl_context, limits)
    await listener.listen(host, port)
    return RunningServer(server, listener)


def handlers_without_cluster(settings: WebhookSettings | None = None) -> AdmissionHandlers:
    return AdmissionHandlers(settings or WebhookSettings(), StaticQueueView(), NoCohorts())
