"""A fake Kubernetes API server for tests: standard-library HTTP on 127.0.0.1, driven by the official client.

It serves just the API paths nbtrain uses — jobs, pods (list, watch, log with ``follow`` over chunked
HTTP), services, configmaps, secrets, events, persistentvolumeclaims, and custom resources when their CRD is "installed" — keeps
resourceVersions and a watch history, and runs a Job controller and a kubelet (fake_cluster.py) that
start each pod's command as a local process. Faults for tests: ``deny`` (403 for a verb/resource),
``rbac`` (allow only a Role's rules), ``break_streams`` (drop every open watch/log connection
mid-stream), ``compact`` (older resourceVersions answer 410 Gone).
"""

from __future__ import annotations

import copy
import json
import re
import socket
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlparse

CORE = {"pods", "services", "configmaps", "secrets", "events", "persistentvolumeclaims"}
USER = "system:serviceaccount:nbtrain-test:notebook"


def now_rfc3339(at: float | None = None) -> str:
    at = time.time() if at is None else at
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(at)) + f".{int(at % 1 * 1e6):06d}Z"


class ApiError(Exception):
    def __init__(self, code: int, reason: str, message: str) -> None:
        super().__init__(message)
        self.code, self.reason, self.message = code, reason, message

    def body(self) -> dict[str, Any]:
        return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                "message": self.message, "reason": self.reason, "code": self.code}


def matches_labels(obj: dict[str, Any], selector: str | None) -> bool:
    if not selector:
        return True
    labels = (obj.get("metadata") or {}).get("labels") or {}
    for term in selector.split(","):
        key, _, value = term.partition("=")
        if labels.get(key.strip()) != value.strip():
            return False
    return True


def matches_fields(obj: dict[str, Any], selector: str | None) -> bool:
    if not selector:
        return True
    for term in selector.split(","):
        path, _, value = term.partition("=")
        node: Any = obj
        for part in path.strip().split("."):
            node = (node or {}).get(part) if isinstance(node, dict) else None
        if str(node) != value.strip():
            return False
    return True


