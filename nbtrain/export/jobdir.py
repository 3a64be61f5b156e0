"""The job directory: write one from a bundle, and read one back for ``nbtrain submit``.

Layout::

    train.py          the bundle's main.py (runnable by itself: accelerate launch train.py)
    objects.pkl       only when notebook objects had to be pickled (live export)
    files/...         files attached to the bundle, if any
    manifest.json     the bundle manifest, unchanged (the digest is sha256 of this file)
    nbtrain.toml      the JobSpec and the parameters
    requirements.txt  pinned versions of the distributions the job imports
    README.md         what is here and the exact commands
    k8s/<flavor>.yaml the kubernetes backend's manifests, or k8s/README.md saying why there are none
    job.sbatch        the job as a Slurm batch job that needs no nbtrain (``sbatch job.sbatch``)
    accelerate.yaml   the generated Accelerate config every exported command passes (accelerate-cpu.yaml: CPU)

Reading a directory rebuilds the very bundle that was exported (same files, same manifest, same
digest); a train.py edited after export is refused unless the caller accepts edits, in which case the
manifest's hashes are renewed (a new digest) and the manifest says so.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from nbtrain.bundle.model import Bundle, CapturedName, CaptureKind
from nbtrain.bundle.reader import MANIFEST_NAME
from nbtrain.errors import SpecError
from nbtrain.secrets import looks_secret
from nbtrain.spec import JobSpec

from .accelconfig import export_accelerate_configs
from .manifests import Manifests, kubernetes_manifests
from .parameters import ENV_NAME, Parameter, params_env, text_of
from .readme import job_readme
from .requirements import imported_modules, pickled_modules, requirements
from .sbatch import SBATCH_NAME, export_sbatch_script
from .tomlspec import dump_job_toml, load_job_toml

__all__ = ["Job", "JobFiles", "build_job_files", "load_job", "write_job_dir"]

TOML_NAME = "nbtrain.toml"
PROGRAM = "train.py"
_RENAMES = {"main.py": PROGRAM}  # bundle file -> job directory file


@dataclass(frozen=True)
class JobFiles:
    """Every file of a job directory (relative posix path -> bytes) and facts for the summary."""

    files: Mapping[str, bytes]
    digest: str
    parameters: tuple[Parameter, ...] = ()
    k8s: tuple[str, ...] = ()
    k8s_missing: str | None = None
    notes: tuple[str, ...] = ()


@dataclass(frozen=True)
class Job:
    """A job directory read back: its spec, parameters, bundle and where it came from."""

    path: Path
    spec: JobSpec
    parameters: Mapping[str, Parameter]
    bundle: Bundle
    source: Mapping[str, Any] = field(default_factory=dict)
    edited: bool = False

    @property
    def profile(self) -> str | None:
        """The profile the job's cell used (``"NAME VERSION"``, nbtrain.toml's ``[source] profile``), if any."""
        value = self.source.get("profile")
        return value.strip() if isinstance(value, str) and value.strip() else None

    def with_parameters(self, spec: JobSpec, overrides: Mapping[str, str]) -> JobSpec:
        """``spec`` with ``NBTRAIN_PARAMS`` in its env: nbtrain.toml's defaults, then ``overrides`` (NAME -> TEXT).

        Raises :class:`SpecError` for an unknown parameter or a value its type refuses.
        """
        if not self.parameters and not overrides:
            return spec
        values = {p.name: text_of(p.default) for p in self.parameters.values() if p.default is not None}
        values.update(overrides)
        return spec.with_changes(env={**spec.env, ENV_NAME: params_env(self.parameters, values,
                                                                       allow_secrets=spec.allow_secrets)})


def build_job_files(
    bundle: Bundle,
    spec: JobSpec,
    *,
    parameters: Sequence[Parameter] = (),
    origin: str,
    computed: Sequence[str] = (),
    notes: Sequence[str] = (),
    manifests: Manifests | None = None,
    profile: str | None = None,
) -> JobFiles:
    """Every file of the job directory for ``bundle`` run under ``spec`` (nothing is written).

    ``origin`` says where the job came from (for the README); ``computed`` lists values re-run on the
    workers; ``manifests`` defaults to asking the kubernetes backend for every flavor; ``profile`` is the profile
    the cell used (``"NAME VERSION"``), recorded as ``[source] profile`` so ``nbtrain submit`` holds its locks again.

    A job directory is meant to be shared and versioned, so secret-looking ``--env`` entries
    (:func:`nbtrain.secrets.looks_secret`, even under ``--allow-secrets``) are left out of every file, with a note
    saying how to pass them instead. Left out, not written as ``***``: a masked value would replace the real one
    the ranks inherit from the environment of ``nbtrain submit``.
    """
    spec, left_out = _without_secret_env(spec)
    if left_out:
        notes = [*notes, _left_out_note(left_out)]
    files: dict[str, bytes] = {_RENAMES.get(rel, rel): data for rel, data in bundle.files.items()}
    files[MANIFEST_NAME] = bundle.manifest_bytes

    local = _add_requirements(files, bundle)
    files[TOML_NAME] = dump_job_toml(spec, list(parameters), _source_table(bundle, profile)).encode()
    files[SBATCH_NAME] = export_sbatch_script(spec).encode()
    files.update((name, text.encode()) for name, text in export_accelerate_configs(spec).items())
    manifests = manifests if manifests is not None else kubernetes_manifests(spec, bundle)
    k8s_names, missing_reason = _add_manifests(files, manifests)

    listed = sorted(set(files) | {"README.md"}, key=lambda r: (r != PROGRAM, r))
    files["README.md"] = job_readme(
        name=spec.name,
        spec=spec,
        origin=origin,
        digest=bundle.digest,
        parameters=parameters,
        files=listed,
        k8s=k8s_names,
        k8s_missing=None if manifests.yaml else missing_reason,
        computed=computed,
        local_modules=local,
        notes=notes,
    ).encode()
    return JobFiles(
        files=files,
        digest=bundle.digest,
        parameters=tuple(parameters),
        k8s=tuple(sorted(k8s_names.values())),
        k8s_missing=missing_reason,
        notes=tuple(notes),
    )


def _add_requirements(files: dict[str, bytes], bundle: Bundle) -> list[str]:
    """Write requirements.txt (the pinned distributions the bundle imports) into ``files``; the local modules."""
    modules = imported_modules(bundle.files["main.py"].decode("utf-8"))
    if "objects.pkl" in bundle.files:
        modules |= pickled_modules(bundle.files["objects.pkl"]) | {"cloudpickle"}
    pins, local = requirements(modules)
    files["requirements.txt"] = ("".join(p + "\n" for p in pins)).encode()
    return local


def _source_table(bundle: Bundle, profile: str | None) -> dict[str, Any]:
    """nbtrain.toml's ``[source]``: where the bundle came from and the profile the cell used."""
    notebook = bundle.manifest.get("notebook") or {}
    return {
        "notebook": notebook.get("path"),
        "cell": notebook.get("cell_id"),
        "bundle_digest": bundle.digest,
        "exported_by": bundle.manifest.get("created_by"),
        "profile": profile,
    }


