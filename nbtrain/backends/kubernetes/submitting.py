"""What ``KubernetesBackend.submit`` does on the cluster, in order (the only I/O of a submit besides the store).

1. :func:`check_local_queue`: with ``--queue``, the Kueue LocalQueue must exist first (else the Job would wait,
   suspended, forever);
2. :func:`apply_objects`: create the workload, then what it owns (ownerReferences from its uid; the event-key
   Secret with the key in its data); if an owned object cannot be created, the workload is deleted again (its owned
   objects go with it) and the error raised;
3. :func:`read_event_key`: the key of an attempt from the store, else from its Secret (attach from another machine).

Secrets go through KubeApi (the one I/O module) like every object; an error message never carries the key.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from nbtrain.backends.kubernetes import manifests as mf
from nbtrain.backends.kubernetes.api import KubeApi
from nbtrain.backends.kubernetes.errors import KubeApiError, KubeSpecError
from nbtrain.backends.kubernetes.files import KEY_FILE, AttemptFiles
from nbtrain.backends.kubernetes.pod import EVENT_KEY_FIELD
from nbtrain.backends.kubernetes.request import KubernetesRequest
from nbtrain.errors import NbtrainError
from nbtrain.events import decode_event_key, encode_event_key

__all__ = ["apply_objects", "check_local_queue", "forget_key", "read_event_key"]


def apply_objects(api: KubeApi, request: KubernetesRequest, key: bytes | None, *,
                  dry_run: bool) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Create ``request``'s workload, then the objects it owns; returns the created workload and what was applied
    (the Secret without its data). ``key``: the attempt's event key (None with ``dry_run``: a server-side dry run
    with strict field validation). On an error the workload is deleted again (not in a dry run) and the error
    raised, without the key in its message."""
    namespace = request.namespace
    objects = request.objects
    created = api.create(objects[0], namespace, dry_run=dry_run)
    owner = {**created, "apiVersion": objects[0]["apiVersion"], "kind": objects[0]["kind"]}
    owner.setdefault("metadata", {}).setdefault("uid", "dry-run")
    applied = [objects[0]]
    try:
        for obj in objects[1:]:
            owned = mf.owned_by(obj, owner)
            if owned["kind"] == "Secret":
                _create_secret(api, mf.with_event_key(owned, key) if key is not None else owned, namespace,
                               dry_run=dry_run, key=key)
            else:
                api.create(owned, namespace, dry_run=dry_run)
            applied.append(mf.redacted(owned))
    except NbtrainError:
        if not dry_run:
            try:
                api.delete(request.kind, request.name, namespace)
            except NbtrainError:
                pass  # the original error is the one to report
        raise
    return owner, applied


def read_event_key(api: KubeApi, files: AttemptFiles, *, run_id: str, secret: str | None, namespace: str) -> bytes:
    """The event key of the attempt in ``files``: from the store, else from its Secret ``secret`` (then kept in the
    store). Raises NbtrainError saying why when neither has it (a run submitted before event keys existed, or a
    Secret that went with its workload while no process followed the run)."""
    key = files.read_key()
    if key is not None:
        return key
    if not secret:
        raise NbtrainError(f"run {run_id} was submitted without an event key (by an older nbtrain)")
    found = api.get("Secret", secret, namespace)
    if found is None:
        raise NbtrainError(
            f"{files.root / KEY_FILE} is missing and Secret {secret} in namespace {namespace} no longer exists "
            "(it is deleted with the workload)")
    try:
        key = decode_event_key(base64.b64decode((found.get("data") or {}).get(EVENT_KEY_FIELD) or ""))
    except (binascii.Error, ValueError):
        key = None
    if key is None:
        raise NbtrainError(f"Secret {secret} in namespace {namespace} has no valid {EVENT_KEY_FIELD!r}")
    files.write_key(key)
    return key


def forget_key(root: Path, key: bytes | None) -> None:
    """Remove the key file of a submit that failed (nothing on the cluster uses it)."""
    if key is not None:
        (root / KEY_FILE).unlink(missing_ok=True)


def _create_secret(api: KubeApi, obj: Mapping[str, Any], namespace: str, *, dry_run: bool, key: bytes | None) -> None:
    """Create the event-key Secret ``obj`` (``dry_run``: server-side, strict)."""
    try:
        api.create(dict(obj), namespace, dry_run=dry_run)
    except NbtrainError as error:
        if key is None:
            raise
        raise _without_key(error, key) from None


def _without_key(error: NbtrainError, key: bytes) -> NbtrainError:
    """``error`` with every form of ``key`` in its message replaced (the API may echo a request body)."""
    secret = encode_event_key(key)
    text = str(error)
    for form in (secret, base64.b64encode(secret.encode("ascii")).decode("ascii")):
        text = text.replace(form, "<event key>")
    clean = type(error).__new__(type(error))
    clean.__dict__.update(error.__dict__)
    clean.args = (text,)
    return clean


def check_local_queue(api: KubeApi, queue: str, namespace: str) -> None:
    """Refuse ``--queue`` naming no Kueue LocalQueue in ``namespace`` (or a cluster without Kueue): Kueue ignores
    such a Job, which would stay suspended, "waiting for Kueue", until someone deletes it. A notebook identity
    that may not read LocalQueues cannot check: the run goes ahead (the shipped Role allows it)."""
    try:
        if api.get("LocalQueue", queue, namespace) is not None:
            return
        names = sorted(str(q["metadata"]["name"]) for q in api.list_items("LocalQueue", namespace)[0])
    except KubeApiError as error:
        if error.status == 403:
            return
        if error.status == 404:
            raise KubeSpecError(
                f"--queue {queue}: this cluster has no Kueue (no localqueues.kueue.x-k8s.io resource), so the Job "
                "would stay suspended forever; nothing was submitted. Drop --queue, or install Kueue and create a "
                f"LocalQueue {queue!r} in namespace {namespace!r}.", 404) from None
        raise
    there = ", ".join(names) if names else "none"
    raise KubeSpecError(
        f"--queue {queue}: there is no Kueue LocalQueue {queue!r} in namespace {namespace!r} (LocalQueues there: "
        f"{there}), so Kueue would never admit the Job and it would wait, suspended, forever; nothing was submitted. "
        f"Use one of those queues, ask your platform team for a LocalQueue {queue!r} in {namespace!r} (pointing at a "
        "ClusterQueue), or drop --queue to run without Kueue.", 404)
