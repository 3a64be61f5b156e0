"""``--pod-template FILE``: a PodTemplateSpec fragment merged into every pod of every flavor (pure, but for
:func:`read_pod_template`, which reads the file).

The merge is Kubernetes' strategic merge patch (what ``kubectl patch --type strategic`` does) for a PodTemplateSpec:

- maps merge key by key, recursively; a ``null`` value removes the key; scalars and every other list are replaced;
- the lists Kubernetes gives a ``patchMergeKey`` merge item by item on that key (:data:`MERGE_KEYS`): containers,
  initContainers and ephemeralContainers by ``name``, and in them ``env`` by ``name``, ``ports`` by
  ``containerPort``, ``volumeMounts`` by ``mountPath``, ``volumeDevices`` by ``devicePath``; the pod's ``volumes``,
  ``imagePullSecrets``, ``resourceClaims`` and ``schedulingGates`` by ``name``, ``hostAliases`` by ``ip`` and
  ``topologySpreadConstraints`` by ``topologyKey``. ``tolerations`` has no merge key in Kubernetes (a template's
  list would replace the ``--toleration`` ones): they are ``--toleration``'s alone;
- the directives ``$patch: delete`` (on an item of a keyed list: remove that item) and ``$patch: replace`` (on a map:
  it replaces instead of merging; as an item of a keyed list: the other items replace the list).

In the file, the container named ``trainer`` is nbtrain's own container whatever the flavor (the PyTorchJob flavor
names it ``pytorch``, as the training operator requires).

What the file may not do (:func:`check_override`, each refusal names the field): change the trainer container's
``command``, ``args``, ``image``, ``workingDir`` or ``lifecycle`` hooks, or an env var, volume mount or port nbtrain set; add a second
regular container (the Job would never end: a sidecar is an initContainer with ``restartPolicy: Always``); change or
remove nbtrain's volumes, labels or annotations, ``restartPolicy``, ``subdomain`` or ``hostname``; change the GPU
request (``--gpus``) or a field an option sets (``serviceAccountName``, ``priorityClassName``, ``nodeSelector``,
``tolerations``: a profile may lock those options, and the template is no way around a lock), or
``automountServiceAccountToken``; set metadata other than labels and annotations; break the restricted Pod Security profile
(:func:`restricted_violations`, checked on the merged pod); or carry a secret in plain text (an env var or any
other value that looks like one, as ``--env`` is refused: :mod:`nbtrain.secrets`), unless ``--allow-secrets``.
The merged template must then fit the API's schema (:func:`schema_problems`: a misspelt field, a number given as text).
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from nbtrain.backends.kubernetes.validate import label_key_ok, label_value_ok
from nbtrain.errors import SpecError
from nbtrain.secrets import looks_secret, looks_secret_value

__all__ = ["MERGE_KEYS", "PodOverride", "apply_override", "check_override", "read_pod_template",
           "restricted_violations", "schema_problems", "strategic_merge"]

_CONTAINER_LISTS = ("containers", "initContainers", "ephemeralContainers")
_CONTAINER_KEYS = {"env": "name", "ports": "containerPort", "volumeMounts": "mountPath", "volumeDevices": "devicePath"}

#: Kubernetes' patchMergeKey of each keyed list of a PodTemplateSpec, by its path ("[]": any item of a list).
MERGE_KEYS: Mapping[tuple[str, ...], str] = {
    ("spec", "volumes"): "name",
    ("spec", "imagePullSecrets"): "name",
    ("spec", "hostAliases"): "ip",
    ("spec", "topologySpreadConstraints"): "topologyKey",
    ("spec", "resourceClaims"): "name",
    ("spec", "schedulingGates"): "name",
    **{("spec", lst): "name" for lst in _CONTAINER_LISTS},
    **{("spec", lst, "[]", field): key for lst in _CONTAINER_LISTS for field, key in _CONTAINER_KEYS.items()},
}

_TRAINER_ALIAS = "trainer"
_RESTRICTED_VOLUMES = frozenset({"configMap", "csi", "downwardAPI", "emptyDir", "ephemeral", "persistentVolumeClaim",
                                 "projected", "secret"})
_SAFE_SYSCTLS = frozenset({
    "kernel.shm_rmid_forced", "net.ipv4.ip_local_port_range", "net.ipv4.ip_unprivileged_port_start",
    "net.ipv4.tcp_syncookies", "net.ipv4.ping_group_range", "net.ipv4.ip_local_reserved_ports",
    "net.ipv4.tcp_keepalive_time", "net.ipv4.tcp_fin_timeout", "net.ipv4.tcp_keepalive_intvl",
    "net.ipv4.tcp_keepalive_probes"})
_OWN_POD_FIELDS = {"restartPolicy": "a failed rank must fail the gang, not restart in place",
                   "subdomain": "the pods find rank 0 through it", "hostname": "the pods find rank 0 through it"}
_OWN_CONTAINER_FIELDS = {"command": "nbtrain's preflight", "args": "nbtrain's accelerate launch",
                         "image": "set it with --image", "workingDir": "the writable /tmp the runtime expects",
                         "lifecycle": "the trainer runs nbtrain's command only (a postStart/preStop hook would run "
                                      "another one nbtrain neither starts nor sees)"}
# Pod fields an nbtrain option sets (a profile may lock it): the template may not set them another way.
_FLAG_POD_FIELDS = {"serviceAccountName": "--service-account", "priorityClassName": "--priority-class",
                    "nodeSelector": "--node-selector", "tolerations": "--toleration",
                    "automountServiceAccountToken": "nbtrain (training pods get no API token)"}
_SELINUX_TYPES = frozenset({"", "container_t", "container_init_t", "container_kvm_t", "container_engine_t"})
_APPARMOR_KEY = "container.apparmor.security.beta.kubernetes.io/"


@dataclass(frozen=True)
class PodOverride:
    """A ``--pod-template`` file as read: its path (as given) and its PodTemplateSpec fragment."""

    path: str
    fragment: Mapping[str, Any]


def read_pod_template(path: str) -> PodOverride:
    """The fragment in ``path`` (YAML, one document: a mapping with ``metadata`` and/or ``spec``).

    SpecError naming the file when it cannot be read, is not YAML, or is not a PodTemplateSpec fragment.
    """
    where = f"--pod-template {path}"
    try:
        text = Path(path).expanduser().read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise SpecError(f"{where}: cannot read the file ({error.__class__.__name__}: {error}); give the path of a YAML "
                        "file, relative to the notebook's directory or absolute.") from None
    try:
        docs = [d for d in yaml.safe_load_all(text) if d is not None]
    except yaml.YAMLError as error:
        raise SpecError(f"{where}: not valid YAML ({error}).") from None
    if len(docs) != 1 or not isinstance(docs[0], dict):
        raise SpecError(f"{where}: expected one YAML mapping, a PodTemplateSpec fragment (metadata: and spec:), found "
                        f"{len(docs)} document(s).")
    fragment = docs[0]
    if {"apiVersion", "kind", "template"} & set(fragment):
        raise SpecError(f"{where}: give the pod template itself (its metadata: and spec:), not a whole object "
                        f"({', '.join(sorted({'apiVersion', 'kind', 'template'} & set(fragment)))} found).")
    unknown = sorted(str(k) for k in set(fragment) - {"metadata", "spec"})
    if unknown:
        raise SpecError(f"{where}: {', '.join(unknown)} is not part of a PodTemplateSpec; the file has metadata: "
                        "(labels, annotations) and spec: (a PodSpec) only.")
    for key in ("metadata", "spec"):
        if fragment.get(key) is not None and not isinstance(fragment[key], dict):
            raise SpecError(f"{where}: {key} must be a mapping.")
    return PodOverride(path, fragment)


# -- the merge ----------------------------------------------------------------------------------------------------

def strategic_merge(base: Any, patch: Any, path: tuple[str, ...] = ()) -> Any:
    """``base`` patched with ``patch`` by Kubernetes' strategic-merge rules for a PodTemplateSpec (see the module
    docstring); ``path`` is where both sit in the PodTemplateSpec. Neither argument is changed."""
    if isinstance(patch, dict):
        if patch.get("$patch") == "replace":
            return _clean(patch)
        if not isinstance(base, dict):
            return _clean(patch)
        out = copy.deepcopy(base)
        for key, value in patch.items():
            if isinstance(key, str) and key.startswith("$"):
                _directive(key, value, path)
                continue
            if value is None:
                out.pop(key, None)
            elif key in out:
                out[key] = strategic_merge(out[key], value, (*path, key))
            else:
                out[key] = _clean(value)
        return out
    if isinstance(patch, list) and path in MERGE_KEYS:
        return _merge_list(base if isinstance(base, list) else [], patch, MERGE_KEYS[path], path)
    return _clean(patch)


def _directive(key: str, value: Any, path: tuple[str, ...]) -> None:
    if key != "$patch" or value not in ("replace", "merge", "delete"):
        raise SpecError(f"--pod-template: {_shown(path)}: {key}: {value!r} is not a strategic-merge directive nbtrain "
                        "supports ($patch: replace, or $patch: delete on an item of a keyed list).")
    if value == "delete":
        raise SpecError(f"--pod-template: {_shown(path)}: $patch: delete applies to an item of a keyed list (a "
                        "container, volume, env var...), not to a map.")


def _merge_list(base: list[Any], patch: list[Any], key: str, path: tuple[str, ...]) -> list[Any]:
    items = [p for p in patch if not (isinstance(p, dict) and p.get("$patch") == "replace" and len(p) == 1)]
    out = [] if len(items) < len(patch) else copy.deepcopy(base)
    for item in items:
        if not isinstance(item, dict) or item.get(key) is None:
            raise SpecError(f"--pod-template: each item of {_shown(path)} needs its {key} (Kubernetes merges that list "
                            f"by {key}); got {item!r}.")
        found = next((i for i, old in enumerate(out) if isinstance(old, dict) and old.get(key) == item[key]), None)
        if item.get("$patch") == "delete":
            if found is not None:
                del out[found]
            continue
        if found is None:
            out.append(_clean(item))
        else:
            out[found] = strategic_merge(out[found], item, (*path, "[]"))
    return out


def _clean(value: Any) -> Any:
    """``value`` without directives or nulls (what the API server stores of a new field)."""
    if isinstance(value, dict):
        return {k: _clean(v) for k, v in value.items() if not str(k).startswith("$") and v is not None}
    if isinstance(value, list):
        return [_clean(v) for v in value]
    return value


def _shown(path: tuple[str, ...]) -> str:
    return ".".join(p for p in path if p != "[]") or "the template"


# -- the contract ---------------------------------------------------------------------------------------------------

def _by(items: Any, key: str) -> dict[Any, Any]:
    return {i.get(key): i for i in items or () if isinstance(i, dict)}


def _with_trainer(fragment: Mapping[str, Any], trainer: str) -> dict[str, Any]:
    """``fragment`` with its ``trainer`` container renamed to the flavor's own name for it."""
    out = copy.deepcopy(dict(fragment))
    for container in (out.get("spec") or {}).get("containers") or ():
        if isinstance(container, dict) and container.get("name") == _TRAINER_ALIAS:
            container["name"] = trainer
    return out


