"""Export from an .ipynb on disk, without a kernel: cell choice, closure, parameters, job directory."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from pathlib import Path

import pytest

from nbtrain.errors import CaptureError, SecretInBundleError, SpecError, UndefinedNameError
from nbtrain.export.static import default_job_dir, export_notebook

from .conftest import run_train

pytestmark = pytest.mark.usefixtures("no_k8s")

HELPERS = '''import math
from collections import OrderedDict as OD

class Scaler:
    """Multiplies by a factor."""
    def __init__(self, factor):
        self.factor = factor
    def __call__(self, x):
        return x * self.factor

def series(n):
    return [helper(i) for i in range(n)]

def helper(i):
    return math.sqrt(i) * SCALE

SCALE = 2.0
'''

JOB = '''%%distributed --nodes 2 --gpus 3 --name demo --out run
scaler = Scaler(FACTOR)
values = [scaler(v) for v in series(STEPS)]
print("TOTAL", round(sum(values), 6), LABEL, USE_BIAS, OD(a=1)["a"])
sum(values)
'''


def standard(notebook_file: Callable[..., Path]) -> Path:
    return notebook_file(
        "# md: # A notebook",
        "%load_ext nbtrain",
        ("FACTOR = 3\nSTEPS = 4\nLABEL = 'x'\nUSE_BIAS = True\nUNUSED = 1.5", ["parameters"]),
        "!echo this shell line is ignored\n%matplotlib inline",
        HELPERS,
        JOB,
        "run.wait()",
    )


def test_job_directory_is_complete_and_train_py_runs(notebook_file: Callable[..., Path], tmp_path: Path) -> None:
    result = export_notebook(standard(notebook_file), tmp_path / "job")
    job = tmp_path / "job"
    names = sorted(str(p.relative_to(job)) for p in job.rglob("*") if p.is_file())
    assert names == ["README.md", "accelerate-cpu.yaml", "accelerate.yaml", "job.sbatch", "k8s/README.md", "manifest.json",
                     "nbtrain.toml", "requirements.txt", "train.py"]
    assert result.cell.startswith("cell 6 (id ")
    assert (result.spec.nodes, result.spec.procs_per_node, result.spec.name) == (2, 3, "demo")

    train = (job / "train.py").read_text()
    # the helper cell's definitions, the literal values, the imports; not the magic-only cells
    for text in ("class Scaler:", "def series(n):", "def helper(i):", "SCALE = 2.0", "FACTOR = 3",
                 "import math", "from collections import OrderedDict as OD"):
        assert text in train
    assert "matplotlib" not in train and "echo" not in train and "UNUSED" not in train and "load_ext" not in train

    done = run_train(job)
    assert done.returncode == 0, done.stderr
    expected = round(sum(3 * (i ** 0.5) * 2.0 for i in range(4)), 6)
    assert f"TOTAL {expected} x True 1" in done.stdout


def test_parameters_become_options_and_env_overrides(notebook_file: Callable[..., Path], tmp_path: Path) -> None:
    result = export_notebook(standard(notebook_file), tmp_path / "job")
    job = tmp_path / "job"
    assert [(p.name, p.kind, p.default) for p in result.job.parameters] == [
        ("FACTOR", "int", 3), ("STEPS", "int", 4), ("LABEL", "str", "x"), ("USE_BIAS", "bool", True)
    ]
    helped = run_train(job, "--help")
    assert "--FACTOR INT" in helped.stdout and "--USE-BIAS BOOL" in helped.stdout
    changed = run_train(job, "--STEPS", "2", "--LABEL", "y z", "--USE_BIAS", "false")
    assert changed.returncode == 0, changed.stderr
    expected = round(sum(3 * (i ** 0.5) * 2.0 for i in range(2)), 6)
    assert f"TOTAL {expected} y z False 1" in changed.stdout
    # NBTRAIN_PARAMS (what `nbtrain submit --param` sets); the command line wins over it
    env = {"NBTRAIN_PARAMS": json.dumps({"STEPS": "1", "FACTOR": "10"})}
    both = run_train(job, "--FACTOR", "1", env=env)
    assert "TOTAL 0.0 x True 1" in both.stdout
    bad = run_train(job, "--STEPS", "many")
    assert bad.returncode == 2 and "argument --STEPS: invalid int value: 'many'" in bad.stderr


def test_manifest_is_the_same_kind_as_the_live_path(notebook_file: Callable[..., Path], tmp_path: Path) -> None:
    from nbtrain.bundle import capture_cell

    result = export_notebook(standard(notebook_file), tmp_path / "job")
    raw = (tmp_path / "job" / "manifest.json").read_bytes()
    manifest = json.loads(raw)
    assert hashlib.sha256(raw).hexdigest() == result.job.digest
    assert manifest["kind"] == "cell" and manifest["entry"] == "main.py"
    assert manifest["files"]["main.py"] == hashlib.sha256((tmp_path / "job" / "train.py").read_bytes()).hexdigest()
    live = capture_cell("x = 1\n", {}, cell_line_offset=1)
    assert set(live.manifest) <= set(manifest)
    assert set(manifest["cell"]) == set(live.manifest["cell"])
    kinds = {c["name"]: c["kind"] for c in manifest["captured"]}
    assert kinds["Scaler"] == kinds["helper"] == "source" and kinds["math"] == "import" and kinds["SCALE"] == "literal"
    # main_line maps cell lines: the cell's first body line (cell line 2) is that line of train.py
    lines = (tmp_path / "job" / "train.py").read_text().splitlines()
    assert lines[manifest["cell"]["main_line"] - 1] == "scaler = Scaler(FACTOR)"


def test_same_notebook_same_digest_and_default_directory(notebook_file: Callable[..., Path]) -> None:
    path = standard(notebook_file)
    first = export_notebook(path)
    second = export_notebook(path)
    assert first.directory == second.directory == default_job_dir(path) == path.with_name("nb-job")
    assert first.job.digest == second.job.digest


def test_computed_values_are_rerun_and_reported(notebook_file: Callable[..., Path], tmp_path: Path) -> None:
    path = notebook_file(
        "import json\nsettings = json.loads('{\"depth\": 3}')\nsettings['depth'] += 1\nlayers = list(range(settings['depth']))",
        "%%distributed\nprint('LAYERS', layers)",
    )
    result = export_notebook(path, tmp_path / "job")
    assert [c.split(" (")[0] for c in result.computed] == ["layers", "settings"]
    assert result.computed[0].startswith("layers (line 4 of cell 1 (id ")
    readme = (tmp_path / "job" / "README.md").read_text()
    assert "Re-run on every rank" in readme and "layers" in readme
    assert "LAYERS [0, 1, 2, 3]" in run_train(tmp_path / "job").stdout

    with pytest.raises(CaptureError, match=r"layers: cell 1 \(id .*\), line 4: `layers = list") as info:
        export_notebook(path, tmp_path / "strict", strict=True)
    assert "settings:" not in str(info.value)  # only the names the cell uses directly are refused


def test_values_from_magics_and_loops_are_refused_with_their_cell(notebook_file: Callable[..., Path], tmp_path: Path) -> None:
    path = notebook_file(
        "files = !ls\ntotal = 0\nfor i in range(3):\n    total += i\n    last = i",
        "%%distributed\nprint(files, last)",
    )
    with pytest.raises(CaptureError) as info:
        export_notebook(path, tmp_path / "job")
    message = str(info.value)
    assert "files: cell 1" in message and "%magic or !shell" in message
    assert "last: cell 1" in message and "line 3" in message and "loop" in message
    assert not (tmp_path / "job").exists()


def test_undefined_names_say_where(notebook_file: Callable[..., Path], tmp_path: Path) -> None:
    path = notebook_file(
        "%%time\nwarm = 1",
        "%%distributed\nprint(later, missing, warm)",
        "later = 5",
    )
    with pytest.raises(UndefinedNameError) as info:
        export_notebook(path, tmp_path / "job")
    message = str(info.value)
    assert "later (cell 2" in message and "only defined later, in cell 3" in message
    assert "missing (cell 2" in message and "line 2" in message
    assert "warm" in message and "%%time cell" in message


def test_ipython_features_in_the_job_cell_are_refused(notebook_file: Callable[..., Path], tmp_path: Path) -> None:
    path = notebook_file("%%distributed\n!nvidia-smi\nx = 1")
    with pytest.raises(CaptureError, match=r"get_ipython .*line 2"):
        export_notebook(path, tmp_path / "job")


def test_syntax_errors_use_cell_lines(notebook_file: Callable[..., Path], tmp_path: Path) -> None:
    path = notebook_file("x = 1", "%%distributed --nodes 1\nok = 1\nx = = 1")
    with pytest.raises(CaptureError, match="cell line 3"):
        export_notebook(path, tmp_path / "job")


def test_choosing_the_cell(notebook_file: Callable[..., Path], tmp_path: Path) -> None:
    import nbformat

    path = notebook_file(
        "A = 1",
        "%%distributed --name first\nprint('first', A)",
        ("print('tagged', A)", ["train"]),
        "%%distributed --name second\nprint('second', A)",
    )
    ids = [c["id"] for c in nbformat.read(str(path), 4).cells]
    last = export_notebook(path, tmp_path / "a")
    assert last.spec.name == "second" and "2 %%distributed cells" in last.job.notes[0]
    assert export_notebook(path, tmp_path / "b", cell="2").spec.name == "first"
    assert export_notebook(path, tmp_path / "c", cell=ids[1]).spec.name == "first"
    tagged = export_notebook(path, tmp_path / "d", tag="train")
    assert tagged.spec.name == "nb" and "no %%distributed line" in tagged.job.notes[0]
    assert "tagged 1" in run_train(tmp_path / "d").stdout
    with pytest.raises(CaptureError, match="--cell '9': no code cell"):
        export_notebook(path, tmp_path / "e", cell="9")
    with pytest.raises(CaptureError, match="--tag 'nope': no code cell"):
        export_notebook(path, tmp_path / "e", tag="nope")
    with pytest.raises(CaptureError, match="no %%distributed cell"):
        export_notebook(notebook_file("x = 1", name="plain.ipynb"), tmp_path / "e")


def test_bad_flags_and_bad_files(notebook_file: Callable[..., Path], tmp_path: Path) -> None:
    with pytest.raises(SpecError, match=r"cell 1 .*--nodes"):
        export_notebook(notebook_file("%%distributed --nodes 0\nx = 1", name="a.ipynb"), tmp_path / "a")
    with pytest.raises(CaptureError, match="missing"):
        export_notebook(tmp_path / "absent.ipynb")
    broken = tmp_path / "broken.ipynb"
    broken.write_text("{not json")
    with pytest.raises(CaptureError, match="not a readable Jupyter notebook"):
        export_notebook(broken)
    occupied = tmp_path / "occupied"
    occupied.mkdir()
    (occupied / "data.csv").write_text("1,2")
    with pytest.raises(SpecError, match="not an nbtrain job directory"):
        export_notebook(notebook_file("%%distributed\nx = 1", name="b.ipynb"), occupied)
    assert (occupied / "data.csv").exists()


def test_secret_values_are_refused(notebook_file: Callable[..., Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = notebook_file("API_TOKEN = 'abcdefgh12345678'", "%%distributed\nprint(API_TOKEN)")
    with pytest.raises(SecretInBundleError, match="API_TOKEN"):
        export_notebook(path, tmp_path / "job")


def test_requirements_are_pinned_and_local_modules_noted(notebook_file: Callable[..., Path], tmp_path: Path) -> None:
    from importlib.metadata import version

    path = notebook_file(
        "import numpy as np\nimport json\nimport my_local_helpers",
        "%%distributed\nimport torch\nprint(np.zeros(2), json.dumps(1), my_local_helpers)",
    )
    export_notebook(path, tmp_path / "job")
    pins = (tmp_path / "job" / "requirements.txt").read_text().splitlines()
    assert f"numpy=={version('numpy')}" in pins
    assert any(p.startswith("torch==") for p in pins) and any(p.startswith("accelerate==") for p in pins)
    assert not any(p.startswith(("json", "my_local")) for p in pins)
    assert "`my_local_helpers`" in (tmp_path / "job" / "README.md").read_text()
