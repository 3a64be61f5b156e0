"""A job name never becomes a line of its own in generated text.

Before: the name (``--name``, nbtrain.toml, or the notebook's file stem) was written raw into the first comment of
the exported ``job.sbatch`` (and the README's heading), and JobSpec checked only that it was not empty and at most
100 characters: a notebook saved as ``x\\ntouch PWNED\\n#.ipynb`` gave a ``job.sbatch`` that ran ``touch PWNED``.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from nbtrain.errors import SpecError
from nbtrain.spec import JobSpec

PAYLOAD = "touch PWNED"
BREAKERS = ["\n", "\r", "\r\n", "\u2028", "\x0b", "\x1b"]


def _notebook(path: Path) -> Path:
    """A notebook at ``path`` whose job cell (tag ``train``) has no %%distributed line: the spec is named after the file."""
    cell = {"cell_type": "code", "id": "job", "metadata": {"tags": ["train"]}, "outputs": [], "execution_count": None,
            "source": "print('trained')\n"}
    path.write_text(json.dumps({"cells": [cell], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}))
    return path


@pytest.mark.parametrize("breaker", BREAKERS, ids=ascii)
def test_a_notebook_file_stem_with_a_line_break_injects_no_line(tmp_path: Path, breaker: str) -> None:
    from nbtrain.export import export_notebook
    from nbtrain.export.manifests import Manifests

    path = _notebook(tmp_path / f"x{breaker}{PAYLOAD}{breaker}#.ipynb")
    result = export_notebook(path, tmp_path / "job", tag="train", manifests=Manifests({}, {"job": "not needed here"}))
    assert result.directory is not None
    sbatch = (result.directory / "job.sbatch").read_text()
    readme = (result.directory / "README.md").read_text()
    for text in (sbatch, readme):
        for line in text.splitlines():  # splitlines also breaks at \x0b, \x1c-\x1e, \u2028...
            assert not line.startswith(PAYLOAD), f"the file name became a line of its own: {line!r}"
    first_comment = sbatch.splitlines()[1]
    assert first_comment.startswith("# x\\") and PAYLOAD in first_comment  # kept, harmless, readable
    assert readme.splitlines()[0].startswith("# x\\") and PAYLOAD in readme.splitlines()[0]


@pytest.mark.parametrize("name", ["x\nid", "x\rid", "x\x00", "x\u2028id", "tab\there", "esc\x1b[2J"], ids=ascii)
def test_jobspec_refuses_a_name_with_control_characters(name: str) -> None:
    with pytest.raises(SpecError) as error:
        JobSpec(name=name)
    message = str(error.value)
    assert repr(name) in message and "--name" in message and "printable" in message


def test_a_printable_name_with_spaces_and_unicode_is_accepted() -> None:
    assert JobSpec(name="digits run — ü").name == "digits run — ü"