def apply_override(template: Mapping[str, Any], override: PodOverride, *, trainer: str, gpu_resource: str,
                   allow_secrets: bool = False) -> dict[str, Any]:
    """``template`` (nbtrain's PodTemplateSpec) merged with ``override``; SpecError naming the field and the file for
    what :func:`check_override` refuses."""
    fragment = _with_trainer(override.fragment, trainer)
    try:
        merged = strategic_merge(dict(template), fragment)
    except SpecError as error:
        raise SpecError(str(error).replace("--pod-template:", f"--pod-template {override.path}:", 1)) from None
    problems = check_override(template, fragment, merged, trainer=trainer, gpu_resource=gpu_resource,
                              allow_secrets=allow_secrets) or schema_problems(merged)
    if problems:
        raise SpecError(f"--pod-template {override.path}: " + ("\n  ".join(["refused:", *problems])
                                                               if len(problems) > 1 else problems[0]))
    return merged


def schema_problems(template: Mapping[str, Any]) -> list[str]:
    """Where the PodTemplateSpec ``template`` breaks the Kubernetes API's schema (unknown fields, wrong types), one
    message per field, from the kubernetes client's own models (client >= 35, pydantic; an older client: none)."""
    try:
        from kubernetes import client
    except ImportError:  # pragma: no cover - a dependency of nbtrain
        return []
    validate = getattr(getattr(client, "V1PodTemplateSpec", None), "model_validate", None)
    if validate is None:
        return []
    try:
        validate(dict(template))
    except Exception as error:  # pydantic's ValidationError (pydantic is the client's dependency, not nbtrain's)
        errors = getattr(error, "errors", None)
        if not callable(errors):
            raise
        return [f"{_location(e.get('loc', ()))}: {e.get('msg', 'invalid')} (the Kubernetes API's PodTemplateSpec "
                "schema)" for e in errors()]
    return []