def _add_manifests(files: dict[str, bytes], manifests: Manifests) -> tuple[dict[str, str], str | None]:
    """Write one k8s/FLAVOR.yaml per manifest (and k8s/README.md when some are missing) into ``files``.

    Returns flavor -> file name, and why manifests are missing (None: none is).
    """
    k8s_names: dict[str, str] = {}
    for flavor, text in manifests.yaml.items():
        k8s_names[flavor] = f"k8s/{flavor}.yaml"
        files[k8s_names[flavor]] = text.encode()
    if not manifests.missing:
        return k8s_names, None
    reasons = sorted(set(manifests.missing.values()))
    missing_reason = reasons[0] if len(reasons) == 1 else "; ".join(
        f"{flavor}: {why}" for flavor, why in manifests.missing.items()
    )
    note = "# Kubernetes manifests\n\n"
    if manifests.yaml:
        note += "Some flavors have no manifest here:\n\n" + "".join(
            f"- {flavor}: {why}\n" for flavor, why in manifests.missing.items()
        )
    else:
        note += f"No manifests were written: {missing_reason}\n"
    note += (
        "\nOnce that is fixed, print them with `nbtrain manifests . [--flavor job|pytorchjob|jobset|trainjob]` "
        "(the %%distributed flags, e.g. `--image REGISTRY/IMAGE:TAG`, override nbtrain.toml there).\n"
    )
    files["k8s/README.md"] = note.encode()
    return k8s_names, missing_reason


def _without_secret_env(spec: JobSpec) -> tuple[JobSpec, list[str]]:
    """``spec`` without its secret-looking ``--env`` entries, and their names."""
    left_out = sorted(name for name, value in spec.env.items() if looks_secret(name, value))
    if not left_out:
        return spec, []
    return spec.with_changes(env={k: v for k, v in spec.env.items() if k not in left_out}), left_out


def _left_out_note(names: Sequence[str]) -> str:
    listed = ", ".join(names)
    return (f"--env {listed}: left out of nbtrain.toml and the manifests (looks like a secret). Pass it with "
            f"--secret-env NAME=SECRET/KEY on Kubernetes, or keep it in the environment of `nbtrain submit`, "
            "which the ranks of the local backend inherit.")


