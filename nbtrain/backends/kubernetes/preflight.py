"""The first thing a pod runs: check that the image has the Python packages the runtime needs, then exec the launcher.

Shipped in the ConfigMap as ``nbtrain_preflight.py`` next to the runtime (on ``PYTHONPATH``) and run as
``python -m nbtrain_preflight --image IMAGE --need accelerate,torch [--cwd DIR] -- <launcher argv>``
(``--cwd``: the launcher's working directory, for pods whose template cannot set ``workingDir``: a TrainJob's).
Standard library only:
it runs before anything else is known to import. A stock image (``python:3.11``, ``pytorch/pytorch``) lacks
Accelerate; without this check every pod exits 1 with a traceback from ``python -m accelerate.commands.launch``
that no rank printed. With it the pod log says, in one line that starts with :data:`MARKER`, which packages
are missing, from which image and interpreter, and what to do; the mirror makes that line the run's failure.

``find_spec`` only locates each package (nothing is imported), so the check costs milliseconds.

With ``--parts INDEX --unpack DIR`` (a bundle too big for one ConfigMap, sent as parts: see :mod:`.payload`) it then
checks every part against its sha256 in ``INDEX`` and the reassembled archive against its own, and unpacks the bundle
into ``DIR``; a part that does not match is refused by its path and ConfigMap (exit :data:`EXIT_BUNDLE`), and
nothing of the bundle runs.
"""

from __future__ import annotations

import importlib.util
import os
import sys

MARKER = "nbtrain preflight:"
EXIT_MISSING = 3  # distinct from a training error's 1, for whoever reads the pod's exit code
EXIT_BUNDLE = 4  # the bundle's parts do not match their digests


def missing(names: list[str]) -> list[str]:
    """The top-level packages among ``names`` this interpreter cannot find."""
    out = []
    for name in names:
        try:
            found = importlib.util.find_spec(name) is not None
        except (ImportError, ValueError):
            found = False
        if not found:
            out.append(name)
    return out


def message(lacking: list[str], image: str) -> str:
    """The one line the pod prints when packages are missing."""
    which = ", ".join(lacking)
    return (f"{MARKER} the image {image} lacks the Python package{'s' if len(lacking) > 1 else ''} {which} "
            f"(looked for with {sys.executable}, Python {sys.version.split()[0]}); nbtrain's runtime needs them in "
            f"the image: use an image that has them (e.g. one built FROM it with `pip install {' '.join(lacking)}`, "
            "see the minimal Dockerfile in docs/kubernetes.md), pass it with --image or NBTRAIN_K8S_IMAGE, and run "
            "again (NBTRAIN_K8S_PYTHON names the interpreter if it is not `python`)")


def unpack(index_path: str, dest: str) -> str | None:
    """Check the parts listed in ``index_path`` (paths relative to its directory) and unpack the archive they make
    into ``dest``. Returns the one line to print when something does not match or cannot be read (None: unpacked)."""
    import hashlib
    import io
    import json
    import tarfile

    root = os.path.dirname(index_path)
    try:
        with open(index_path, encoding="utf-8") as handle:
            index = json.load(handle)
    except (OSError, ValueError) as error:
        return f"{MARKER} cannot read the index of the bundle's parts {index_path}: {error}; nothing ran"
    again = "submit the run again (nbtrain sends new ConfigMaps), and find what in the namespace changes ConfigMaps"
    chunks = []
    for part in index.get("parts") or []:
        path = os.path.join(root, str(part["path"]))
        try:
            with open(path, "rb") as handle:
                data = handle.read()
        except OSError as error:
            return f"{MARKER} the bundle part {path} (ConfigMap {part.get('configmap')}) cannot be read: {error}; nothing ran"
        got = hashlib.sha256(data).hexdigest()
        if got != part.get("sha256"):
            return (f"{MARKER} the bundle part {path} (ConfigMap {part.get('configmap')}) does not match its digest: "
                    f"sha256 {got} ({len(data)} bytes), expected {part.get('sha256')} ({part.get('size')} bytes). It "
                    f"was changed or damaged after nbtrain sent it, so nothing ran; {again}")
        chunks.append(data)
    archive = b"".join(chunks)
    got = hashlib.sha256(archive).hexdigest()
    if got != index.get("sha256"):
        return (f"{MARKER} the bundle reassembled from {len(chunks)} parts in {root} does not match its digest: sha256 "
                f"{got}, expected {index.get('sha256')}; nothing ran; {again}")
    try:
        with tarfile.open(fileobj=io.BytesIO(archive), mode="r:gz") as tar:
            for member in tar.getmembers():
                parts = member.name.split("/")
                if not member.isfile() or member.name.startswith("/") or ".." in parts:
                    return f"{MARKER} the bundle archive holds {member.name!r}, which is not a plain file in it; nothing ran"
                target = os.path.join(dest, *parts)
                os.makedirs(os.path.dirname(target), exist_ok=True)
                source = tar.extractfile(member)
                with open(target, "wb") as out:
                    out.write(source.read() if source is not None else b"")
    except (OSError, tarfile.TarError) as error:
        return f"{MARKER} cannot unpack the bundle into {dest}: {error}; nothing ran"
    return None


def main(argv: list[str]) -> int:
    """Parse ``--image I --need a,b [--cwd DIR] -- launcher...``; print and return :data:`EXIT_MISSING`, or exec the
    launcher (in ``DIR``)."""
    if "--" not in argv:
        print(f"{MARKER} usage: --image IMAGE --need PKG[,PKG] -- LAUNCHER...", file=sys.stderr)
        return 2
    head, launcher = argv[: argv.index("--")], argv[argv.index("--") + 1:]
    options = dict(zip(head[::2], head[1::2], strict=False))
    lacking = missing([n for n in options.get("--need", "").split(",") if n])
    if lacking:
        print(message(lacking, options.get("--image", "(unknown image)")), file=sys.stderr, flush=True)
        return EXIT_MISSING
    if options.get("--parts"):
        refused = unpack(options["--parts"], options.get("--unpack", "/tmp/nbtrain-bundle"))
        if refused is not None:
            print(refused, file=sys.stderr, flush=True)
            return EXIT_BUNDLE
    if not launcher:
        return 0
    if options.get("--cwd"):
        os.chdir(options["--cwd"])
    sys.stdout.flush()
    os.execvp(launcher[0], launcher)
    return 0  # not reached: exec replaced this process


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
