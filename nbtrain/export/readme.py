"""The job directory's README.md: what each file is and the exact commands to run the job."""

from __future__ import annotations

import shlex
from collections.abc import Mapping, Sequence

from nbtrain.backends.launch import LaunchTarget, accelerate_argv
from nbtrain.bundle.render import comment_text
from nbtrain.spec import JobSpec, Strategy

from .accelconfig import CPU_CONFIG, GPU_CONFIG, config_name
from .parameters import Parameter, text_of
from .sbatch import SBATCH_NAME, uses_gpu

__all__ = ["job_readme"]


def _launch(spec: JobSpec, *, use_gpu: bool, node_rank: int, address: str, params: str) -> str:
    argv = accelerate_argv(
        spec, python="python", use_gpu=use_gpu, node_rank=node_rank, main_address=address, main_port=29500,
        target=LaunchTarget("train.py", module=False), config_file=config_name(use_gpu),
    )
    # argv is [python, -m, accelerate.commands.launch, ...]: the same as the `accelerate launch` command
    return "accelerate launch " + shlex.join(argv[3:]) + params


def _slurm_section(spec: JobSpec) -> list[str]:
    use_gpu = uses_gpu(spec)
    shape = f"--gres=gpu:{spec.procs} per node" if use_gpu else f"{spec.procs} CPU process(es) per node over gloo"
    lines = [
        "On a Slurm cluster, with nbtrain (`nbtrain submit . --backend slurm --partition P`) or without it:",
        "",
        "```sh",
        f"sbatch {SBATCH_NAME}                      # {spec.nodes} node(s), {shape}",
        f"PYTHON=/shared/venv/bin/python sbatch {SBATCH_NAME}   # an interpreter every node reaches",
        "```",
        "",
        "This directory must be on a filesystem every node mounts at the same path; output goes to "
        "`slurm-<job id>.out` here.",
    ]
    if use_gpu:
        lines.append("For a partition without GPUs, export again with `--device cpu`.")
    return [*lines, ""]


def job_readme(
    *,
    name: str,
    spec: JobSpec,
    origin: str,
    digest: str,
    parameters: Sequence[Parameter],
    files: Sequence[str],
    k8s: Mapping[str, str],
    k8s_missing: str | None,
    computed: Sequence[str],
    local_modules: Sequence[str],
    notes: Sequence[str],
) -> str:
    """README.md text. ``k8s`` maps flavor -> file name; ``k8s_missing`` says why there are none."""
    example = ""
    if parameters:
        first = parameters[0]
        example = f" {first.option} {shlex.quote(text_of(first.default))}"
    lines = [
        f"# {comment_text(name)}: an nbtrain job",
        "",
        f"Exported by nbtrain from {comment_text(origin)}. Bundle digest `{digest[:16]}`.",
        "",
        "## Run it",
        "",
        "With nbtrain (local process gang, or `--backend kubernetes`), waiting for the outcome:",
        "",
        "```sh",
        "pip install -r requirements.txt nbtrain",
        "nbtrain submit . --wait" + (f" --param {first.name}={shlex.quote(text_of(first.default))}" if parameters else ""),
        "nbtrain submit . --nodes 2 --gpus 8 --backend kubernetes --image REGISTRY/IMAGE:TAG",
        "```",
        "",
        f"Without nbtrain, with plain Accelerate ({spec.nodes} node(s) x {spec.procs} process(es)):",
        "",
        "```sh",
    ]
    lines += _launch_lines(spec, example)
    lines += ["```", "",
              f"Each command passes the Accelerate config nbtrain generated for the job (`{GPU_CONFIG}`, "
              f"`{CPU_CONFIG}` for a CPU gang): your own `default_config.yaml` does not change it, and the "
              "strategy's options live there. Run them from this directory.", ""]
    lines += _slurm_section(spec)
    if parameters:
        lines += ["## Parameters", "",
                  "From the notebook's `parameters` cell. Options of `train.py`, `--param NAME=VALUE` of "
                  "`nbtrain submit`, or a new default in `nbtrain.toml`:", "",
                  "| option | type | default |", "| --- | --- | --- |"]
        lines += [f"| `{p.option}` | {p.kind} | `{p.default!r}` |" for p in parameters]
        lines.append("")
    lines += _files_section(files, k8s, k8s_missing)
    lines += _notes_section(computed, local_modules, notes)
    return "\n".join(lines) + "\n"