def _location(loc: Any) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else f".{part}"
    return out.lstrip(".")


def check_override(template: Mapping[str, Any], fragment: Mapping[str, Any], merged: Mapping[str, Any], *,
                   trainer: str, gpu_resource: str, allow_secrets: bool = False) -> list[str]:
    """What ``fragment`` breaks of nbtrain's pod ``template`` (``merged``: both merged), one message per field."""
    problems: list[str] = []
    meta = fragment.get("metadata") or {}
    for key in sorted(str(k) for k in set(meta) - {"labels", "annotations"}):
        problems.append(f"metadata.{key}: nbtrain names and places the pods; a template sets only metadata.labels "
                        "and metadata.annotations.")
    for kind in ("labels", "annotations"):
        for key, value in (meta.get(kind) or {}).items():
            own = key in ((template.get("metadata") or {}).get(kind) or {})
            if own or str(key).startswith(("nbtrain.dev/", "kueue.x-k8s.io/")) or key == "app.kubernetes.io/managed-by":
                problems.append(f"metadata.{kind}.{key}: nbtrain, Kueue or --{kind[:-1]} sets it; use another key.")
            elif not isinstance(value, str):
                problems.append(f"metadata.{kind}.{key}: {value!r} must be a string (quote it in YAML).")
            elif not label_key_ok(str(key)) or (kind == "labels" and not label_value_ok(value)):
                problems.append(f"metadata.{kind}.{key}: not a valid {kind[:-1]} (a key is an optional DNS prefix and "
                                "'/', then at most 63 letters, digits, '-', '_' or '.'; a label value at most 63 of "
                                "those, beginning and ending with a letter or digit).")
    for kind in ("labels", "annotations"):  # a null map or key removes them: check what the merge left
        kept = (merged.get("metadata") or {}).get(kind) or {}
        for key, value in ((template.get("metadata") or {}).get(kind) or {}).items():
            if kept.get(key) != value and not any(f"metadata.{kind}.{key}:" in p for p in problems):
                problems.append(f"metadata.{kind}.{key}: set by nbtrain, Kueue or --{kind[:-1]}; the template may not "
                                "change or remove it.")
    for key, value in ((merged.get("metadata") or {}).get("annotations") or {}).items():
        if str(key).startswith(_APPARMOR_KEY) and not (value == "runtime/default" or str(value).startswith("localhost/")):
            problems.append(f"metadata.annotations.{key}: {value!r} must be runtime/default or localhost/PROFILE (the "
                            "restricted Pod Security profile).")
    spec, new_spec = template.get("spec") or {}, merged.get("spec") or {}
    for field, why in _OWN_POD_FIELDS.items():
        if spec.get(field) != new_spec.get(field):
            problems.append(f"spec.{field}: nbtrain sets it ({why}); the template may not change it.")
    for field, flag in _FLAG_POD_FIELDS.items():
        if spec.get(field) != new_spec.get(field):
            problems.append(f"spec.{field}: set by {flag}" + (" (a profile may lock it); use that option"
                                                               if flag.startswith("--") else "")
                            + ", not the template.")
    new_volumes = _by(new_spec.get("volumes"), "name")
    for name, volume in _by(spec.get("volumes"), "name").items():
        if new_volumes.get(name) != volume:
            problems.append(f"spec.volumes[name={name}]: nbtrain's own volume; the template may not change or remove "
                            "it (add volumes under other names).")
    if ((new_spec.get("securityContext") or {}).get("runAsNonRoot")) is not True:
        problems.append("spec.securityContext.runAsNonRoot: nbtrain's pods run as non-root; the template may not "
                        "change it.")
    new_inits = _by(new_spec.get("initContainers"), "name")
    for name, init in _by(spec.get("initContainers"), "name").items():
        if new_inits.get(name) != init:
            problems.append(f"spec.initContainers[name={name}]: nbtrain's own init container; the template may not "
                            "change or remove it (add init containers under other names).")
    problems += _check_containers(spec, new_spec, trainer=trainer, gpu_resource=gpu_resource)
    problems += restricted_violations(new_spec)
    if not allow_secrets:
        problems += _secrets(fragment)
    return problems


