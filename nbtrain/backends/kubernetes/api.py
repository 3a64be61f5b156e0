"""Thin I/O over the official ``kubernetes`` client: create/get/delete/list/watch objects, stream logs.

Every call returns or yields plain dicts in the API's own field names (``_preload_content=False``:
nbtrain's manifests are dicts and so are the answers) and every failure leaves this module as an
nbtrain error from :mod:`nbtrain.backends.kubernetes.errors`. Streams (watches and followed logs) are
closable from another thread, so a cursor or cancel never waits on a silent socket.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from nbtrain.backends.kubernetes.config import KubeOptions
from nbtrain.backends.kubernetes.errors import KubeApiError, api_error, connection_error
from nbtrain.backends.kubernetes.manifests import WORKLOAD_KINDS
from nbtrain.errors import BackendError, EnvironmentProblem, NbtrainError

__all__ = ["KubeApi", "Stream", "WatchExpired", "kubeconfig_namespace", "watch_events", "watch_until"]

SA_NAMESPACE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")
CONNECT_TIMEOUT_S = 10.0


class WatchExpired(Exception):
    """The watch's resourceVersion is too old (410 Gone): list again, then watch from the new version."""


@dataclass(frozen=True)
class _Kind:
    resource: str  # for messages and RBAC: jobs.batch, pods, pytorchjobs.kubeflow.org
    group: str = ""
    version: str = "v1"
    plural: str = ""
    crd: str | None = None
    install: str | None = None

    @property
    def custom(self) -> bool:
        return self.crd is not None


_KINDS: dict[str, _Kind] = {
    "Pod": _Kind("pods", plural="pods"),
    "Service": _Kind("services", plural="services"),
    "ConfigMap": _Kind("configmaps", plural="configmaps"),
    "Secret": _Kind("secrets", plural="secrets"),
    "Event": _Kind("events", plural="events"),
    "Job": _Kind("jobs.batch", "batch", "v1", "jobs"),
}
_KINDS["LocalQueue"] = _Kind("localqueues.kueue.x-k8s.io", "kueue.x-k8s.io", "v1beta1", "localqueues",
                             "localqueues.kueue.x-k8s.io", "Kueue (https://kueue.sigs.k8s.io)")
_KINDS["Workload"] = _Kind("workloads.kueue.x-k8s.io", "kueue.x-k8s.io", "v1beta1", "workloads",
                           "workloads.kueue.x-k8s.io", "Kueue (https://kueue.sigs.k8s.io)")
VISIBILITY_GROUP, VISIBILITY_VERSION = "visibility.kueue.x-k8s.io", "v1beta1"  # Kueue's on-demand visibility API
_KINDS["PendingWorkloads"] = _Kind(f"localqueues/pendingworkloads.{VISIBILITY_GROUP}", VISIBILITY_GROUP,
                                   VISIBILITY_VERSION, "localqueues")
for _w in WORKLOAD_KINDS.values():
    if _w.crd:
        _KINDS[_w.kind] = _Kind(f"{_w.plural}.{_w.group}", _w.group, _w.api_version.split("/")[1], _w.plural,
                                _w.crd, _w.install)


def kubeconfig_namespace(options: KubeOptions) -> str | None:
    """The namespace of the kubeconfig context nbtrain would use (or the pod's own, in a cluster).

    Reads the file only (no network, no client import: ``plan`` stays fast and pure).
    """
    paths = (options.kubeconfig or str(Path("~/.kube/config").expanduser())).split(os.pathsep)
    for path in paths:
        try:
            data = yaml.safe_load(Path(path).expanduser().read_text(encoding="utf-8")) or {}
        except (OSError, yaml.YAMLError):
            continue
        if not isinstance(data, dict):
            continue
        name = options.context or data.get("current-context")
        for context in data.get("contexts") or []:
            if isinstance(context, dict) and context.get("name") == name:
                return (context.get("context") or {}).get("namespace") or None
        if name:
            return None
    try:
        return SA_NAMESPACE.read_text().strip() or None
    except OSError:
        return None


class Stream:
    """A streaming HTTP response (watch or followed log); ``close()`` interrupts it from any thread."""

    def __init__(self, response: Any) -> None:
        self.response = response
        self._closed = threading.Event()
        self.remainder = b""  # bytes after the last newline when the stream ended

    @property
    def closed(self) -> bool:
        """``close()`` was called."""
        return self._closed.is_set()

    def batches(self) -> Iterator[list[str]]:
        """Complete lines (decoded, without newlines), one list per chunk read from the network."""
        for raw in self._raw_batches():
            yield [line.decode("utf-8", "replace") for line in raw]

    def lines(self) -> Iterator[bytes]:
        """Complete lines as bytes."""
        for raw in self._raw_batches():
            yield from raw

    def _raw_batches(self) -> Iterator[list[bytes]]:
        pending = b""
        for chunk in self.response.stream(64 * 1024, decode_content=True):
            if self._closed.is_set():
                return
            pending += chunk
            if b"\n" not in pending:
                continue
            *complete, pending = pending.split(b"\n")
            self.remainder = pending
            yield complete
        self.remainder = pending

    def close(self) -> None:
        """Interrupt a blocked read and release the connection (idempotent)."""
        if self._closed.is_set():
            return
        self._closed.set()
        for method in ("shutdown", "close", "release_conn"):
            try:
                getattr(self.response, method, lambda: None)()
            except Exception:  # noqa: BLE001 - closing a broken socket may fail; it is closed either way
                pass


