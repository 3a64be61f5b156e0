"""The kubelet of the fake cluster (fake_cluster.py): each pod's command runs as a local process.

The pod's environment (``value``, ``fieldRef``, ``secretKeyRef`` — from Secret objects created through the API, or
the cluster's ``secrets`` preset by a test; ``optional`` honoured; ``$(VAR)`` expansion; HOSTNAME;
JOB_COMPLETION_INDEX), its ConfigMap volumes written out as files, emptyDirs as directories,
``persistentVolumeClaim`` volumes as one host directory per claim (shared by every pod and attempt that mounts it,
like a ReadWriteMany volume) — mount paths rewritten to them — and DNS names of pods under a headless Service mapped
to 127.0.0.1. A pod that mounts a claim that does not exist stays Pending, unschedulable, with the scheduler's
message. Its merged stdout/stderr is the pod log (:class:`PodRuntime`). Every process of a pod carries
``FAKE_POD_UID`` so deleting the pod ends all of them (:func:`kill_marked`), as a container runtime would.
"""

from __future__ import annotations

import base64
import copy
import functools
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fake_apiserver import now_rfc3339

if TYPE_CHECKING:
    from fake_cluster import FakeCluster

POD_MARKER = "FAKE_POD_UID"


def _pids_with(marker: str) -> list[int]:
    needle = f"\0{marker}\0".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if needle in b"\0" + (entry / "environ").read_bytes() + b"\0":
                state = (entry / "stat").read_text().rsplit(")", 1)[-1].split()[0]
                if state not in ("Z", "X"):
                    found.append(int(entry.name))
        except (OSError, IndexError):
            continue
    return found


def kill_marked(marker: str, grace_s: float) -> None:
    """SIGTERM every process whose environment has ``marker``; SIGKILL what is left after ``grace_s``."""
    for sig, wait in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 2.0)):
        pids = _pids_with(marker)
        if not pids:
            return
        for pid in pids:
            try:
                os.kill(pid, sig)
            except OSError:
                pass
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline and _pids_with(marker):
            time.sleep(0.05)


def expand(text: str, env: dict[str, str]) -> str:
    """Kubernetes' ``$(VAR)`` expansion: known names are replaced, ``$$`` is a literal ``$``."""
    def replace(match: re.Match[str]) -> str:
        if match.group(0) == "$$":
            return "$"
        name = match.group(1)
        return env[name] if name in env else match.group(0)

    return re.sub(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_]*)\)", replace, text)