def _check_containers(spec: Mapping[str, Any], new_spec: Mapping[str, Any], *, trainer: str,
                      gpu_resource: str) -> list[str]:
    problems = []
    containers = _by(new_spec.get("containers"), "name")
    for name in containers:
        if name != trainer:
            problems.append(f"spec.containers[name={name}]: a second container would keep every pod (and the Job) "
                            "running after training ends; run a sidecar as an initContainer with restartPolicy: Always "
                            f"(Kubernetes >= 1.29), and name nbtrain's container {_TRAINER_ALIAS}.")
    old, new = _by(spec.get("containers"), "name")[trainer], containers.get(trainer, {})
    where = f"spec.containers[name={_TRAINER_ALIAS}]"
    for field, why in _OWN_CONTAINER_FIELDS.items():
        if old.get(field) != new.get(field):
            problems.append(f"{where}.{field}: {why}; the template may not change it.")
    for field, key in _CONTAINER_KEYS.items():
        items = _by(new.get(field), key)
        for value, item in _by(old.get(field), key).items():
            if items.get(value) != item:
                problems.append(f"{where}.{field}[{key}={value}]: set by nbtrain (or by --env/--secret-env/--volume); "
                                "change it with those flags, not the template.")
    for part in ("limits", "requests"):
        before = ((old.get("resources") or {}).get(part) or {}).get(gpu_resource)
        if before != ((new.get("resources") or {}).get(part) or {}).get(gpu_resource):
            problems.append(f"{where}.resources.{part}.{gpu_resource}: the GPUs per pod are --gpus; change them there.")
    return problems


