"""What an MLflow run says about an nbtrain run: experiment name, params, tags, metric keys (pure).

Everything here is a function of the RunRecord, the bundle's manifest and main.py text, so it is
unit-tested without MLflow. The one exception, :func:`git_commit`, runs ``git`` with a short timeout.
"""

from __future__ import annotations

import ast
import enum
import functools
import json
import posixpath
import re
import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from nbtrain.secrets import MASK, looks_secret, shown_env
from nbtrain.spec import JobSpec

__all__ = [
    "DEFAULT_EXPERIMENT",
    "dataset_tags",
    "experiment_name",
    "failure_text",
    "git_commit",
    "literal_params",
    "mlflow_key",
    "parameter_overrides",
    "run_tags",
    "spec_params",
    "worker_tags",
]

DEFAULT_EXPERIMENT = "nbtrain"
MAX_KEY = 250  # MLflow's limit on metric/param/tag names
MAX_PARAM_VALUE = 6000  # MLflow 3's limit on a param value
MAX_TAG_VALUE = 8000
_BAD_KEY_CHARS = re.compile(r"[^/\w.\- :]")
_ARGS, _KWARGS = "_nbtrain_args", "_nbtrain_kwargs"  # function bundles (see nbtrain.bundle.capture)


def experiment_name(spec: JobSpec, notebook: Mapping[str, Any]) -> str:
    """``--experiment`` when given, else the notebook's file name without suffix, else ``nbtrain``."""
    if spec.experiment and spec.experiment.strip():
        return spec.experiment.strip()
    path = notebook.get("path")
    if isinstance(path, str) and path.strip():
        stem = Path(path.strip()).stem
        if stem:
            return stem
    return DEFAULT_EXPERIMENT


@functools.lru_cache(maxsize=4096)  # called per metric point; names repeat
def mlflow_key(name: str) -> str:
    """``name`` as a valid MLflow metric/param/tag name (bad characters become ``_``).

    MLflow accepts letters, digits, ``_ - . / :`` and spaces, and refuses names that look like other
    paths (``a//b``, ``../x``, ``/abs``, a trailing ``/``).
    """
    key = _BAD_KEY_CHARS.sub("_", str(name))
    if posixpath.normpath(key) != key or key.startswith((".", "/")) or key == ".":
        key = _BAD_KEY_CHARS.sub("_", key.replace("/", "_"))
        if key.startswith("."):
            key = "_" + key
    return key[:MAX_KEY] or "_"


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _flatten(prefix: str, value: Any, out: dict[str, str]) -> None:
    if isinstance(value, Mapping):
        for key, item in value.items():
            _flatten(f"{prefix}.{key}", item, out)
    elif isinstance(value, (list, tuple)):
        for index, item in enumerate(value):
            _flatten(f"{prefix}.{index}", item, out)
    else:
        out[mlflow_key(prefix)] = _clip(str(value.value if isinstance(value, enum.Enum) else value), MAX_PARAM_VALUE)


def spec_params(spec: JobSpec) -> dict[str, str]:
    """Every JobSpec field as ``nbtrain.<field>`` (containers flattened: ``nbtrain.env.SEED``).

    Empty containers are left out; ``--env`` values are masked but those the user marked ``--env-public``
    (:func:`nbtrain.secrets.shown_env`: MLflow params are read by whoever reads the experiment, and no secret
    heuristic is complete).
    """
    out: dict[str, str] = {}
    for field, value in spec.to_dict().items():
        if field == "env":
            value = shown_env(value, spec.env_public)
        _flatten(f"nbtrain.{field}", value, out)
    return out