class KubeApi:
    """One cluster connection (kubeconfig ``context``, or in-cluster). Thread-safe; created lazily."""

    def __init__(self, options: KubeOptions, context: str | None = None) -> None:
        self.options = options
        self.context = context or options.context
        self._client: Any = None
        self._lock = threading.Lock()
        self.server = ""

    # -- connection ---------------------------------------------------------------------------------
    def _api_client(self) -> Any:
        with self._lock:
            if self._client is None:
                from kubernetes import client, config

                configuration = client.Configuration()
                try:
                    config.load_kube_config(config_file=self.options.kubeconfig, context=self.context,
                                            client_configuration=configuration, persist_config=False)
                except Exception as error:
                    if not os.environ.get("KUBERNETES_SERVICE_HOST"):
                        raise EnvironmentProblem(
                            f"no usable Kubernetes configuration ({error}); set KUBECONFIG to your kubeconfig file "
                            "(and NBTRAIN_K8S_CONTEXT to pick a context), or run the notebook inside the cluster."
                        ) from error
                    config.load_incluster_config(client_configuration=configuration)
                configuration.connection_pool_maxsize = 64  # watches and followed logs each hold a connection
                self.server = str(configuration.host)
                self._client = client.ApiClient(configuration)
            return self._client

    def _call(self, verb: str, kind: str, namespace: str, name: str | None, fn: Callable[[], Any]) -> Any:
        from kubernetes.client.exceptions import ApiException

        try:
            return fn()
        except ApiException as error:
            k = _KINDS[kind]
            raise api_error(error.status, error.body, verb=verb, resource=k.resource, namespace=namespace,
                            name=name, crd=k.crd, install=k.install, server=self.server) from None
        except NbtrainError:
            raise
        except ValueError as error:  # pydantic's ValidationError: the client refused the body
            raise BackendError(
                f"the kubernetes client refused the {kind} {name or ''} nbtrain built (client-side validation): "
                f"{error}"
            ) from error
        except Exception as error:
            if _is_network_error(error):
                raise connection_error(self.server, error, verb=verb, resource=_KINDS[kind].resource) from error
            raise

    def _apis(self) -> tuple[Any, Any, Any]:
        from kubernetes import client

        api_client = self._api_client()
        return client.CoreV1Api(api_client), client.BatchV1Api(api_client), client.CustomObjectsApi(api_client)

    # -- objects ------------------------------------------------------------------------------------
    def create(self, obj: Mapping[str, Any], namespace: str, *, dry_run: bool = False) -> dict[str, Any]:
        """Create ``obj``; returns the object as the server stored it (with uid and resourceVersion).

        ``dry_run``: server-side dry run with strict field validation (unknown fields are errors).
        """
        kind = str(obj["kind"])
        name = str(obj["metadata"]["name"])
        core, batch, custom = self._apis()
        extra: dict[str, Any] = {"_preload_content": False, "_request_timeout": (CONNECT_TIMEOUT_S, 60)}
        if dry_run:
            extra.update(dry_run="All", field_validation="Strict")

        def run() -> Any:
            if kind == "Job":
                return batch.create_namespaced_job(namespace, obj, **extra)
            if kind == "Service":
                return core.create_namespaced_service(namespace, obj, **extra)
            if kind == "ConfigMap":
                return core.create_namespaced_config_map(namespace, obj, **extra)
            if kind == "Secret":
                return core.create_namespaced_secret(namespace, obj, **extra)
            k = _KINDS[kind]
            return custom.create_namespaced_custom_object(k.group, k.version, namespace, k.plural, dict(obj), **extra)

        return _json(self._call("create", kind, namespace, name, run))

    def get(self, kind: str, name: str, namespace: str) -> dict[str, Any] | None:
        """The object, or None when it does not exist."""
        core, batch, custom = self._apis()
        extra: dict[str, Any] = {"_preload_content": False, "_request_timeout": (CONNECT_TIMEOUT_S, 30)}

        def run() -> Any:
            if kind == "Job":
                return batch.read_namespaced_job(name, namespace, **extra)
            if kind == "Pod":
                return core.read_namespaced_pod(name, namespace, **extra)
            if kind == "Service":
                return core.read_namespaced_service(name, namespace, **extra)
            if kind == "ConfigMap":
                return core.read_namespaced_config_map(name, namespace, **extra)
            if kind == "Secret":
                return core.read_namespaced_secret(name, namespace, **extra)
            k = _KINDS[kind]
            return custom.get_namespaced_custom_object(k.group, k.version, namespace, k.plural, name, **extra)

        try:
            return _json(self._call("get", kind, namespace, name, run))
        except KubeApiError as error:
            if error.status == 404:
                return None
            raise

    def delete(self, kind: str, name: str, namespace: str, *, propagation: str = "Foreground") -> bool:
        """Delete with ``propagation`` (pods go with their Job); False when it was already gone."""
        core, batch, custom = self._apis()
        extra: dict[str, Any] = {"_preload_content": False, "_request_timeout": (CONNECT_TIMEOUT_S, 30),
                                 "propagation_policy": propagation}

        def run() -> Any:
            if kind == "Job":
                return batch.delete_namespaced_job(name, namespace, **extra)
            if kind == "Service":
                return core.delete_namespaced_service(name, namespace, **extra)
            if kind == "ConfigMap":
                return core.delete_namespaced_config_map(name, namespace, **extra)
            k = _KINDS[kind]
            return custom.delete_namespaced_custom_object(k.group, k.version, namespace, k.plural, name, **extra)

        try:
            self._call("delete", kind, namespace, name, run)
        except KubeApiError as error:
            if error.status == 404:
                return False
            raise
        return True

    def _lister(self, kind: str, namespace: str, **params: Any) -> Any:
        core, batch, custom = self._apis()
        params = {k: v for k, v in params.items() if v is not None}
        params["_preload_content"] = False
        if kind == "Pod":
            return core.list_namespaced_pod(namespace, **params)
        if kind == "Event":
            return core.list_namespaced_event(namespace, **params)
        if kind == "Job":
            return batch.list_namespaced_job(namespace, **params)
        k = _KINDS[kind]
        return custom.list_namespaced_custom_object(k.group, k.version, namespace, k.plural, **params)

    def list_items(self, kind: str, namespace: str, *, label_selector: str | None = None,
             field_selector: str | None = None) -> tuple[list[dict[str, Any]], str]:
        """(items, resourceVersion of the list)."""
        data = _json(self._call("list", kind, namespace, None, lambda: self._lister(
            kind, namespace, label_selector=label_selector, field_selector=field_selector,
            _request_timeout=(CONNECT_TIMEOUT_S, 60))))
        return list(data.get("items") or []), str((data.get("metadata") or {}).get("resourceVersion") or "")

    def watch(self, kind: str, namespace: str, *, resource_version: str, label_selector: str | None = None,
              field_selector: str | None = None, timeout_s: int = 60) -> Stream:
        """Open a watch from ``resource_version``; iterate with :func:`watch_events`."""
        response = self._call("watch", kind, namespace, None, lambda: self._lister(
            kind, namespace, label_selector=label_selector, field_selector=field_selector, watch=True,
            resource_version=resource_version, allow_watch_bookmarks=True, timeout_seconds=timeout_s,
            _request_timeout=(CONNECT_TIMEOUT_S, timeout_s + 30)))
        return Stream(response)

    def log(self, pod: str, namespace: str, container: str, *, follow: bool, since_time: str | None = None,
            read_timeout_s: float = 120) -> Stream:
        """The container's log, each line led by its timestamp (``timestamps=true``), from its start or from
        ``since_time`` (RFC 3339, whole seconds); ``follow``: stays open while the container runs.

        The generated client has no ``sinceTime`` parameter for pod logs (only ``sinceSeconds``, which depends on
        the node's clock), so the query is added to the request the client builds.
        """
        from urllib.parse import urlencode

        core, _, _ = self._apis()

        def run() -> Any:
            request = core._read_namespaced_pod_log_serialize(
                name=pod, namespace=namespace, container=container, follow=follow, insecure_skip_tls_verify_backend=None,
                limit_bytes=None, pretty=None, previous=None, since_seconds=None, stream=None, tail_lines=None,
                timestamps=True, _request_auth=None, _content_type=None, _headers=None, _host_index=0)
            if since_time:
                method, url, *rest = request
                url += ("&" if "?" in url else "?") + urlencode({"sinceTime": since_time})
                request = (method, url, *rest)
            return core.api_client._call_with_legacy_options(
                request, {"200": "str"}, None, False, (CONNECT_TIMEOUT_S, read_timeout_s), True)

        return Stream(self._call("get", "Pod", namespace, pod, run))

    def pending_workloads(self, namespace: str, queue: str) -> dict[str, Any]:
        """Kueue's ``PendingWorkloadsSummary`` of LocalQueue ``queue`` (the on-demand visibility API:
        ``/apis/visibility.kueue.x-k8s.io/v1beta1/namespaces/NS/localqueues/Q/pendingworkloads``).

        The generated client has no call for an aggregated API's subresource, so the path is added to the request
        the client builds for the LocalQueue (as :meth:`log` adds ``sinceTime``). Errors as for any call (404 where
        the visibility API is not installed, 403 without ``get`` on ``localqueues/pendingworkloads``).
        """
        _, _, custom = self._apis()

        def run() -> Any:
            request = custom._get_namespaced_custom_object_serialize(
                group=VISIBILITY_GROUP, version=VISIBILITY_VERSION, namespace=namespace, plural="localqueues",
                name=queue, _request_auth=None, _content_type=None, _headers=None, _host_index=0)
            method, url, *rest = request
            head, _, query = url.partition("?")
            request = (method, head + "/pendingworkloads" + (f"?{query}" if query else ""), *rest)
            return custom.api_client._call_with_legacy_options(
                request, {"200": "object"}, None, False, (CONNECT_TIMEOUT_S, 30), True)

        return _json(self._call("get", "PendingWorkloads", namespace, queue, run))

    def warnings_about(self, namespace: str, name: str) -> list[dict[str, Any]]:
        """Warning Events about the object ``name`` and the objects named after it (``name-…``: a JobSet's Jobs, an
        operator's pods), oldest first. Whichever controller failed (the Job controller, an operator) is included."""
        items, _ = self.list_items("Event", namespace, field_selector="type=Warning")
        mine = [e for e in items if str((e.get("involvedObject") or {}).get("name") or "") == name
                or str((e.get("involvedObject") or {}).get("name") or "").startswith(name + "-")]
        return sorted(mine, key=lambda e: str(e.get("lastTimestamp") or e.get("eventTime") or ""))