def _check_security(where: str, security: Mapping[str, Any], pod: Mapping[str, Any]) -> list[str]:
    """The restricted profile's rules that a container's securityContext (with its pod's) must meet."""
    rule = "(the restricted Pod Security profile)"
    problems = []
    if security.get("privileged"):
        problems.append(f"{where}.securityContext.privileged must not be true {rule}.")
    if security.get("allowPrivilegeEscalation") is not False:
        problems.append(f"{where}.securityContext.allowPrivilegeEscalation must be false {rule}.")
    caps = security.get("capabilities") or {}
    if "ALL" not in (caps.get("drop") or ()):
        problems.append(f"{where}.securityContext.capabilities.drop must include ALL {rule}.")
    added = [c for c in caps.get("add") or () if c != "NET_BIND_SERVICE"]
    if added:
        problems.append(f"{where}.securityContext.capabilities.add: {', '.join(map(str, added))} {rule} allows only "
                        "NET_BIND_SERVICE.")
    non_root = security.get("runAsNonRoot", pod.get("runAsNonRoot"))
    if non_root is not True:
        problems.append(f"{where}.securityContext.runAsNonRoot must be true (here or in the pod's) {rule}.")
    if security.get("runAsUser") == 0:
        problems.append(f"{where}.securityContext.runAsUser must not be 0 {rule}.")
    seccomp = (security.get("seccompProfile") or pod.get("seccompProfile") or {}).get("type")
    if seccomp not in ("RuntimeDefault", "Localhost"):
        problems.append(f"{where}.securityContext.seccompProfile.type must be RuntimeDefault or Localhost (here or in "
                        f"the pod's) {rule}.")
    if security.get("procMount") not in (None, "Default"):
        problems.append(f"{where}.securityContext.procMount must be Default {rule}.")
    if (security.get("windowsOptions") or {}).get("hostProcess"):
        problems.append(f"{where}.securityContext.windowsOptions.hostProcess must not be true {rule}.")
    if (security.get("appArmorProfile") or {}).get("type") == "Unconfined":
        problems.append(f"{where}.securityContext.appArmorProfile.type must not be Unconfined {rule}.")
    return problems + _selinux(f"{where}.securityContext", security)


def _selinux(where: str, security: Mapping[str, Any]) -> list[str]:
    """The restricted profile's SELinux rule: a container type of its own family, no user or role."""
    options = security.get("seLinuxOptions") or {}
    problems = []
    if options.get("type", "") not in _SELINUX_TYPES:
        problems.append(f"{where}.seLinuxOptions.type: {options.get('type')!r} must be one of "
                        f"{', '.join(sorted(t for t in _SELINUX_TYPES if t))} (the restricted Pod Security profile).")
    for key in ("user", "role"):
        if options.get(key):
            problems.append(f"{where}.seLinuxOptions.{key} must not be set (the restricted Pod Security profile).")
    return problems


