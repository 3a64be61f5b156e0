"""``--sbatch`` keys mean what sbatch's getopt_long makes of them (issue 28): a prefix is its option, so nothing
reaches an option nbtrain sets, or one an nbtrain option owns (and a profile may lock), by abbreviating it."""

from __future__ import annotations

import gzip
import re
from pathlib import Path

import pytest

from nbtrain.backends.slurm.sbatchopts import LONG_OPTIONS, resolve_option
from nbtrain.backends.slurm.script import sbatch_options
from nbtrain.errors import SpecError
from nbtrain.export.sbatch import export_sbatch_script
from nbtrain.spec import JobSpec

MAN_PAGE = Path("/usr/share/man/man1/sbatch.1.gz")


@pytest.mark.parametrize(("key", "option", "use"), [
    ("out", "--output", "sets where the job's output goes"),
    ("chd", "--chdir", "sets the job's working directory"),
    ("ntasks-per-no", "--ntasks-per-node", "sets the gang's shape"),
    ("tasks-per", "--ntasks-per-node", "sets the gang's shape"),
    ("part", "--partition", "its own option --partition"),
    ("qo", "--qos", "its own option --qos"),
    ("acco", "--account", "its own option --account"),
    ("rese", "--reservation", "its own option --reservation"),
    ("overs", "--oversubscribe", "its own option --exclusive"),
    ("gpus-per-n", "--gpus-per-node", "sets the GPUs or CPUs per node"),
])
def test_an_abbreviation_of_a_reserved_option_is_refused_naming_the_option(key: str, option: str, use: str) -> None:
    with pytest.raises(SpecError) as caught:
        JobSpec(backend="slurm", sbatch_options={key: "x"})
    message = str(caught.value)
    assert message.startswith(f"--sbatch {key}=x: sbatch reads {key} as {option}") and use in message
    assert f"drop {key}= from --sbatch" in message


@pytest.mark.parametrize("key", ["gpus", "gres", "gpus-per-task", "tres-per-task", "cpus-per-gpu", "export",
                                 "output", "partition", "exclusive", "wrap", "wait", "test-only", "clusters"])
def test_every_option_that_sets_what_nbtrain_sets_is_reserved_whole(key: str) -> None:
    with pytest.raises(SpecError, match=rf"^--sbatch {key}=8: (nbtrain sets )?--{key} "):
        JobSpec(backend="slurm", sbatch_options={key: "8"})


@pytest.mark.parametrize(("key", "candidates"), [
    ("exp", "--export, --export-file"), ("acc", "--account, --acctg-freq"), ("gp", "--gpu-bind, --gpu-freq, --gpus"),
])
def test_an_ambiguous_key_is_refused_naming_every_candidate(key: str, candidates: str) -> None:
    with pytest.raises(SpecError, match=rf"--sbatch {key}=: sbatch would read --{key} as an abbreviation of any of "
                                        rf"{candidates}"):
        JobSpec(backend="slurm", sbatch_options={key: "x"})


def test_an_unknown_key_is_refused_and_a_free_abbreviation_is_written_whole() -> None:
    with pytest.raises(SpecError, match=r"sbatch has no option --colour nor one starting with it"):
        JobSpec(backend="slurm", sbatch_options={"colour": "x"})
    spec = JobSpec(backend="slurm", sbatch_options={"mem-per-c": "4G", "hi": "nomultithread", "mail-t": "END"})
    assert spec.sbatch_options == {"mem-per-cpu": "4G", "hint": "nomultithread", "mail-type": "END"}
    assert resolve_option("mem") == "mem"  # an exact name is itself, though mem-bind... start with it
    assert resolve_option("tasks-per-node") == "ntasks-per-node"  # one option, two spellings


def test_a_later_key_for_the_same_option_wins_as_a_later_sbatch_line_does() -> None:
    spec = JobSpec(backend="slurm", sbatch_options={"mem-per-cpu": "4G", "comment": "a", "mem-per-c": "8G"})
    assert list(spec.sbatch_options.items()) == [("comment", "a"), ("mem-per-cpu", "8G")]


def test_the_backend_and_the_exported_script_write_whole_names_after_nbtrains_lines() -> None:
    spec = JobSpec(backend="slurm", partition="debug", sbatch_options={"mem-per-c": "4G"})
    options = sbatch_options(spec, use_gpu=False, job_name="j", output="o", chdir="d")
    assert options[-1] == "--mem-per-cpu=4G" and "--partition=debug" in options
    lines = [line for line in export_sbatch_script(spec).splitlines() if line.startswith("#SBATCH ")]
    assert lines[-1] == "#SBATCH --mem-per-cpu=4G"


@pytest.mark.skipif(not MAN_PAGE.exists(), reason="Slurm's sbatch man page is not installed")
def test_every_option_the_installed_man_page_documents_is_known() -> None:
    text = gzip.decompress(MAN_PAGE.read_bytes()).decode("utf-8", "replace").replace("\\-", "-")
    documented = set(re.findall(r"^\.TP\n\\fB(?:-[A-Za-z]\\fR, \\fB)?--([a-z][a-z0-9-]*)", text, re.M))
    assert len(documented) > 90
    assert documented <= LONG_OPTIONS, sorted(documented - LONG_OPTIONS)
