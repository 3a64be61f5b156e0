"""One path for job options: ``%%distributed``, ``@nbtrain.distributed`` and the CLI (``nbtrain export`` then
``nbtrain submit``) resolve the same cases (environment, profile, locks, flags) to the same spec or the same error.

What each entry point hands to the one submission function (``nbtrain.client.submit_bundle``) is recorded instead
of started: the subject here is which spec a user gets, not the gang (tested everywhere else)."""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any

import nbformat
import pytest
from IPython.core.error import UsageError
from nbformat.v4 import new_code_cell, new_notebook

import nbtrain.client
from nbtrain import cli
from nbtrain.errors import SpecError
from nbtrain.spec import JobSpec

pytestmark = pytest.mark.slow

TEAM_PROFILE = """version = "1.0"
locked = ["strategy"]

[options]
gpus = 2
strategy = "ddp"
max-restarts = 2
"""

# (id, environment, options as flag -> value, expected JobSpec fields or the error's words)
CASES: list[tuple[str, dict[str, str], dict[str, Any], dict[str, Any] | str]] = [
    ("defaults", {}, {}, {"backend": "local", "procs_per_node": 1, "max_restarts": 0}),
    ("environment", {"NBTRAIN_BACKEND": "slurm"}, {}, {"backend": "slurm"}),
    ("flag over environment", {"NBTRAIN_BACKEND": "slurm"}, {"--backend": "local"}, {"backend": "local"}),
    ("profile", {}, {"--profile": "team"}, {"procs_per_node": 2, "max_restarts": 2}),
    ("profile over environment", {"NBTRAIN_BACKEND": "slurm"}, {"--profile": "team", "--nodes": 2},
     {"backend": "slurm", "nodes": 2, "procs_per_node": 2}),
    ("flag over profile", {}, {"--profile": "team", "--gpus": 3}, {"procs_per_node": 3, "max_restarts": 2}),
    ("lock holds", {}, {"--profile": "team", "--strategy": "fsdp"}, "locks strategy to ddp; nothing was started"),
    ("unknown profile", {}, {"--profile": "nope"}, "--profile 'nope': no such profile; known profiles:"),
    ("bad value", {}, {"--nodes": 0}, "--nodes: 0 is out of range"),
    ("bad environment", {"NBTRAIN_BACKEND": "nowhere"}, {}, "NBTRAIN_BACKEND='nowhere'"),
]


class _Recorded(Exception):
    """Raised by the stand-in for submit_bundle: carries the spec an entry point would have submitted."""

    def __init__(self, spec: JobSpec) -> None:
        super().__init__("recorded")
        self.spec = spec


def _record(bundle: Any, spec: JobSpec, **_: Any) -> Any:
    raise _Recorded(spec)


def _line(options: dict[str, Any]) -> list[str]:
    return [str(part) for flag, value in options.items() for part in (flag, value)]


def _via_magic(shell: Any, tmp_path: Path, options: dict[str, Any]) -> JobSpec | str:
    line = shlex.join(["--no-monitor", *_line(options)])
    result = shell.run_cell(f"%%distributed {line}\nx = 1\n")
    error = result.error_in_exec or result.error_before_exec
    if isinstance(error, _Recorded):
        return error.spec
    assert isinstance(error, UsageError), error
    return str(error)


def _via_decorator(shell: Any, tmp_path: Path, options: dict[str, Any]) -> JobSpec | str:
    import nbtrain

    keywords = {flag[2:].replace("-", "_"): value for flag, value in options.items()}
    try:
        train = nbtrain.distributed(**keywords)(lambda: 1)
    except SpecError as error:
        return str(error)
    with pytest.raises(_Recorded) as recorded:
        train()
    assert recorded.value.spec == train.__wrapped_spec__
    return recorded.value.spec


def _via_cli(shell: Any, tmp_path: Path, options: dict[str, Any], capsys: pytest.CaptureFixture[str]) -> JobSpec | str:
    notebook = tmp_path / "job.ipynb"
    nbformat.write(new_notebook(cells=[new_code_cell("%%distributed\nx = 1\n")]), str(notebook))
    code = cli.main(["export", str(notebook), "-o", str(tmp_path / "job")])
    if code != 0:
        return capsys.readouterr().err
    capsys.readouterr()
    try:
        code = cli.main(["submit", str(tmp_path / "job"), *_line(options)])
    except _Recorded as recorded:
        return recorded.spec
    assert code == 2
    return capsys.readouterr().err


@pytest.mark.parametrize("entry", ["magic", "decorator", "cli"])
@pytest.mark.parametrize(("env", "options", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_every_entry_point_resolves_options_the_same_way(
    entry: str, env: dict[str, str], options: dict[str, Any], expected: dict[str, Any] | str, shell: Any,
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
) -> None:
    config = tmp_path / "config"
    (config / "profiles").mkdir(parents=True)
    (config / "profiles" / "team.toml").write_text(TEAM_PROFILE)
    monkeypatch.setenv("NBTRAIN_CONFIG_DIR", str(config))
    monkeypatch.chdir(tmp_path)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setattr(nbtrain.client, "submit_bundle", _record)
    if entry == "cli":
        got = _via_cli(shell, tmp_path, options, capsys)
    else:
        got = (_via_magic if entry == "magic" else _via_decorator)(shell, tmp_path, options)
    if isinstance(expected, str):
        assert isinstance(got, str) and expected in got, got
    else:
        assert isinstance(got, JobSpec), got
        assert {field: getattr(got, field) for field in expected} == expected