def restricted_violations(pod: Mapping[str, Any]) -> list[str]:
    """Where the PodSpec ``pod`` breaks the restricted Pod Security profile, one message per field (empty: none)."""
    rule = "(the restricted Pod Security profile)"
    problems = []
    for field in ("hostNetwork", "hostPID", "hostIPC"):
        if pod.get(field):
            problems.append(f"spec.{field} must not be true {rule}.")
    security = pod.get("securityContext") or {}
    if security.get("runAsUser") == 0:
        problems.append(f"spec.securityContext.runAsUser must not be 0 {rule}.")
    for sysctl in security.get("sysctls") or ():
        if isinstance(sysctl, dict) and sysctl.get("name") not in _SAFE_SYSCTLS:
            problems.append(f"spec.securityContext.sysctls[name={sysctl.get('name')}]: not one of the safe sysctls "
                            f"{rule} allows.")
    if (security.get("appArmorProfile") or {}).get("type") == "Unconfined":
        problems.append(f"spec.securityContext.appArmorProfile.type must not be Unconfined {rule}.")
    if (security.get("windowsOptions") or {}).get("hostProcess"):
        problems.append(f"spec.securityContext.windowsOptions.hostProcess must not be true {rule}.")
    problems += _selinux("spec.securityContext", security)
    for volume in pod.get("volumes") or ():
        kinds = set(volume) - {"name"} if isinstance(volume, dict) else set()
        if kinds - _RESTRICTED_VOLUMES:
            kinds_text = ", ".join(sorted(kinds - _RESTRICTED_VOLUMES))
            problems.append(f"spec.volumes[name={volume.get('name')}]: {kinds_text} volumes are not allowed {rule}; use "
                            "a persistentVolumeClaim, configMap, secret, emptyDir, csi, ephemeral, projected or "
                            "downwardAPI volume.")
    for lst in _CONTAINER_LISTS:
        for container in pod.get(lst) or ():
            if not isinstance(container, dict):
                continue
            where = f"spec.{lst}[name={container.get('name')}]"
            problems += _check_security(where, container.get("securityContext") or {}, security)
            for port in container.get("ports") or ():
                if isinstance(port, dict) and port.get("hostPort"):
                    problems.append(f"{where}.ports[containerPort={port.get('containerPort')}].hostPort must not be "
                                    f"set {rule}.")
    return problems


def _secrets(fragment: Mapping[str, Any]) -> list[str]:
    """Plain-text values of ``fragment`` that look like secrets (they would be in every manifest and plan), by the
    rule ``--env`` is refused by (:func:`nbtrain.secrets.looks_secret`): an env var's value or name, a label's or
    annotation's value or key, and any other value that is a credential whatever its field."""
    problems = []
    for where, name, value in _named_strings(fragment, "", None):
        if looks_secret(name, value) if name is not None else looks_secret_value(value):
            problems.append(f"{where.lstrip('.')}: looks like a secret and would be written in plain text into every "
                            "manifest and --dry-run; take it from a Secret (valueFrom: secretKeyRef, or --secret-env), "
                            "or pass --allow-secrets if it is not secret.")
    return problems


def _named_strings(node: Any, path: str, names: str | None) -> list[tuple[str, str | None, str]]:
    """(path, name, value) of every string of ``node``: an env var's value under its name, a label's or annotation's
    under its key (``names``: the map is of labels or annotations), other values under no name."""
    out: list[tuple[str, str | None, str]] = []
    if isinstance(node, dict):
        env_var = isinstance(node.get("name"), str) and isinstance(node.get("value"), str)
        if env_var:
            out.append((path, node["name"], node["value"]))
        for key, value in node.items():
            if isinstance(value, str) and not (env_var and key == "value"):
                out.append((f"{path}.{key}", str(key) if names else None, value))
            elif isinstance(value, (dict, list)):
                out += _named_strings(value, f"{path}.{key}", key if key in ("labels", "annotations") else None)
    elif isinstance(node, list):
        for index, value in enumerate(node):
            named = isinstance(value, dict) and isinstance(value.get("name"), str)
            out += _named_strings(value, f"{path}[name={value['name']}]" if named else f"{path}[{index}]", None)
    return out
