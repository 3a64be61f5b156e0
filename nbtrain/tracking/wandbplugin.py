"""The W&B tracker plug-in (:class:`~nbtrain.tracking.plugins.TrackerPlugin`): nbtrain's record of a run as a
W&B run, from the tracking agent (registered as ``wandb`` in the ``nbtrain.trackers`` entry-point group).

Enabled when ``wandb`` is installed and ``WANDB_PROJECT`` is set (or ``NBTRAIN_TRACKERS`` names ``wandb``); W&B's
own settings apply (``WANDB_API_KEY``, ``WANDB_ENTITY``, ``WANDB_MODE=offline``, ``WANDB_DIR``). One W&B run per
nbtrain run, its id derived from nbtrain's run id, reopened (``resume="allow"``) by a restarted agent or a
resumed run. Params become the run's config, tags go into its config under ``nbtrain.tags``, metrics are logged
at their step (W&B ignores a step lower than one it has: a restarted attempt's repeated steps are dropped there),
artifacts are saved as run files, and the verdict lands in the summary (``nbtrain.state``) and the exit code.
"""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar

from nbtrain.tracking.ledger import Point
from nbtrain.tracking.plugins import RunInfo, TrackerPlugin

__all__ = ["WandbTracker"]


class WandbTracker(TrackerPlugin):
    """nbtrain's record -> one W&B run (see the module docstring)."""

    name: ClassVar[str] = "wandb"

    def __init__(self) -> None:
        self._run: Any = None

    @classmethod
    def enabled(cls) -> bool:
        """When ``WANDB_PROJECT`` is set and wandb is installed."""
        if not os.environ.get("WANDB_PROJECT"):
            return False
        import importlib.util

        return importlib.util.find_spec("wandb") is not None

    def start(self, run: RunInfo) -> str:
        import wandb

        run_id = run.resume_id or re.sub(r"[^A-Za-z0-9_-]", "-", run.run_id)[:64]
        self._run = wandb.init(project=os.environ.get("WANDB_PROJECT") or run.experiment, name=run.name, id=run_id,
                               resume="allow", config=dict(run.params), reinit="create_new",
                               settings=wandb.Settings(console="off", silent=True))
        self._run.config.update({"nbtrain.tags": dict(run.tags)}, allow_val_change=True)
        return str(self._run.id)

    def log_params(self, params: Mapping[str, str]) -> None:
        self._run.config.update(dict(params), allow_val_change=True)

    def set_tags(self, tags: Mapping[str, str]) -> None:
        current = dict(self._run.config.get("nbtrain.tags") or {})
        self._run.config.update({"nbtrain.tags": {**current, **tags}}, allow_val_change=True)

    def log_metrics(self, points: Sequence[Point]) -> None:
        by_step: dict[int, dict[str, float]] = {}
        for point in points:
            by_step.setdefault(point.step, {})[point.key] = point.value
        for step in sorted(by_step):
            self._run.log(by_step[step], step=step)

    def log_artifact(self, path: Path, artifact_path: str | None) -> None:
        target = Path(self._run.dir) / (artifact_path or "") / path.name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, target)
        self._run.save(str(target), base_path=self._run.dir, policy="now")

    def finish(self, state: str, failure: Mapping[str, Any] | None) -> None:
        self._run.summary["nbtrain.state"] = state
        if failure:
            self._run.summary["nbtrain.failure"] = str(failure.get("reason") or failure)[:1000]
        self._run.finish(exit_code=0 if state == "succeeded" else 1)