def write_job_dir(job: JobFiles, out: Path) -> Path:
    """Write ``job`` to ``out``; return its absolute path. An earlier job directory there is replaced as a whole.

    Refuses (:class:`SpecError`) to overwrite a non-empty directory that is not a job directory, or a file.
    """
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise SpecError(f"-o {out}: a file is in the way; choose a directory path.")
    if out.is_dir() and any(out.iterdir()) and not (out / TOML_NAME).is_file():
        raise SpecError(
            f"-o {out}: the directory exists and is not an nbtrain job directory (no {TOML_NAME}); "
            "choose a new or empty directory."
        )
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    try:
        for rel, data in job.files.items():
            if PurePosixPath(rel).is_absolute() or ".." in PurePosixPath(rel).parts:
                raise SpecError(f"job file name {rel!r} is not a safe relative path.")
            path = tmp / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)
        os.chmod(tmp, 0o777 & ~_umask(out.parent))  # mkdtemp made it 0700; a job directory is for sharing
        if out.exists():
            old = out.with_name(f".{out.name}.old-{os.getpid()}")
            os.rename(out, old)
            os.rename(tmp, out)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.rename(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out.resolve()


def _umask(scratch: Path) -> int:
    """This process's umask, read without setting it (``os.umask`` sets it: a race with threads creating files).

    From ``/proc/self/status`` (Linux); elsewhere from the mode of a directory made with 0777 in ``scratch``.
    """
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8) & 0o777
    except (OSError, ValueError):
        pass
    probe = Path(tempfile.mkdtemp(prefix=".umask.", dir=scratch)) / "probe"
    try:
        probe.mkdir(mode=0o777)
        return ~probe.stat().st_mode & 0o777
    finally:
        shutil.rmtree(probe.parent, ignore_errors=True)


def load_job(directory: Path, *, accept_edits: bool = False) -> Job:
    """Read the job directory ``directory`` back (see the module doc).

    Raises :class:`SpecError` naming the directory or file and the fix: not a directory, not a job
    directory, malformed nbtrain.toml (with the line), unreadable manifest, missing or edited files.
    """
    directory = Path(directory)
    if not directory.is_dir():
        what = "a file" if directory.exists() else "missing"
        raise SpecError(f"{directory} is {what}, not a job directory; create one with `nbtrain export NOTEBOOK -o DIR`.")
    toml_path = directory / TOML_NAME
    if not toml_path.is_file():
        raise SpecError(
            f"{directory} is not an nbtrain job directory (no {TOML_NAME}); create one with "
            "`nbtrain export NOTEBOOK -o DIR`."
        )
    spec, parameters, source = load_job_toml(toml_path)
    try:
        manifest = json.loads((directory / MANIFEST_NAME).read_bytes())
        listed = dict(manifest["files"])
    except (OSError, ValueError, KeyError, TypeError) as error:
        raise SpecError(f"{directory / MANIFEST_NAME} is missing or unreadable ({error}); export the job again.") from None
    files: dict[str, bytes] = {}
    edited: list[str] = []
    for rel, want in sorted(listed.items()):
        rel = str(rel)
        on_disk = directory / _RENAMES.get(rel, rel)
        try:
            data = on_disk.read_bytes()
        except OSError:
            raise SpecError(f"{on_disk} is missing; the manifest lists it. Export the job again.") from None
        files[rel] = data
        if hashlib.sha256(data).hexdigest() != want:
            edited.append(_RENAMES.get(rel, rel))
    if edited and not accept_edits:
        raise SpecError(
            f"{', '.join(edited)} in {directory} changed after export (sha256 differs from manifest.json); "
            "export the notebook again, or pass --accept-edits to submit the edited files."
        )
    if edited:
        manifest["files"] = {rel: hashlib.sha256(data).hexdigest() for rel, data in sorted(files.items())}
        manifest["sizes"] = {rel: len(data) for rel, data in sorted(files.items())}
        manifest["edited_after_export"] = sorted(edited)
    try:
        captured = tuple(
            CapturedName(str(c["name"]), CaptureKind(c["kind"]), int(c["size"]), str(c["detail"]))
            for c in manifest.get("captured", [])
        )
    except (KeyError, ValueError, TypeError) as error:
        raise SpecError(f"{directory / MANIFEST_NAME}: unreadable 'captured' list ({error}); export the job again.") from None
    bundle = Bundle(files=files, manifest=manifest, captured=captured)
    return Job(directory, spec, parameters, bundle, source, bool(edited))
