"""The one place that turns Kubernetes API failures into nbtrain errors (pure: takes status and body).

Messages name the verb, the object and the namespace, quote the API server's own message, and say
what to do: the shipped Role for 401/403, the CRD to install or the namespace to create for 404, a
fresh submit for 409, the field the API refused for 422. Quota and admission denials are quoted
verbatim (they explain themselves).
"""

from __future__ import annotations

import json
from importlib import resources
from typing import Any

from nbtrain.errors import BackendError, NbtrainError, SpecError

__all__ = ["RBAC_PATH", "KubeApiError", "KubeSpecError", "api_error", "connection_error", "status_message"]

RBAC_PATH = str(resources.files("nbtrain.backends.kubernetes") / "rbac.yaml")


class KubeApiError(BackendError):
    """The API server answered with an error; ``status`` is its HTTP status (None: no answer)."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


class KubeSpecError(SpecError):
    """The API server refused what the run asked for (invalid object, missing namespace)."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


def status_message(body: str | bytes | None) -> tuple[str, str, dict[str, Any]]:
    """(message, reason, details) of a ``Status`` body; the raw text when it is not one."""
    if body is None:
        return "", "", {}
    text = body.decode("utf-8", "replace") if isinstance(body, bytes) else str(body)
    try:
        data = json.loads(text)
    except ValueError:
        return text.strip()[:2000], "", {}
    if not isinstance(data, dict):
        return text.strip()[:2000], "", {}
    return str(data.get("message") or ""), str(data.get("reason") or ""), dict(data.get("details") or {})


def api_error(
    status: int | None,
    body: str | bytes | None,
    *,
    verb: str,
    resource: str,
    namespace: str,
    name: str | None = None,
    crd: str | None = None,
    install: str | None = None,
    server: str = "",
) -> NbtrainError:
    """The nbtrain error for an API response ``status`` with ``body`` to ``verb resource/name``.

    ``resource`` is the API resource with its group (``jobs.batch``, ``pods/log``); ``crd`` and
    ``install`` name the CustomResourceDefinition and what provides it, for custom resources.
    """
    message, reason, _details = status_message(body)
    text, invalid = _explain(status, message, reason, verb=verb, resource=resource, namespace=namespace, name=name,
                             crd=crd, install=install, server=server)
    return KubeSpecError(text, status) if invalid else KubeApiError(text, status)


def _explain(status: int | None, message: str, reason: str, *, verb: str, resource: str, namespace: str,
             name: str | None, crd: str | None, install: str | None, server: str) -> tuple[str, bool]:
    """(message, True when the request itself was at fault)."""
    target = f"{resource} {name!r}" if name else resource
    where = f"in namespace {namespace!r}"
    quoted = f": {message}" if message else ""
    lowered = message.lower()
    refused = f"the cluster refused to {verb} {target} {where}{quoted}"
    if status == 401:
        return (
            f"the Kubernetes API server{' at ' + server if server else ''} rejected nbtrain's credentials "
            f"(401 Unauthorized) when trying to {verb} {target} {where}{quoted}. Your kubeconfig's token or "
            "certificate is missing or expired: refresh it (e.g. log in again) or point KUBECONFIG / "
            "NBTRAIN_K8S_CONTEXT at working credentials.", False)
    if status == 403 and ("exceeded quota" in lowered or "denied the request" in lowered):
        return refused, False  # quota and admission webhooks explain themselves
    if status == 403:
        return (
            f"permission denied (403 Forbidden): nbtrain may not {verb} {resource} {where}{quoted}. "
            f"The notebook's identity needs the '{verb}' verb on '{resource}'. Grant nbtrain's minimal Role: "
            f"edit the namespace and service account in {RBAC_PATH} and `kubectl apply -f` it "
            "(see docs/kubernetes.md).", False)
    if status == 404 and "namespaces" in message and "not found" in message:
        return (
            f"namespace {namespace!r} does not exist{quoted}. Create it (kubectl create namespace {namespace}) "
            "or pass --namespace / set NBTRAIN_K8S_NAMESPACE to an existing one.", True)
    if status == 404 and crd and verb in ("create", "list", "watch"):
        return (
            f"the cluster has no {crd} CustomResourceDefinition, so nbtrain cannot {verb} {resource} {where} "
            f"(404{quoted}). Install {install or crd} or use --flavor job (a plain Indexed Job).", False)
    if status == 404:
        return f"{target} {where} was not found (404) when trying to {verb} it{quoted}.", False
    if status == 409:
        return (
            f"{target} already exists {where} (409 {reason or 'AlreadyExists'}){quoted}. Another run created it: "
            "submit again (every submit gets a fresh run id) or delete the old object "
            f"(kubectl delete {resource} {name or ''} -n {namespace}).", False)
    if status == 422:
        return f"the API server refused {target} {where} as invalid (422 Unprocessable Entity){quoted}", True
    if "denied the request" in lowered:
        return refused, False
    return f"could not {verb} {target} {where}: HTTP {status}{' ' + reason if reason else ''}{quoted}", False


def connection_error(server: str, error: BaseException, *, verb: str, resource: str) -> KubeApiError:
    """The API server could not be reached at all."""
    return KubeApiError(
        f"could not reach the Kubernetes API server at {server or '(unknown)'} to {verb} {resource}: "
        f"{type(error).__name__}: {error}. Check the cluster and your kubeconfig (KUBECONFIG, NBTRAIN_K8S_CONTEXT)."
    )
