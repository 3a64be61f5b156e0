"""Hugging Face ``transformers.Trainer`` inside an nbtrain run, with no change to the user's code (stdlib only).

:func:`watch` (called by :func:`nbtrain.runtime.hooks.install`) waits for the user's code to import
``transformers.trainer`` (an import hook: transformers is never imported by nbtrain itself) and then patches
``Trainer``:

- ``Trainer.__init__`` adds nbtrain's callback (:mod:`nbtrain.runtime.hfcallback`): the Trainer's logs become
  nbtrain metrics at its ``global_step`` with ``max_steps`` as the total (monitor, ``run.metrics()``, MLflow), its
  ``TrainingArguments`` and the model's config become the run's params, and each checkpoint it saves is committed
  through nbtrain's atomic protocol (:func:`nbtrain.runtime.checkpoint.commit_copy`). Transformers' own
  ``MLflowCallback`` (``report_to="mlflow"``/``"all"``) is removed while nbtrain tracks the run: nbtrain's MLflow run
  holds the same record, and a second MLflow run would split it. With ``--no-tracking`` it stays.
- ``Trainer.train(resume_from_checkpoint=None or True)`` resumes from nbtrain's newest complete Trainer checkpoint
  of this run (after a restart, ``--max-restarts``) or of the run being resumed (``run.resume()``), when one exists.
  An explicit path is left alone.
"""

from __future__ import annotations

import functools
import importlib.abc
import importlib.machinery
import json
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

from nbtrain.events import EventKind
from nbtrain.runtime import context

__all__ = ["TRAINER_MODULE", "latest_trainer_checkpoint", "patch", "watch"]

TRAINER_MODULE = "transformers.trainer"


class _PatchOnImport(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds nothing itself: lets the other finders locate ``transformers.trainer``, then patches it once loaded."""

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> importlib.machinery.ModuleSpec | None:
        if fullname != TRAINER_MODULE:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None and spec.loader is not None:
                spec.loader = _PatchingLoader(spec.loader)
                return spec
        return None


class _PatchingLoader(importlib.abc.Loader):
    """The real loader of ``transformers.trainer``, then :func:`patch` on the loaded module."""

    def __init__(self, loader: Any) -> None:
        self._loader = loader

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        return self._loader.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        self._loader.exec_module(module)
        patch(module)

    def __getattr__(self, name: str) -> Any:  # get_source, get_filename, ... (tracebacks, inspect)
        return getattr(self._loader, name)


def watch() -> None:
    """Patch the Trainer now if the user's code imported it already, else once it does (safe to call twice)."""
    module = sys.modules.get(TRAINER_MODULE)
    if module is not None:
        patch(module)
        return
    if not any(isinstance(finder, _PatchOnImport) for finder in sys.meta_path):
        sys.meta_path.insert(0, _PatchOnImport())


def patch(module: ModuleType) -> None:
    """Wrap ``module.Trainer``'s ``__init__`` and ``train`` (see the module docstring); safe to call twice."""
    trainer = getattr(module, "Trainer", None)
    if trainer is None or getattr(trainer.__init__, "_nbtrain", False):
        return
    original_init, original_train = trainer.__init__, trainer.train

    @functools.wraps(original_init)
    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        original_init(self, *args, **kwargs)
        if context.current() is not None:
            from nbtrain.runtime import hfcallback

            hfcallback.attach(self)

    @functools.wraps(original_train)
    def train(self: Any, resume_from_checkpoint: Any = None, *args: Any, **kwargs: Any) -> Any:
        if resume_from_checkpoint in (None, True) and context.current() is not None:
            found = latest_trainer_checkpoint()
            if found is not None:
                resume_from_checkpoint = str(found)
        return original_train(self, resume_from_checkpoint, *args, **kwargs)

    __init__._nbtrain = True  # type: ignore[attr-defined]
    train._nbtrain = True  # type: ignore[attr-defined]
    trainer.__init__ = __init__
    trainer.train = train


def latest_trainer_checkpoint() -> Path | None:
    """The newest complete Trainer checkpoint of the run being resumed or of this run (local roots), else None.

    Corrupted ones (files that do not match their manifest) are skipped with a notice, as :func:`restore` does.
    """
    from nbtrain.runtime.checkpoint import committed_checkpoints, local_sources, verify_checkpoint
    from nbtrain.runtime.ckptfiles import MANIFEST, TRAINER_KIND

    ctx = context.current()
    for source in local_sources():
        for directory in committed_checkpoints(source):
            ok, why = verify_checkpoint(directory)
            if not ok:
                if ctx is not None and ctx.rank == 0:
                    ctx.emit(EventKind.NOTICE, message=f"checkpoint {directory} is corrupted ({why}); trying the "
                                                       "previous one")
                continue
            manifest = json.loads((directory / MANIFEST).read_text(encoding="utf-8"))
            if (manifest.get("extra") or {}).get("kind") != TRAINER_KIND:
                continue
            if ctx is not None and ctx.rank == 0:
                ctx.emit(EventKind.NOTICE, message=f"attempt {ctx.attempt}: the Trainer resumes from the checkpoint "
                                                   f"of step {manifest['step']} ({directory})")
            return directory
    return None