def log_timestamp() -> str:
    """Now as the kubelet stamps log lines (RFC 3339, nanoseconds, UTC)."""
    ns = time.time_ns()
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(ns // 10**9)) + f".{ns % 10**9:09d}Z"


class PodRuntime:
    """One pod's process and its log: complete lines, each with the time it was read, as the kubelet keeps them.

    ``keep_lines``: like a kubelet that rotates container logs, only the newest lines are served to a new log
    request (an open follow stream goes on across rotation, as the kubelet's does).
    """

    def __init__(self, uid: str, keep_lines: int | None = None) -> None:
        self.uid = uid
        self.lines: list[tuple[str, bytes]] = []  # (timestamp, line with its newline; the last may lack it)
        self.partial = b""
        self.keep_lines = keep_lines
        self.cond = threading.Condition()
        self.started = False
        self.done = False
        self.process: subprocess.Popen[bytes] | None = None
        self.exit_code: int | None = None

    def first_kept(self) -> int:
        """Index of the oldest line a new log request is served."""
        with self.cond:
            return 0 if self.keep_lines is None else max(0, len(self.lines) - self.keep_lines)

    def log_bytes(self) -> bytes:
        """The whole log as written (no rotation, no timestamps): for tests to look at."""
        with self.cond:
            return b"".join(line for _, line in self.lines)

    def read_lines(self, index: int, wait: float) -> tuple[list[tuple[str, bytes]], bool]:
        """Lines from ``index`` on (waiting up to ``wait`` for some), and whether the log is complete."""
        with self.cond:
            if len(self.lines) <= index and not self.done:
                self.cond.wait(timeout=wait)
            return list(self.lines[index:]), self.done and len(self.lines) <= index

    def pump(self) -> None:
        assert self.process is not None and self.process.stdout is not None
        for chunk in iter(lambda: self.process.stdout.read1(65536), b""):  # type: ignore[union-attr]
            stamp = log_timestamp()
            with self.cond:
                *complete, self.partial = (self.partial + chunk).split(b"\n")
                self.lines += [(stamp, line + b"\n") for line in complete]
                self.cond.notify_all()
        self.exit_code = self.process.wait()
        kill_marked(f"{POD_MARKER}={self.uid}", 0.5)  # the container ends with its main process
        with self.cond:
            if self.partial:
                self.lines.append((log_timestamp(), self.partial))
                self.partial = b""
            self.done = True
            self.cond.notify_all()


class FakeKubelet:
    """Runs the pods of a :class:`~fake_cluster.FakeCluster` (:meth:`run_pod` is one pod's thread)."""

    def __init__(self, cluster: FakeCluster) -> None:
        self.c = cluster

    def run_pod(self, ns: str, name: str) -> None:
        """The kubelet of pod ``name``: wait until it can start (scheduled, its image pulled, its volumes and
        Secrets there), then run its container as a local process until it ends (a thread's body)."""
        while not self.c._stop.is_set():
            pod = self.c.store.find("pods", ns, name)
            if pod is None or pod["metadata"].get("deletionTimestamp"):
                return
            if self.c.unschedulable:
                if not pod["status"].get("conditions"):
                    self._pod_update(ns, name, functools.partial(_unschedulable, message=self.c.unschedulable))
                time.sleep(0.1)
                continue
            missing = [v["persistentVolumeClaim"]["claimName"] for v in pod["spec"].get("volumes") or []
                        if "persistentVolumeClaim" in v and self.c.store.find(
                            "persistentvolumeclaims", ns, v["persistentVolumeClaim"]["claimName"]) is None]
            if missing:  # the scheduler's VolumeBinding plugin: unschedulable until the claim exists
                if not pod["status"].get("conditions"):
                    self._pod_update(ns, name, functools.partial(_unschedulable, message=(
                        f'0/1 nodes are available: persistentvolumeclaim "{missing[0]}" not found. preemption: 0/1 '
                        "nodes are available: 1 Preemption is not helpful for scheduling.")))
                time.sleep(0.1)
                continue
            image = str(pod["spec"]["containers"][0].get("image", ""))
            if image.startswith("missing/"):
                self._pod_update(ns, name, functools.partial(
                    self._waiting, reason="ErrImagePull", message=f"pull access denied for {image}"))
                time.sleep(0.3)
                self._pod_update(ns, name, functools.partial(
                    self._waiting, reason="ImagePullBackOff", message=f'Back-off pulling image "{image}"'))
                return
            prepared = self._prepare(ns, pod)
            if isinstance(prepared, str):
                self._pod_update(ns, name, lambda p, why=prepared: self._waiting(p, "CreateContainerConfigError", why))
                time.sleep(0.2)
                continue
            if prepared is None:
                time.sleep(0.1)  # the ConfigMap is not there yet (created right after the Job)
                continue
            self._run(ns, pod, *prepared)
            return

    def _pod_update(self, ns: str, name: str, change: Any) -> dict[str, Any] | None:
        with self.c.store.lock:
            pod = self.c.store.find("pods", ns, name)
            if pod is None:
                return None
            pod = copy.deepcopy(pod)
            change(pod)
            self.c.store.update("pods", ns, pod)
            return pod

    def _waiting(self, pod: dict[str, Any], reason: str, message: str = "") -> None:
        pod["status"]["containerStatuses"][0]["state"] = {"waiting": {"reason": reason, "message": message}}

    def _prepare(self, ns: str, pod: dict[str, Any]) -> tuple[list[str], dict[str, str], str] | str | None:
        meta, spec = pod["metadata"], pod["spec"]
        container = spec["containers"][0]
        root = self.c.workdir / "pods" / meta["name"]
        mounts: dict[str, str] = {}
        volumes = {v["name"]: v for v in spec.get("volumes") or []}
        for mount in container.get("volumeMounts") or []:
            if mount["mountPath"] == "/dev/shm":
                continue  # the host's /dev/shm is fine for a local process
            volume = volumes[mount["name"]]
            target = root / "volumes" / mount["name"]
            if "persistentVolumeClaim" in volume:
                target = self.c.claim_dir(ns, volume["persistentVolumeClaim"]["claimName"])
            elif "configMap" in volume or "projected" in volume:
                # a projected volume: every ConfigMap source laid out in the one directory
                sources = [s["configMap"] for s in volume["projected"]["sources"]] if "projected" in volume \
                    else [volume["configMap"]]
                files: dict[str, bytes] = {}
                for source in sources:
                    configmap = self.c.store.find("configmaps", ns, source["name"])
                    if configmap is None:
                        return None
                    data = {k: v.encode() for k, v in (configmap.get("data") or {}).items()}
                    data.update({k: base64.b64decode(v) for k, v in (configmap.get("binaryData") or {}).items()})
                    items = source.get("items") or [{"key": k, "path": k} for k in data]
                    if any(item["key"] not in data for item in items):
                        return None  # the kubelet retries the mount (FailedMount) until the keys exist
                    files.update({item["path"]: data[item["key"]] for item in items})
                target.mkdir(parents=True, exist_ok=True)
                for rel, content in files.items():
                    path = target / rel
                    path.parent.mkdir(parents=True, exist_ok=True)
                    path.write_bytes(content)
            else:
                target.mkdir(parents=True, exist_ok=True)
            mounts[mount["mountPath"]] = str(target)
        env: dict[str, str] = {}
        annotations = meta.get("annotations") or {}
        for item in container.get("env") or []:
            if "value" in item:
                env[item["name"]] = expand(item["value"], env)
                continue
            source = item.get("valueFrom") or {}
            if "fieldRef" in source:
                path = source["fieldRef"]["fieldPath"]
                found = re.match(r"metadata\.(annotations|labels)\['(.+)'\]", path)
                if found:
                    env[item["name"]] = str((meta.get(found.group(1)) or {}).get(found.group(2), ""))
                else:
                    env[item["name"]] = str(meta.get(path.split(".")[-1], ""))
            elif "secretKeyRef" in source:
                ref = source["secretKeyRef"]
                secret = self._secret(ns, ref["name"])
                if secret is None or ref["key"] not in secret:
                    if ref.get("optional"):
                        continue  # an optional reference that does not resolve leaves the variable unset
                    if secret is None:
                        return f'secret "{ref["name"]}" not found'
                    return f'couldn\'t find key {ref["key"]} in Secret {ns}/{ref["name"]}'
                env[item["name"]] = secret[ref["key"]]
        if "batch.kubernetes.io/job-completion-index" in annotations:
            env["JOB_COMPLETION_INDEX"] = annotations["batch.kubernetes.io/job-completion-index"]
        env["HOSTNAME"] = spec.get("hostname", meta["name"])
        argv = [expand(a, env) for a in (container.get("command") or []) + (container.get("args") or [])]
        # mount paths -> the volumes' local directories; pod DNS names under a headless Service -> 127.0.0.1
        # (the pod's own subdomain too: on a cluster the name resolves once the Service exists, and torch retries).
        # One pass, so a replaced path is never rewritten again (the fake's volumes live under /tmp too).
        label = r"[a-z0-9](?:[-a-z0-9]*[a-z0-9])?"
        hosts = [rf"{label}\.{re.escape(svc)}(?:\.{re.escape(ns)}(?:\.svc(?:\.cluster\.local)?)?)?"
                 for svc in sorted(set(self._headless_services(ns)) | {spec.get("subdomain") or ""} - {""})]
        paths = [re.escape(m) for m in sorted(mounts, key=len, reverse=True)]
        # The image is this host's Python installation: paths inside it (a venv under /tmp, say) belong to the
        # image, not to a volume mounted over /tmp, so they are matched first and kept as they are.
        image = [re.escape(p) for p in sorted(_image_roots(), key=len, reverse=True)]
        parts = ([f"(?P<image>(?:{'|'.join(image)})(?:/[^\\s:]*)?)"] if paths else []) \
            + ([f"(?P<path>{'|'.join(paths)})"] if paths else []) + ([f"(?P<host>{'|'.join(hosts)})"] if hosts else [])
        pattern = re.compile(rf"(?<![\w/.-])(?:{'|'.join(parts)})(?![\w-])") if parts else None

        def replace(match: re.Match[str]) -> str:
            found = match.groupdict()
            if found.get("image"):
                return match.group(0)
            return mounts[match.group("path")] if found.get("path") else "127.0.0.1"

        def rewrite(text: str) -> str:
            return text if pattern is None else pattern.sub(replace, text)

        argv = [rewrite(a) for a in argv]
        env = {k: rewrite(v) for k, v in env.items()}
        cwd = rewrite(container.get("workingDir") or str(root))
        return argv, env, cwd

    def _secret(self, ns: str, name: str) -> dict[str, str] | None:
        """A Secret's decoded data: the object created through the API, else one preset in ``secrets``."""
        obj = self.c.store.find("secrets", ns, name)
        if obj is None:
            return self.c.secrets.get((ns, name))
        data = {k: base64.b64decode(v).decode("utf-8", "replace") for k, v in (obj.get("data") or {}).items()}
        data.update(obj.get("stringData") or {})
        return data

    def _headless_services(self, ns: str) -> list[str]:
        return [svc["metadata"]["name"] for svc in self.c.store.items("services", ns)
                if (svc.get("spec") or {}).get("clusterIP") == "None"]

    def _run(self, ns: str, pod: dict[str, Any], argv: list[str], env: dict[str, str], cwd: str) -> None:
        uid, name = pod["metadata"]["uid"], pod["metadata"]["name"]
        runtime = self.c.runtimes[uid] = PodRuntime(uid, self.c.log_keep_lines)
        full_env = {**self.c.base_env, **env, POD_MARKER: uid}
        lacks = self.c.image_lacks.get(str(pod["spec"]["containers"][0].get("image", "")))
        if lacks:  # the "image" is this host's Python: hide the packages the image would not have
            full_env["PYTHONPATH"] = os.pathsep.join([str(_hider()), *filter(None, [full_env.get("PYTHONPATH")])])
            full_env["FAKE_IMAGE_LACKS"] = ",".join(sorted(lacks))
        Path(cwd).mkdir(parents=True, exist_ok=True)
        try:
            runtime.process = subprocess.Popen(argv, env=full_env, cwd=cwd, stdin=subprocess.DEVNULL,
                                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
        except OSError as error:
            # restartPolicy Never: a container that cannot start fails the pod (StartError, exit 128), as a kubelet
            # does; it never waits forever. The container was created, so its log exists and is empty (a kubelet
            # serves it, 200 with no lines: `kubectl logs` shows nothing), rather than "waiting to start" forever.
            with runtime.cond:
                runtime.started = runtime.done = True
                runtime.cond.notify_all()
            self._pod_update(ns, name, functools.partial(_start_error, message=str(error)))
            self.c._wake.set()
            return
        started = now_rfc3339()
        runtime.started = True

        def running(p: dict[str, Any]) -> None:
            p["status"].update(phase="Running", podIP="127.0.0.1", hostIP="127.0.0.1", startTime=started)
            p["status"]["containerStatuses"][0].update(ready=True, state={"running": {"startedAt": started}})
        self._pod_update(ns, name, running)
        runtime.pump()
        code = runtime.exit_code if runtime.exit_code is not None else 1
        code = 128 - code if code < 0 else code  # a signal shows as 128+n, as in a container

        def terminated(p: dict[str, Any]) -> None:
            p["status"]["phase"] = "Succeeded" if code == 0 else "Failed"
            p["status"]["containerStatuses"][0].update(ready=False, state={"terminated": {
                "exitCode": code, "reason": "Completed" if code == 0 else "Error",
                "startedAt": started, "finishedAt": now_rfc3339()}})
        self._pod_update(ns, name, terminated)
        self.c._wake.set()


_HIDER = """import os, sys
class _Lacks:
    names = set(os.environ.get("FAKE_IMAGE_LACKS", "").split(","))
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in self.names:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None
sys.meta_path.insert(0, _Lacks())
"""


@functools.cache
def _hider() -> Path:
    """A directory whose sitecustomize.py makes the packages in FAKE_IMAGE_LACKS unimportable, as in an image
    that does not have them (the pod's Python is this host's)."""
    import atexit
    import shutil
    import tempfile

    root = Path(tempfile.mkdtemp(prefix="fake-image-"))
    atexit.register(shutil.rmtree, root, True)  # one per test process; removed when it ends (ignore_errors)
    (root / "sitecustomize.py").write_text(_HIDER)
    return root


def _image_roots() -> set[str]:
    """Where the fake's "image" (this host's Python and its packages) lives."""
    return {p for p in {sys.prefix, sys.base_prefix, sys.exec_prefix, os.path.dirname(os.path.realpath(sys.executable))}
            if p and p != "/"}


def _start_error(pod: dict[str, Any], message: str) -> None:
    now = now_rfc3339()
    pod["status"]["phase"] = "Failed"
    pod["status"]["containerStatuses"][0].update(ready=False, state={"terminated": {
        "exitCode": 128, "reason": "StartError", "message": message, "startedAt": now, "finishedAt": now}})


def _unschedulable(pod: dict[str, Any], message: str) -> None:
    pod["status"]["conditions"] = [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                                    "message": message}]
