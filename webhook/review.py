"""AdmissionReview admission.k8s.io/v1: parsing requests, building answers.

Parsing never raises on bad input: it returns a ``ReviewError`` carrying the uid when
one could be read, so the answer still echoes it. Answers are compact JSON built
with orjson; a JSONPatch goes base64-encoded with ``patchType: JSONPatch``.
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass
from typing import Any, Literal

import orjson
from pydantic import TypeAdapter, ValidationError
from typing_extensions import NotRequired, TypedDict

API_VERSION = "admission.k8s.io/v1"
KIND = "AdmissionReview"


# The wire shape, checked by pydantic. TypedDicts rather than models: validating into plain
# dicts costs a third of building model instances, and this runs on every review.
class _GroupVersionKind(TypedDict):
    group: NotRequired[str]
    version: str
    kind: str


class _UserInfo(TypedDict, total=False):
    username: str
    uid: str
    groups: list[str]


class _Request(TypedDict):
    uid: str
    kind: _GroupVersionKind
    name: NotRequired[str]
    namespace: NotRequired[str]
    operation: Literal["CREATE", "UPDATE", "DELETE", "CONNECT"]
    userInfo: NotRequired[_UserInfo]
    object: NotRequired[Any]
    oldObject: NotRequired[Any]
    dryRun: NotRequired[bool | None]


class _Review(TypedDict):
    apiVersion: str
    kind: str
    request: _Request


_REVIEW = TypeAdapter(_Review)


@dataclass(frozen=True, slots=True)
class GroupVersionKind:
    group: str
    version: str
    kind: str


@dataclass(frozen=True, slots=True)
class UserInfo:
    username: str = ""


@dataclass(frozen=True, slots=True)
class AdmissionRequest:
    """The parts of an AdmissionReview request the webhook decides on."""
    uid: str
    kind: GroupVersionKind
    operation: str
    name: str = ""
    namespace: str = ""
    userInfo: UserInfo = UserInfo()
    object: Any = None
    oldObject: Any = None
    dryRun: bool | None = None


@dataclass(frozen=True)
class ReviewError:
    uid: str
    message: str


def _uid_of(doc: Any) -> str:
    if isinstance(doc, dict):
        req = doc.get("request")
        if isinstance(req, dict) and isinstance(req.get("uid"), str):
            return req["uid"]
    return ""


def _describe(exc: ValidationError) -> str:
    parts = []
    for err in exc.errors()[:5]:
        loc = ".".join(str(p) for p in err["loc"])
        parts.append(f"{loc}: {err['msg']}")
    return "malformed AdmissionReview: " + "; ".join(parts)


def parse_review(body: bytes) -> AdmissionRequest | ReviewError:
    try:
        doc = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        # orjson refuses integers beyond 64 bits, which are still JSON: retry with the
        # standard parser so the answer can echo the uid and name the real problem.
        try:
            doc = json.loads(body)
        except (ValueError, RecursionError):
            return ReviewError("", f"malformed AdmissionReview: the body is not JSON ({exc})")
    uid = _uid_of(doc)
    if not isinstance(doc, dict):
        return ReviewError(uid, "malformed AdmissionReview: the body must be a JSON object")
    if doc.get("apiVersion") != API_VERSION or doc.get("kind") != KIND:
        return ReviewError(
            uid,
            f"unsupported review {doc.get('apiVersion')!r}/{doc.get('kind')!r}: only "
            f"{API_VERSION} {KIND} is served (set admissionReviewVersions: [v1])",
        )
    try:
        req = _REVIEW.validate_python(doc)["request"]
    except ValidationError as exc:
        return ReviewError(uid, _describe(exc))
    kind = req["kind"]
    return AdmissionRequest(
        uid=req["uid"], kind=GroupVersionKind(kind.get("group", ""), kind["version"], kind["kind"]),
        operation=req["operation"], name=req.get("name", ""), namespace=req.get("namespace", ""),
        userInfo=UserInfo(req.get("userInfo", {}).get("username", "")), object=req.get("object"),
        oldObject=req.get("oldObject"), dryRun=req.get("dryRun"))


def _envelope(response: dict[str, Any]) -> bytes:
    return orjson.dumps({"apiVersion": API_VERSION, "kind": KIND, "response": response})


def allow(uid: str, patch: list[dict[str, Any]] | None = None, warnings: list[str] | None = None) -> bytes:
    response: dict[str, Any] = {"uid": uid, "allowed": True}
    if patch:
        response["patchType"] = "JSONPatch"
        response["patch"] = base64.b64encode(orjson.dumps(patch)).decode()
    if warnings:
        response["warnings"] = warnings
    return _envelope(response)


def deny(uid: str, message: str, code: int = 403, reason: str = "Forbidden", warnings: list[str] | None = None) -> bytes:
    response: dict[str, Any] = {"uid": uid, "allowed": False, "status": {"code": code, "reason": reason, "message": message}}
    if warnings:
        response["warnings"] = warnings
    return _envelope(response)


def bad_request(uid: str, message: str) -> bytes:
    return deny(uid, message, 400, "BadRequest")
