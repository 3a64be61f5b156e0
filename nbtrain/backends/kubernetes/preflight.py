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
"""

from __future__ import annotations

import importlib.util
import os
import sys

MARKER = "nbtrain preflight:"
EXIT_MISSING = 3  # distinct from a training error's 1, for whoever reads the pod's exit code


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
    if not launcher:
        return 0
    if options.get("--cwd"):
        os.chdir(options["--cwd"])
    sys.stdout.flush()
    os.execvp(launcher[0], launcher)
    return 0  # not reached: exec replaced this process


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