class Store:
    """Objects keyed by (resource, namespace, name), a resourceVersion counter and a watch history."""

    def __init__(self) -> None:
        self.lock = threading.RLock()
        self.changed = threading.Condition(self.lock)
        self.objects: dict[tuple[str, str, str], dict[str, Any]] = {}
        self.rv = 100
        self.history: list[tuple[int, str, str, str, dict[str, Any]]] = []  # rv, resource, ns, type, obj
        self.compacted = 0
        self.namespaces = {"default", "nbtrain-test"}
        self.crds: set[str] = set()  # "pytorchjobs.kubeflow.org" etc.

    def _record(self, resource: str, namespace: str, kind: str, obj: dict[str, Any]) -> None:
        self.rv += 1
        obj["metadata"]["resourceVersion"] = str(self.rv)
        self.history.append((self.rv, resource, namespace, kind, copy.deepcopy(obj)))
        self.changed.notify_all()

    def create(self, resource: str, namespace: str, obj: dict[str, Any]) -> dict[str, Any]:
        with self.lock:
            if namespace not in self.namespaces:
                raise ApiError(404, "NotFound", f'namespaces "{namespace}" not found')
            meta = obj.setdefault("metadata", {})
            name = meta.get("name")
            if not name and meta.get("generateName"):
                name = meta["generateName"] + uuid.uuid4().hex[:5]
                meta["name"] = name
            if not name or len(name) > 253 or not re.match(r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$", name):
                raise ApiError(422, "Invalid", f'{resource} "{name}" is invalid: metadata.name: Invalid value: "{name}"')
            key = (resource, namespace, name)
            if key in self.objects:
                raise ApiError(409, "AlreadyExists", f'{resource} "{name}" already exists')
            meta.update(namespace=namespace, uid=str(uuid.uuid4()), creationTimestamp=now_rfc3339(), generation=1)
            self.objects[key] = obj
            self._record(resource, namespace, "ADDED", obj)
            return copy.deepcopy(obj)

    def get(self, resource: str, namespace: str, name: str) -> dict[str, Any]:
        with self.lock:
            obj = self.objects.get((resource, namespace, name))
            if obj is None:
                raise ApiError(404, "NotFound", f'{resource} "{name}" not found')
            return copy.deepcopy(obj)

    def find(self, resource: str, namespace: str, name: str) -> dict[str, Any] | None:
        with self.lock:
            return self.objects.get((resource, namespace, name))

    def update(self, resource: str, namespace: str, obj: dict[str, Any]) -> None:
        with self.lock:
            key = (resource, namespace, obj["metadata"]["name"])
            if key in self.objects:
                self.objects[key] = obj
                self._record(resource, namespace, "MODIFIED", obj)

    def remove(self, resource: str, namespace: str, name: str) -> dict[str, Any] | None:
        with self.lock:
            obj = self.objects.pop((resource, namespace, name), None)
            if obj is not None:
                self._record(resource, namespace, "DELETED", obj)
            return obj

    def items(self, resource: str, namespace: str | None = None) -> list[dict[str, Any]]:
        with self.lock:
            return [o for (r, ns, _), o in self.objects.items() if r == resource and (namespace in (None, ns))]

    def events_after(self, rv: int, resource: str, namespace: str) -> list[tuple[int, str, dict[str, Any]]]:
        with self.lock:
            return [(v, k, o) for v, r, ns, k, o in self.history if v > rv and r == resource and ns == namespace]


class FakeApiServer:
    """The HTTP front of a :class:`~fake_cluster.FakeCluster` (start/stop; ``url`` and ``kubeconfig``)."""

    def __init__(self, cluster: Any) -> None:
        self.cluster = cluster
        self.store: Store = cluster.store
        self.denied: set[tuple[str, str]] = set()  # (verb, resource) answered with 403
        self.rbac_rules: list[dict[str, Any]] | None = None  # when set, only these are allowed
        self.requests: list[tuple[str, str, str, str]] = []  # verb, group, resource, namespace
        self.deletes: list[tuple[str, str, str | None]] = []  # resource, name, propagationPolicy
        self.log_connections: dict[socket.socket, str] = {}  # followed pod logs being served now -> pod name
        self.log_requests: list[tuple[str, dict[str, str]]] = []  # pod name, query of each log request
        self.max_log_streams = 0  # the most open at once (a diagnostic: a preempted stream may overlap its successor)
        self._streams: set[socket.socket] = set()
        self._streams_lock = threading.Lock()
        server = self

        class Handler(_Handler):
            api = server

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, name="fake-apiserver", daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def start(self) -> FakeApiServer:
        self.thread.start()
        return self

    def stop(self) -> None:
        self.break_streams()
        self.httpd.shutdown()
        self.httpd.server_close()

    def write_kubeconfig(self, path: Path, namespace: str = "nbtrain-test") -> Path:
        import yaml

        path.write_text(yaml.safe_dump({
            "apiVersion": "v1", "kind": "Config", "current-context": "fake",
            "clusters": [{"name": "fake", "cluster": {"server": self.url}}],
            "users": [{"name": "notebook", "user": {"token": "fake-token"}}],
            "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "notebook", "namespace": namespace}}],
        }))
        return path

    # -- faults ---------------------------------------------------------------------------------
    def deny(self, verb: str, resource: str) -> None:
        self.denied.add((verb, resource))

    def break_streams(self) -> int:
        """Drop every open streaming connection (watches and followed logs) without ending it properly."""
        with self._streams_lock:
            sockets = list(self._streams)
            self._streams.clear()
        for sock in sockets:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        return len(sockets)

    def log_streams_open(self) -> list[str]:
        """The pods whose followed log is open now (sorted; a stream whose client has hung up does not count)."""
        with self._streams_lock:
            return sorted(pod for conn, pod in self.log_connections.items() if not _client_closed(conn))

    def compact(self) -> None:
        """Forget the watch history: watches from an older resourceVersion get 410 Gone."""
        with self.store.lock:
            self.store.compacted = self.store.rv
            self.store.history.clear()

    def authorize(self, verb: str, group: str, resource: str, namespace: str) -> None:
        self.requests.append((verb, group, resource, namespace))
        plural = f"{resource}.{group}" if group else resource
        allowed = (verb, plural) not in self.denied and (verb, resource) not in self.denied
        if allowed and self.rbac_rules is not None:
            allowed = any(
                group in rule.get("apiGroups", []) and resource in rule.get("resources", [])
                and verb in rule.get("verbs", [])
                for rule in self.rbac_rules
            )
        if not allowed:
            sub = resource.split("/")
            what = f'resource "{sub[0]}"' + (f' in subresource "{sub[1]}"' if len(sub) > 1 else "")
            raise ApiError(403, "Forbidden", f'{plural} is forbidden: User "{USER}" cannot {verb} {what} in API group '
                           f'"{group}" in the namespace "{namespace}"')


_ROUTES = [
    (re.compile(r"^/api/v1/namespaces/([^/]+)/(pods|services|configmaps|secrets|events|persistentvolumeclaims)(?:/([^/]+))?(?:/(log))?$"),
     "core"),
    (re.compile(r"^/apis/(batch)/(v1)/namespaces/([^/]+)/(jobs)(?:/([^/]+))?$"), "group"),
    # Kueue's on-demand visibility API (an aggregated API): a LocalQueue's pending Workloads
    (re.compile(r"^/apis/(visibility\.kueue\.x-k8s\.io)/([^/]+)/namespaces/([^/]+)/(localqueues)/([^/]+)/pendingworkloads$"),
     "pending"),
    (re.compile(r"^/apis/([^/]+)/([^/]+)/namespaces/([^/]+)/([^/]+)(?:/([^/]+))?$"), "group"),
]


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    api: FakeApiServer

    def log_message(self, format: str, *args: Any) -> None:
        pass

    # -- plumbing -------------------------------------------------------------------------------
    def _route(self) -> tuple[str, str, str, str | None, bool, dict[str, str]]:
        parsed = urlparse(self.path)
        query = {k: v[-1] for k, v in parse_qs(parsed.query).items()}
        for pattern, kind in _ROUTES:
            match = pattern.match(parsed.path)
            if match is None:
                continue
            if kind == "core":
                namespace, resource, name, log = match.groups()
                return "", resource, namespace, name, bool(log), query
            group, _version, namespace, resource, name = match.groups()
            if kind == "pending":
                resource = f"{resource}/pendingworkloads"
            return group, resource, namespace, name, False, query
        raise ApiError(404, "NotFound", "the server could not find the requested resource")

    def _send(self, code: int, body: dict[str, Any]) -> None:
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _body(self) -> dict[str, Any]:
        return json.loads(self._raw or b"{}")

    def _handle(self, method: str) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        self._raw = self.rfile.read(length) if length else b""  # always consumed: the connection is kept alive
        try:
            group, resource, namespace, name, log, query = self._route()
            sub = "pods/log" if log else resource
            if method == "GET":
                verb = "get" if name else ("watch" if query.get("watch") in ("true", "1") else "list")
            else:
                verb = {"POST": "create", "DELETE": "delete", "PATCH": "patch"}[method]
            self.api.authorize(verb, group, sub, namespace)
            plural = f"{resource}.{group}" if group else resource
            if group and group != "batch" and plural not in self.api.store.crds:
                raise ApiError(404, "NotFound", "the server could not find the requested resource")
            if self.headers.get("Authorization") != "Bearer fake-token":
                raise ApiError(401, "Unauthorized", "Unauthorized")
            self._dispatch(verb, plural, namespace, name, log, query)
        except ApiError as error:
            self._send(error.code, error.body())
        except (BrokenPipeError, ConnectionResetError, OSError):
            pass

    def do_GET(self) -> None:
        self._handle("GET")

    def do_POST(self) -> None:
        self._handle("POST")

    def do_DELETE(self) -> None:
        self._handle("DELETE")

    def do_PATCH(self) -> None:
        self._handle("PATCH")

    # -- verbs ----------------------------------------------------------------------------------
    def _dispatch(self, verb: str, plural: str, namespace: str, name: str | None, log: bool, query: dict[str, str]) -> None:
        store, cluster = self.api.store, self.api.cluster
        if log:
            self._log(namespace, str(name), query)
        elif verb == "create":
            body = self._body()
            cluster.validate(plural, namespace, body)  # admission webhooks (Trainer's), dry runs included
            if query.get("dryRun") == "All":
                self._send(201, body)
                return
            created = store.create(plural, namespace, body)
            cluster.created(plural, namespace, created)
            self._send(201, created)
        elif verb == "get" and plural.startswith("localqueues/pendingworkloads."):
            self._send(200, cluster.pending_workloads(namespace, str(name)))
        elif verb == "get":
            self._send(200, store.get(plural, namespace, str(name)))
        elif verb == "list":
            with store.lock:
                items = [copy.deepcopy(o) for o in store.items(plural, namespace)
                         if matches_labels(o, query.get("labelSelector")) and matches_fields(o, query.get("fieldSelector"))]
                rv = str(store.rv)
            self._send(200, {"kind": "List", "apiVersion": "v1", "metadata": {"resourceVersion": rv}, "items": items})
        elif verb == "watch":
            self._watch(plural, namespace, query)
        elif verb == "delete":
            body = self._body()
            policy = query.get("propagationPolicy") or body.get("propagationPolicy")
            self.api.deletes.append((plural, str(name), policy))
            obj = store.get(plural, namespace, str(name))
            cluster.delete(plural, namespace, str(name), policy or "Background")
            self._send(200, obj)
        else:
            raise ApiError(405, "MethodNotAllowed", f"{verb} is not supported by the fake API server")

    def _start_stream(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        with self.api._streams_lock:
            self.api._streams.add(self.connection)

    def _chunk(self, data: bytes) -> None:
        self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
        self.wfile.flush()

    def _end_stream(self) -> None:
        with self.api._streams_lock:
            alive = self.connection in self.api._streams
            self.api._streams.discard(self.connection)
        if alive:
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()
        else:
            self.close_connection = True

    def _broken(self) -> bool:
        with self.api._streams_lock:
            return self.connection not in self.api._streams

    def _watch(self, plural: str, namespace: str, query: dict[str, str]) -> None:
        store = self.api.store
        since = int(query.get("resourceVersion") or 0)
        deadline = time.monotonic() + float(query.get("timeoutSeconds") or 300)
        self._start_stream()
        try:
            if since and since < store.compacted:
                gone = ApiError(410, "Expired", f"too old resource version: {since} ({store.compacted})")
                self._chunk(json.dumps({"type": "ERROR", "object": gone.body()}).encode() + b"\n")
                return
            while time.monotonic() < deadline and not self._broken():
                with store.lock:
                    pending = store.events_after(since, plural, namespace)
                    if not pending:
                        store.changed.wait(timeout=0.2)
                        continue
                for rv, kind, obj in pending:
                    since = rv
                    if matches_labels(obj, query.get("labelSelector")) and matches_fields(obj, query.get("fieldSelector")):
                        self._chunk(json.dumps({"type": kind, "object": obj}).encode() + b"\n")
        finally:
            self._end_stream()

    def _log(self, namespace: str, name: str, query: dict[str, str]) -> None:
        pod = self.api.store.get("pods", namespace, name)
        runtime = self.api.cluster.runtime(pod["metadata"]["uid"])
        if runtime is None or not runtime.started:
            container = query.get("container") or "trainer"
            raise ApiError(400, "BadRequest",
                           f'container "{container}" in pod "{name}" is waiting to start: ContainerCreating')
        follow = query.get("follow", "").lower() in ("true", "1")
        stamps = query.get("timestamps", "").lower() in ("true", "1")
        since = query.get("sinceTime") or ""  # RFC 3339 with whole seconds: lines at or after that second
        if since and not re.match(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$", since):
            raise ApiError(400, "BadRequest", f'parsing time "{since}" as RFC 3339: cannot parse')
        self.api.log_requests.append((name, dict(query)))

        def shown(lines: list[tuple[str, bytes]]) -> bytes:
            kept = [(t, line) for t, line in lines if not since or t[:19] + "Z" >= since]
            return b"".join((t.encode() + b" " + line) if stamps else line for t, line in kept)

        if not follow:
            data = shown(runtime.read_lines(runtime.first_kept(), 0)[0])
            self.send_response(200)
            self.send_header("Content-Type", "text/plain")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
            return
        self._start_stream()
        with self.api._streams_lock:
            open_now = {c: pod for c, pod in self.api.log_connections.items() if not _client_closed(c)}
            open_now[self.connection] = name
            self.api.log_connections = open_now
            self.api.max_log_streams = max(self.api.max_log_streams, len(open_now))
        try:
            index = runtime.first_kept()
            while not self._broken():
                lines, done = runtime.read_lines(index, wait=0.2)
                index += len(lines)
                data = shown(lines)
                if data:
                    self._chunk(data)
                elif done:
                    return
        finally:
            with self.api._streams_lock:
                self.api.log_connections.pop(self.connection, None)
            self._end_stream()


def _client_closed(connection: socket.socket) -> bool:
    """The client has closed its end (a pending EOF), so the stream no longer counts as open."""
    try:
        return connection.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT) == b""
    except BlockingIOError:
        return False
    except OSError:
        return True
