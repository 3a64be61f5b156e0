"""docs/slurm.md's list of options Slurm refuses matches the options table (nbtrain/flags/table.py)."""

from __future__ import annotations

import re
from pathlib import Path

from nbtrain.flags.table import OPTIONS

DOC = Path(__file__).resolve().parents[3] / "docs" / "slurm.md"


def _refused_sentence() -> str:
    text = " ".join(DOC.read_text(encoding="utf-8").split())
    found = re.search(r"Refused before anything is submitted.*?\. ", text)
    assert found, "docs/slurm.md no longer says which options Slurm refuses"
    return found.group(0)


def test_the_refused_options_docs_slurm_lists_are_the_tables() -> None:
    said = _refused_sentence()
    refused = {o.flag for o in OPTIONS if o.backends is not None and "slurm" not in o.backends}
    accepted = {o.flag for o in OPTIONS} - refused
    named = set(re.findall(r"`(--[a-z0-9-]+)`", said))
    assert not named & accepted, f"named as refused but Slurm accepts: {sorted(named & accepted)}"
    # the Kubernetes-only options are named as a group ("the Kubernetes options"); every other one by its flag
    kubernetes_only = {o.flag for o in OPTIONS if o.backends is not None and set(o.backends) == {"kubernetes"}}
    assert "the Kubernetes options" in said
    missing = refused - kubernetes_only - named
    assert not missing, f"docs/slurm.md does not name these refused options: {sorted(missing)}"