def _launch_lines(spec: JobSpec, example: str) -> list[str]:
    """The plain `accelerate launch` command(s) of the job: GPUs (and CPU for DDP) on one node, else node i's."""
    lines = []
    if spec.nodes == 1:
        lines.append("# GPUs")
        lines.append(_launch(spec, use_gpu=True, node_rank=0, address="127.0.0.1", params=example))
        if spec.strategy is Strategy.DDP:  # FSDP and DeepSpeed need GPUs (on CPU they fail or train plain DDP)
            lines.append("# CPU only (gloo)")
            lines.append("ACCELERATE_USE_CPU=1 " + _launch(spec, use_gpu=False, node_rank=0, address="127.0.0.1",
                                                            params=example))
    else:
        lines.append(f"# on node i of the gang (i = 0 .. {spec.nodes - 1}), with MAIN_HOST the address of node 0")
        lines.append(
            _launch(spec, use_gpu=True, node_rank=0, address="MAIN_HOST", params=example).replace(
                "--machine_rank 0", "--machine_rank $i"
            ).replace("MAIN_HOST", "$MAIN_HOST")
        )
    return lines


def _files_section(files: Sequence[str], k8s: Mapping[str, str], k8s_missing: str | None) -> list[str]:
    """README's "Files": what each file of the job directory is."""
    lines = ["## Files", ""]
    described = {
        "train.py": "the generated program (the bundle's main.py): imports, values, definitions, the cell",
        "objects.pkl": "notebook objects that cannot be written as source, loaded by train.py",
        "manifest.json": "the bundle manifest: sha256 of train.py and its files, what was captured and how",
        "nbtrain.toml": "the job spec: resources, strategy, backend, image, tracking, checkpoints, parameters",
        "requirements.txt": "pinned versions, from the exporting environment, of the packages the job imports",
        "README.md": "this file",
        SBATCH_NAME: "the job as a Slurm batch job that needs no nbtrain: `sbatch job.sbatch`",
        GPU_CONFIG: "the Accelerate config every GPU command here passes (`--config_file`): the gang and strategy",
        CPU_CONFIG: "the Accelerate config of a CPU (gloo) launch",
    }
    for rel in files:
        if rel in described:
            lines.append(f"- `{rel}`: {described[rel]}")
        elif rel.startswith("files/"):
            lines.append(f"- `{rel}`: a file attached to the bundle")
    if k8s:
        lines.append("- `k8s/`: Kubernetes manifests, one per flavor: " + ", ".join(f"`{f}`" for f in k8s.values()))
    else:
        lines.append(f"- `k8s/README.md`: why there are no Kubernetes manifests ({k8s_missing})")
    return lines


def _notes_section(computed: Sequence[str], local_modules: Sequence[str], notes: Sequence[str]) -> list[str]:
    """README's "Notes" (nothing when there are none): notes, values re-run on the ranks, local modules."""
    lines: list[str] = []
    if not (computed or local_modules or notes):
        return lines
    lines += ["", "## Notes", ""]
    lines += [f"- {note}" for note in notes]
    if computed:
        lines.append("- Re-run on every rank before the cell (they were computed in the notebook): "
                     + "; ".join(computed))
    if local_modules:
        lines.append("- Imports modules no installed distribution provides (copy them next to train.py): "
                     + ", ".join(f"`{m}`" for m in local_modules))
    return lines