def watch_events(stream: Stream) -> Iterator[tuple[str, dict[str, Any]]]:
    """(type, object) of each watch event; raises WatchExpired on 410, an nbtrain error on other errors."""
    for line in stream.lines():
        if not line.strip():
            continue
        event = json.loads(line)
        kind = str(event.get("type", ""))
        obj = event.get("object") or {}
        if kind == "ERROR":
            code = obj.get("code")
            if code == 410:
                raise WatchExpired(str(obj.get("message", "")))
            raise BackendError(f"the watch failed: {code} {obj.get('reason', '')}: {obj.get('message', '')}")
        yield kind, obj


def watch_until(
    api: KubeApi,
    kind: str,
    namespace: str,
    *,
    label: str | None,
    field: str | None,
    timeout_s: int,
    on_list: Callable[[list[dict[str, Any]]], None],
    on_event: Callable[[str, dict[str, Any]], None],
    stop: threading.Event,
    on_error: Callable[[str], None],
    streams: tuple[set[Stream], threading.Lock | threading.RLock],
) -> None:
    """List, then watch from the list's resourceVersion, until ``stop`` is set.

    A watch that ends or drops resumes from the last resourceVersion seen; 410 Gone lists again (the
    list brings what changed meanwhile). API errors go to ``on_error`` and are retried with backoff.
    Open streams are kept in ``streams`` so that whoever sets ``stop`` can close them.
    """
    version = ""
    backoff = 0.2
    registry, lock = streams
    while not stop.is_set():
        stream: Stream | None = None
        try:
            if not version:
                items, version = api.list_items(kind, namespace, label_selector=label, field_selector=field)
                on_list(items)
            stream = api.watch(kind, namespace, resource_version=version, label_selector=label,
                               field_selector=field, timeout_s=timeout_s)
            with lock:
                registry.add(stream)
            for kind_of_event, obj in watch_events(stream):
                version = str((obj.get("metadata") or {}).get("resourceVersion") or version)
                if kind_of_event != "BOOKMARK":
                    on_event(kind_of_event, obj)
            backoff = 0.2
        except WatchExpired:
            version = ""
        except NbtrainError as error:
            on_error(str(error))
            stop.wait(backoff)
            backoff = min(5.0, backoff * 2)
        except Exception:  # noqa: BLE001 - a dropped stream: resume from the last resourceVersion
            stop.wait(backoff)
            backoff = min(5.0, backoff * 2)
        finally:
            if stream is not None:
                stream.close()
                with lock:
                    registry.discard(stream)


def _json(response: Any) -> dict[str, Any]:
    data = response.data if hasattr(response, "data") else response
    result = json.loads(data) if isinstance(data, (bytes, str)) else data
    return result if isinstance(result, dict) else {}


def _is_network_error(error: BaseException) -> bool:
    module = type(error).__module__
    return module.startswith(("urllib3", "http.client", "socket", "ssl")) or isinstance(error, OSError)
