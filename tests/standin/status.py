"""Kubernetes `Status` bodies, shaped exactly as kube-apiserver 1.24 sends them (see shared/fixtures/k8s-1.24/api)."""
from __future__ import annotations

from .resources import ResourceType


class ApiError(Exception):
    """Raised inside the stand-in; the HTTP layer turns it into a Status response."""

    def __init__(self, code: int, body: dict | None = None, *, text: str | None = None):
        super().__init__(body.get("message") if body else text)
        self.code = code
        self.body = body
        self.text = text  # plain-text body (the "404 page not found" of an unserved path)


def status_body(code: int, reason: str, message: str, details: dict | None = None,
                metadata: dict | None = None) -> dict:
    body = {"kind": "Status", "apiVersion": "v1", "metadata": metadata or {}, "status": "Failure",
            "message": message}
    if reason:
        body["reason"] = reason
    if details is not None:
        body["details"] = details
    body["code"] = code
    return body


def _details(rt: ResourceType, name: str) -> dict:
    d = {"name": name}
    if rt.group:
        d["group"] = rt.group
    d["kind"] = rt.plural
    return d


def not_found(rt: ResourceType, name: str) -> ApiError:
    return ApiError(404, status_body(404, "NotFound", f'{rt.group_resource} "{name}" not found', _details(rt, name)))


def namespace_not_found(namespace: str) -> ApiError:
    return ApiError(404, status_body(404, "NotFound", f'namespaces "{namespace}" not found',
                                     {"name": namespace, "kind": "namespaces"}))


def page_not_found() -> ApiError:
    return ApiError(404, text="404 page not found\n")


def already_exists(rt: ResourceType, name: str) -> ApiError:
    return ApiError(409, status_body(409, "AlreadyExists", f'{rt.group_resource} "{name}" already exists',
                                     _details(rt, name)))


def conflict(rt: ResourceType, name: str, why: str = "the object has been modified; please apply your "
             "changes to the latest version and try again") -> ApiError:
    return ApiError(409, status_body(409, "Conflict", f'Operation cannot be fulfilled on {rt.group_resource} '
                                     f'"{name}": {why}', _details(rt, name)))


def bad_request(message: str) -> ApiError:
    return ApiError(400, status_body(400, "BadRequest", message))


def unsupported_media_type(content_type: str) -> ApiError:
    return ApiError(415, status_body(415, "UnsupportedMediaType",
                                     f'the body of the request was in an unknown format - accepted media types '
                                     f'include: application/json-patch+json, application/merge-patch+json, '
                                     f'application/apply-patch+yaml', None))


def method_not_allowed(message: str = "the server does not allow this method on the requested resource") -> ApiError:
    return ApiError(405, status_body(405, "MethodNotAllowed", message, {}))


def generic_invalid() -> ApiError:
    """What a JSON patch whose `test` op fails gets (fixture clusterqueue.status.json-patch-failed-test-op.422)."""
    return ApiError(422, status_body(422, "Invalid", "the server rejected our request due to an error in our "
                                     "request", {}))


def expired(message: str, metadata: dict | None = None) -> ApiError:
    return ApiError(410, status_body(410, "Expired", message, metadata=metadata))


def internal_error(message: str) -> ApiError:
    return ApiError(500, status_body(500, "InternalError", f"Internal error occurred: {message}",
                                     {"causes": [{"message": message}]}))


# --- 422 Invalid: field errors -------------------------------------------------------------------

def go_value(value) -> str:
    """How a Go field.Error prints the offending value (`%v`-ish, strings quoted)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return f'"{value}"'
    return str(value)


class FieldError:
    def __init__(self, reason: str, field: str, detail: str):
        self.reason, self.field, self.detail = reason, field, detail

    @classmethod
    def required(cls, field: str, detail: str = "") -> "FieldError":
        return cls("FieldValueRequired", field, "Required value" + (f": {detail}" if detail else ""))

    @classmethod
    def invalid(cls, field: str, value_text: str, detail: str) -> "FieldError":
        return cls("FieldValueInvalid", field, f"Invalid value: {value_text}: {detail}")

    @classmethod
    def immutable(cls, field: str, value_text: str) -> "FieldError":
        return cls.invalid(field, value_text, "field is immutable")

    @classmethod
    def unsupported(cls, field: str, value, supported: list[str]) -> "FieldError":
        return cls("FieldValueNotSupported", field, f"Unsupported value: {go_value(value)}: supported values: "
                   + ", ".join(f'"{s}"' for s in supported))


def invalid(rt: ResourceType, name: str, errors: list[FieldError]) -> ApiError:
    """422 `Kind.group "name" is invalid: field: detail` (fixtures job.create-invalid-no-containers etc.)."""
    parts = [f"{e.field}: {e.detail}" for e in errors]
    summary = parts[0] if len(parts) == 1 else "[" + ", ".join(parts) + "]"
    # events.k8s.io Events are validated as the internal core Event, so their errors name no group
    group = "" if rt.storage_key == "events" else rt.group
    kind = f"{rt.kind}.{group}" if group else rt.kind
    details = {"name": name}
    if group:
        details["group"] = group
    details["kind"] = rt.kind
    details["causes"] = [{"reason": e.reason, "message": e.detail, "field": e.field} for e in errors]
    return ApiError(422, status_body(422, "Invalid", f'{kind} "{name}" is invalid: {summary}', details))