def literal_params(main_source: str, literal_names: list[str]) -> dict[str, str]:
    """The captured literals of a bundle (its main.py "values from the notebook") as params.

    ``literal_names`` are the manifest's ``captured`` entries of kind ``literal``. Each name's first
    top-level assignment in main.py is read with :func:`ast.literal_eval` (strings give their text,
    numbers their repr; containers and ``float('nan')`` keep their source text). For a function
    bundle, the call's keyword arguments become params of their own and positional ones ``args``.
    Secret-looking ones (:func:`nbtrain.secrets.looks_secret`: the name or the value) are masked. Unparseable
    main.py: no params.
    """
    wanted = set(literal_names)
    try:
        tree = ast.parse(main_source)
    except SyntaxError:
        return {}
    found: dict[str, tuple[str, Any]] = {}
    for node in tree.body:
        if not (isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)):
            continue
        name = node.targets[0].id
        if name not in wanted or name in found:
            continue
        text = ast.get_source_segment(main_source, node.value) or ""
        try:
            value: Any = ast.literal_eval(node.value)
        except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
            value = _NOT_LITERAL
        found[name] = (text, value)
    out: dict[str, str] = {}
    for name, (text, value) in found.items():
        if name == _KWARGS and isinstance(value, dict) and all(isinstance(k, str) for k in value):
            for key, item in value.items():
                out[mlflow_key(key)] = _param_text(key, item, repr(item))
        elif name == _ARGS:
            out["args"] = _param_text("args", _NOT_LITERAL, text)
        elif name != _KWARGS:
            out[mlflow_key(name)] = _param_text(name, value, text)
    return out


_NOT_LITERAL = object()


def parameter_overrides(manifest: Mapping[str, Any] | None, env: Mapping[str, str]) -> dict[str, str]:
    """The values a job's parameters run with (``nbtrain submit --param NAME=TEXT`` -> ``NBTRAIN_PARAMS``) as params.

    Only the bundle's declared ``parameters`` (its manifest) count; each overrides the literal main.py assigns
    first (its exported default). Secret-looking ones are masked; unreadable ``NBTRAIN_PARAMS``: none.
    """
    declared = {str(p.get("name")) for p in (manifest or {}).get("parameters") or () if isinstance(p, Mapping)}
    try:
        given = json.loads(env.get("NBTRAIN_PARAMS") or "{}")
    except ValueError:
        return {}
    if not isinstance(given, dict):
        return {}
    return {mlflow_key(name): _param_text(name, text, str(text)) for name, text in given.items()
            if name in declared and isinstance(text, str)}


def config_params(values: Mapping[str, Any]) -> dict[str, str]:
    """``init_trackers(config=...)`` (already flattened by the ranks) as params; secret-looking ones masked."""
    return {mlflow_key(str(name)): _param_text(str(name), value, str(value)) for name, value in values.items()}


def _param_text(name: str, value: Any, text: str) -> str:
    if looks_secret(name, value if isinstance(value, (str, bytes)) else text):
        return MASK
    if isinstance(value, str):
        return _clip(value, MAX_PARAM_VALUE)
    if value is None or isinstance(value, (bool, int, float)):
        return _clip(repr(value), MAX_PARAM_VALUE)
    return _clip(text, MAX_PARAM_VALUE)


