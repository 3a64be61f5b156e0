"""The user's side of runs: submit (spec + bundle -> backend -> store -> watcher) and the Run handle.

- :mod:`.launch`: the one launch path (plan, record, submit, keep the handle) for new runs and attempts;
- :mod:`.watcher`: the background reader that folds events and feeds listeners;
- :mod:`.run`: the thin :class:`Run` facade; :mod:`.api`: submit/attach/rerun/runs/plan functions.
"""

from __future__ import annotations

from nbtrain.client.api import attach, plan_bundle, plan_resume, rerun, runs, submit_bundle
from nbtrain.client.run import Run

__all__ = ["Run", "attach", "plan_bundle", "plan_resume", "rerun", "runs", "submit_bundle"]
