"""``POST /nbtrain/export`` stays inside the server root and answers a bad body with a 400 that says what is wrong.

Before: an absolute or ``..`` ``out`` wrote a job directory anywhere the server's user could write; a notebook in
a sibling directory (``<root>-evil``) passed the string-prefix check; a list body gave a 500 with the raw
exception. A real jupyter server.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import nbformat
import pytest
import tornado.httpclient
from nbformat.v4 import new_code_cell, new_notebook


@pytest.fixture
def jp_server_config(home: Path) -> dict[str, Any]:
    return {"ServerApp": {"jpserver_extensions": {"nbtrain": True}}}


def _notebook(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(new_notebook(cells=[new_code_cell("%%distributed\nprint('hello')")]), str(path))
    return path


async def _post(jp_fetch: Any, body: Any, *, raw: bool = False) -> tuple[int, dict[str, Any]]:
    try:
        response = await jp_fetch("nbtrain", "export", method="POST", body=body if raw else json.dumps(body))
    except tornado.httpclient.HTTPClientError as error:
        assert error.response is not None
        return error.code, json.loads(error.response.body)
    return response.code, json.loads(response.body)


def _everything(root: Path) -> set[Path]:
    return {p for p in root.rglob("*")}


async def test_export_never_writes_outside_the_server_root(jp_fetch: Any, jp_root_dir: Path, tmp_path: Path) -> None:
    _notebook(jp_root_dir / "nb.ipynb")
    evil = _notebook(tmp_path / f"{jp_root_dir.name}-evil" / "nb.ipynb")  # passes a string-prefix check
    outside = tmp_path / "outside"
    (jp_root_dir / "link").symlink_to(tmp_path, target_is_directory=True)
    before = _everything(tmp_path)

    cases = [
        ({"path": "nb.ipynb", "out": str(outside)}, '"out" must be relative'),
        ({"path": "nb.ipynb", "out": "../outside"}, '"out" \'../outside\' is outside the server\'s root'),
        ({"path": "nb.ipynb", "out": "sub/../../outside"}, "is outside the server's root"),
        ({"path": "nb.ipynb", "out": "link/outside"}, "is outside the server's root"),  # a link leading out
        ({"path": f"../{evil.parent.name}/nb.ipynb"}, '"path"'),
        ({"path": f"../{evil.parent.name}/nb.ipynb", "out": "job"}, "is outside the server's root"),
        ({"path": str(jp_root_dir / "nb.ipynb")}, '"path" must be relative'),
        ({"path": "link/outside.ipynb"}, "is outside the server's root"),
        ({"path": "nb.ipynb", "out": "."}, "would replace the server root"),
    ]
    for body, expected in cases:
        status, answer = await _post(jp_fetch, body)
        assert status == 400, (body, status, answer)
        assert expected in answer["message"], (body, answer)
    assert _everything(tmp_path) == before  # nothing written anywhere

    status, answer = await _post(jp_fetch, {"path": "nb.ipynb", "out": "jobs/first"})
    assert status == 201 and answer["path"] == os.path.join("jobs", "first"), answer
    assert (jp_root_dir / "jobs" / "first" / "train.py").is_file()


@pytest.mark.parametrize(("body", "expected"), [
    ("[]", "the body must be a JSON object"),
    ('["nb.ipynb"]', "got a list"),
    ('"nb.ipynb"', "got a string"),
    ("{nope", "the body is not JSON"),
    ("[" * 100_000, "the body is not JSON"),
    (json.dumps({"path": 3}), '"path" must be the notebook\'s path relative to the server root'),
    (json.dumps({"path": ["nb.ipynb"]}), "got a list"),
    (json.dumps({"path": ""}), "got an empty string"),
    (json.dumps({"path": "nb.ipynb", "out": {"dir": "x"}}), '"out" must be'),
    (json.dumps({"path": "nb.ipynb", "cell": True}), '"cell" must be the cell to export'),
    (json.dumps({"path": "nb.ipynb", "cell": -1}), '"cell" must be'),
    (json.dumps({"path": "nb.ipynb", "cell": 1.5}), '"cell" must be'),
    (json.dumps({"path": "nb.ipynb", "tag": 7}), '"tag" must be'),
    (json.dumps({"path": "nb.ipynb", "outt": "x"}), "unknown field(s) 'outt'; the fields are path, out, cell, tag"),
    (json.dumps({"path": "nb\u0000.ipynb"}), "NUL"),
])
async def test_bad_bodies_are_400s_that_name_the_field(jp_fetch: Any, jp_root_dir: Path, body: str,
                                                       expected: str) -> None:
    _notebook(jp_root_dir / "nb.ipynb")
    status, answer = await _post(jp_fetch, body, raw=True)
    assert status == 400, answer
    assert expected in answer["message"] and answer["error"] == "BadRequest", answer
    assert "Traceback" not in answer["message"]


async def test_a_missing_notebook_is_a_404(jp_fetch: Any) -> None:
    status, answer = await _post(jp_fetch, {"path": "absent.ipynb"})
    assert status == 404 and "no notebook file there" in answer["message"]