def run_tags(
    *,
    run_id: str,
    spec: JobSpec,
    backend: str,
    bundle_digest: str,
    notebook: Mapping[str, Any],
    manifest: Mapping[str, Any] | None,
    commit: str | None,
    user: str | None = None,
) -> dict[str, str]:
    """Tags of a new MLflow run: nbtrain identity, source, versions and gang shape.

    MLflow's own ``mlflow.source.*``/``mlflow.user`` tags are set too, so the MLflow UI shows the
    notebook and its git commit in its usual places. Unknown values are left out (never "None").
    """
    manifest = manifest or {}
    cell = manifest.get("cell") or {}
    versions = manifest.get("versions") or {}
    created_by = str(manifest.get("created_by") or "")
    tags: dict[str, Any] = {
        "nbtrain.run_id": run_id,
        "nbtrain.kind": manifest.get("kind"),
        "nbtrain.function": manifest.get("function"),
        "nbtrain.notebook": notebook.get("path"),
        "nbtrain.cell_id": notebook.get("cell_id"),
        "nbtrain.cell_sha256": cell.get("sha256"),
        "nbtrain.bundle_digest": bundle_digest,
        "nbtrain.git_commit": commit,
        "nbtrain.version": created_by.split(" ", 1)[1] if created_by.startswith("nbtrain ") else None,
        "nbtrain.python": versions.get("python"),
        "nbtrain.torch": versions.get("torch"),
        "nbtrain.accelerate": versions.get("accelerate"),
        "nbtrain.backend": backend,
        "nbtrain.image": spec.image,
        "nbtrain.nodes": spec.nodes,
        "nbtrain.procs": spec.procs,
        "nbtrain.world_size": spec.world_size,
        "mlflow.source.type": "NOTEBOOK",
        "mlflow.source.name": notebook.get("path"),
        "mlflow.source.git.commit": commit,
        "mlflow.user": user,
    }
    return {key: _clip(str(value), MAX_TAG_VALUE) for key, value in tags.items() if value not in (None, "")}


def worker_tags(env: Mapping[str, Any]) -> dict[str, str]:
    """Tags from rank 0's ENV event: what the workers actually ran (``nbtrain.worker.torch``, ...)."""
    keys = ("python", "torch", "accelerate", "device", "gpu_name", "host")
    return {f"nbtrain.worker.{k}": _clip(str(env[k]), MAX_TAG_VALUE) for k in keys if env.get(k) not in (None, "")}


def dataset_tags(data: Mapping[str, Any]) -> dict[str, str]:
    """Tags from a ``dataset`` event (the datasets the run's code resolved through ``dataset://``).

    ``nbtrain.dataset``/``nbtrain.dataset_version``: the first dataset resolved (version left out when it
    has none); ``nbtrain.datasets``: every one so far, ``name@version`` joined by ``,``.
    """
    names = [str(d) for d in data.get("datasets") or () if str(d)]
    if not names:
        return {}
    first, _, version = names[0].partition("@")
    tags = {"nbtrain.dataset": first, "nbtrain.datasets": ",".join(names)}
    if version:
        tags["nbtrain.dataset_version"] = version
    return {key: _clip(value, MAX_TAG_VALUE) for key, value in tags.items()}


def git_commit(notebook: Mapping[str, Any], *, cwd: Path | None = None, timeout_s: float = 2.0) -> str | None:
    """HEAD of the git repository holding the notebook (its directory, else ``cwd``); None if none.

    Bounded by ``timeout_s``; any failure (no git, not a repository, a slow filesystem) gives None.
    """
    base = cwd or Path.cwd()
    directory = base
    path = notebook.get("path")
    if isinstance(path, str) and path:
        candidate = Path(path).expanduser()
        candidate = candidate if candidate.is_absolute() else base / candidate
        if candidate.parent.is_dir():
            directory = candidate.parent
    try:
        out = subprocess.run(
            ["git", "-C", str(directory), "rev-parse", "--verify", "HEAD"],
            capture_output=True, text=True, timeout=timeout_s, check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    commit = out.stdout.strip()
    return commit if out.returncode == 0 and re.fullmatch(r"[0-9a-f]{40,64}", commit) else None


def failure_text(failure: Mapping[str, Any]) -> str:
    """failure.txt: the one-line summary, then the first failing rank's traceback (or its last lines)."""
    from nbtrain.model import Failure

    parsed = Failure.from_dict(failure)
    text = parsed.summary() + "\n"
    if parsed.traceback:
        text += "\nTraceback of the first failing rank:\n" + parsed.traceback.rstrip("\n") + "\n"
    elif parsed.last_lines:
        text += "\nLast lines of the first failing rank:\n" + "\n".join(parsed.last_lines) + "\n"
    return text
