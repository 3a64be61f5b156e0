"""One table of job options: the magic, the CLI, nbtrain.toml, the lab dialog and the docs all come from it."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from dataclasses import fields
from pathlib import Path
from typing import Any

import pytest

from nbtrain import flags
from nbtrain.backends.base import Capabilities
from nbtrain.errors import SpecError
from nbtrain.registry import backend_names
from nbtrain.spec import JobSpec

ROOT = Path(__file__).resolve().parents[2]
REGENERATE = "run `python -m nbtrain.flags --write` in the repository root"

FULL = JobSpec(
    name="full", nodes=3, procs_per_node=4, device="cpu", strategy="fsdp", mixed_precision="bf16",
    fsdp_version=1, fsdp_sharding="hybrid", fsdp_auto_wrap="size", fsdp_state_dict="full", fsdp_cpu_offload=True,
    accelerate_config="team.yaml",
    backend="kubernetes", image="reg/img:1", env={"A": "b"}, checkpoint_dir="/ckpt", max_restarts=2,
    keep_checkpoints=5, timeout_s=60.0, collective_timeout_s=30.0, stall_after_s=60.0, hang_timeout_s=600.0,
    tracking=False, experiment="exp",
    max_capture_mb=10.0, allow_secrets=True, env_public=("A",), oversubscribe=True, warm=True, warm_ttl_s=600.0, namespace="ns", queue="q", flavor="jobset",
    service_account="sa", node_selector={"pool": "gpu"}, cpu="8", memory="64Gi",
    tolerations=({"key": "k", "operator": "Exists", "effect": "NoSchedule"},), secret_env={"T": "s/k"},
    volumes=("data:/ckpt", "cache:/cache"), image_pull_secrets=("creds",), priority_class="high", shm_size="8Gi",
    labels={"team": "ml"}, annotations={"example.com/note": "x y"}, gpu_resource="amd.com/gpu",
    workload_priority="high", spread_by="kubernetes.io/hostname", pod_template="pod.yaml", partition="gpu", account="team", qos="high", time_limit="2:00:00", constraint="a100", reservation="r1",
    exclusive=True, sbatch_options={"mail-type": "END"},
)


def _flags_of(parser: argparse.ArgumentParser) -> set[str]:
    return {s for a in parser._actions for s in a.option_strings if s not in ("-h", "--help")}


def _subparser(parser: argparse.ArgumentParser, name: str) -> argparse.ArgumentParser:
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return sub.choices[name]


# ---------------------------------------------------------------------------------------------- the table


def test_every_jobspec_field_is_an_option_or_excluded_with_a_reason() -> None:
    declared = {o.field for o in flags.OPTIONS if o.field is not None}
    excluded = set(flags.EXCLUDED_FIELDS)
    assert not declared & excluded
    assert {f.name for f in fields(JobSpec)} == declared | excluded
    assert all(reason.strip() for reason in flags.EXCLUDED_FIELDS.values())


def test_flags_and_toml_keys_are_unique_and_every_job_option_has_a_toml_key() -> None:
    spelled = [o.flag for o in flags.OPTIONS]
    assert len(spelled) == len(set(spelled))
    keys = [o.toml for o in flags.OPTIONS if o.toml]
    assert len(keys) == len(set(keys))
    assert all(o.toml for o in flags.OPTIONS if o.field is not None)
    assert not any(o.toml for o in flags.OPTIONS if o.field is None)


def test_defaults_are_jobspecs_own() -> None:
    spec = JobSpec()
    for option in flags.OPTIONS:
        if option.field is not None:
            assert getattr(spec, option.field) == option.default, option.flag


def test_the_table_and_jobspec_know_the_same_backends() -> None:
    # which backends exist is the entry-point group; the table only titles the built-ins (and names them per option)
    assert set(flags.TITLES) == set(backend_names(builtin=True)) <= set(backend_names())
    assert flags.option_for_flag("--backend").choices == backend_names()
    for option in flags.OPTIONS:
        assert option.backends is None or option.backends <= set(flags.TITLES), option.flag


def test_resume_from_is_gone_but_old_records_still_load() -> None:
    assert "resume_from" not in {f.name for f in fields(JobSpec)}
    assert JobSpec.from_dict({**JobSpec(nodes=2).to_dict(), "resume_from": "/old"}) == JobSpec(nodes=2)


# ---------------------------------------------------------------------------------------------- parsers


def test_the_magic_accepts_exactly_the_tables_flags() -> None:
    from nbtrain.magics.distributed import DistributedMagics

    parser = DistributedMagics.distributed.parser
    assert _flags_of(parser) == {o.flag for o in flags.options_for("magic")}
    assert "--help" not in _flags_of(parser) and "--param" not in _flags_of(parser)
    assert "--checkpoint-dir" in (DistributedMagics.distributed.__doc__ or "")  # %%distributed? lists them


def test_the_cli_accepts_exactly_the_tables_flags() -> None:
    from nbtrain.cli import build_parser

    parser = build_parser()
    assert _flags_of(_subparser(parser, "submit")) == {o.flag for o in flags.options_for("cli")}
    spec_flags = {o.flag for o in flags.options_for("cli", spec_only=True)}
    assert _flags_of(_subparser(parser, "manifests")) == spec_flags | {"--accept-edits"}
    assert spec_flags == {o.flag for o in flags.options_for("magic", spec_only=True)}


def test_a_bare_line_gives_jobspecs_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NBTRAIN_BACKEND", raising=False)
    ns = flags.build_parser("magic").parse_args([])
    assert flags.given_options(ns) == []
    assert flags.spec_from_namespace(ns) == JobSpec()
    assert (ns.out, ns.dry_run, ns.resume) == (None, False, None)


def test_every_flag_reaches_its_field() -> None:
    parser = flags.build_parser("magic")
    ns = parser.parse_args([
        "--name", "full", "--nodes", "3", "--gpus", "4", "--device", "CPU", "--strategy", "fsdp",
        "--mixed-precision", "bf16", "--fsdp-version", "1", "--fsdp-sharding", "hybrid", "--fsdp-auto-wrap", "size",
        "--fsdp-state-dict", "full", "--fsdp-cpu-offload", "--accelerate-config", "team.yaml", "--backend", "kubernetes", "--image", "reg/img:1", "--env", "A=b",
        "--checkpoint-dir", "/ckpt", "--max-restarts", "2", "--keep-checkpoints", "5", "--timeout", "60",
        "--collective-timeout", "30", "--stall-after", "60", "--hang-timeout", "600", "--no-tracking", "--experiment", "exp", "--max-capture-mb", "10",
        "--allow-secrets", "--env-public", "A", "--oversubscribe", "--warm", "--warm-ttl", "600", "--namespace", "ns", "--queue", "q", "--flavor", "jobset", "--service-account", "sa",
        "--node-selector", "pool=gpu", "--cpu", "8", "--memory", "64Gi", "--toleration", "k:NoSchedule",
        "--secret-env", "T=s/k", "--volume", "data:/ckpt", "--volume", "cache:/cache", "--image-pull-secret", "creds",
        "--priority-class", "high", "--shm-size", "8Gi", "--label", "team=ml", "--annotation", "example.com/note=x y",
        "--gpu-resource", "amd.com/gpu", "--workload-priority", "high", "--spread-by", "kubernetes.io/hostname",
        "--pod-template", "pod.yaml",
        "--partition", "gpu", "--account", "team", "--qos", "high", "--time", "2:00:00",
        "--constraint", "a100", "--reservation", "r1", "--exclusive", "--sbatch", "mail-type=END",
    ])
    deepspeed = {"--zero-stage", "--zero-offload", "--gradient-accumulation"}  # another strategy's options
    assert {o.flag for o in flags.given_options(ns)} == \
        {o.flag for o in flags.options_for("magic", spec_only=True)} - deepspeed
    assert flags.spec_from_namespace(ns) == FULL


def test_deepspeed_flags_reach_their_fields_and_other_strategies_refuse_them() -> None:
    parser = flags.build_parser("magic")
    ns = parser.parse_args(["--strategy", "deepspeed", "--zero-stage", "3", "--zero-offload", "nvme",
                            "--gradient-accumulation", "4"])
    spec = flags.spec_from_namespace(ns)
    assert (spec.zero_stage, spec.zero_offload.value, spec.gradient_accumulation) == (3, "nvme", 4)
    with pytest.raises(SpecError, match="--zero-stage applies to --strategy deepspeed"):
        flags.spec_from_namespace(parser.parse_args(["--zero-stage", "3"]))
    with pytest.raises(SpecError, match="--fsdp-cpu-offload applies to --strategy fsdp"):
        flags.spec_from_namespace(parser.parse_args(["--strategy", "deepspeed", "--fsdp-cpu-offload"]))


def test_the_environment_sets_the_backends_default(monkeypatch: pytest.MonkeyPatch) -> None:
    parser = flags.build_parser("magic")
    monkeypatch.setenv("NBTRAIN_BACKEND", "kubernetes")
    assert flags.spec_from_namespace(parser.parse_args([])).backend == "kubernetes"
    assert flags.spec_from_namespace(parser.parse_args(["--backend", "local"])).backend == "local"
    monkeypatch.setenv("NBTRAIN_BACKEND", "slurmish")
    with pytest.raises(SpecError, match=r"NBTRAIN_BACKEND='slurmish' .*installed backends are: kubernetes, local, slurm"):
        flags.spec_from_namespace(parser.parse_args([]))


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--device", "tpu"], "--device: unknown value 'tpu'; choose one of: auto, gpu, cpu"),
        (["--flavor", "helm"], "--flavor: unknown value 'helm'; choose one of: job, pytorchjob, jobset"),
        (["--nodes", "0"], "--nodes: 0 is out of range; use a value from 1 to 1024"),
        (["--env", "NOEQUALS"], "--env 'NOEQUALS': write it as NAME=VALUE, e.g. --env NCCL_DEBUG=INFO"),
        (["--node-selector", "=x"], "--node-selector '=x': write it as KEY=VALUE"),
        (["--toleration", "k:Sometimes"], "--toleration 'k:Sometimes': write it as KEY[=VALUE]:EFFECT"),
        (["--secret-env", "T=nokey"], "--secret-env: T='nokey' must be NAME=SECRET/KEY"),
    ],
)
def test_bad_values_name_the_flag_and_the_allowed_values(argv: list[str], message: str) -> None:
    with pytest.raises(SpecError) as caught:
        flags.spec_from_namespace(flags.build_parser("magic").parse_args(argv))
    assert message in str(caught.value)


def test_typed_options_override_a_base_and_mappings_merge() -> None:
    base = JobSpec(name="base", nodes=2, env={"A": "1"}, tolerations=({"key": "x", "effect": "NoSchedule"},))
    ns = flags.build_parser("cli").parse_args(["--env", "B=2", "--env", "A=3", "--toleration", "k:NoExecute"])
    spec = flags.spec_from_namespace(ns, base=base)
    assert (spec.name, spec.nodes, spec.env) == ("base", 2, {"A": "3", "B": "2"})
    assert spec.tolerations == ({"key": "k", "effect": "NoExecute", "operator": "Exists"},)  # a list: replaced
    assert flags.spec_from_namespace(flags.build_parser("cli").parse_args([]), base=base) is base


# ---------------------------------------------------------------------------------------------- nbtrain.toml


def test_toml_round_trip() -> None:
    import tomli_w

    from nbtrain.tomlfile import parse_toml

    data = flags.spec_to_toml(FULL)
    assert set(data) == set(flags.TOML_TABLES)
    assert data["job"]["gpus"] == 4 and data["tracking"]["enabled"] is False
    assert flags.spec_from_toml(parse_toml(tomli_w.dumps(data), "the round trip")) == FULL
    defaults = flags.spec_to_toml(JobSpec())
    assert "image" not in defaults["job"] and "env" not in defaults["job"]  # None and {}: left out (TOML has no null)
    assert defaults["kubernetes"] == {"flavor": "job", "gpu_resource": "nvidia.com/gpu"}
    assert defaults["tracking"] == {"enabled": True}
    assert flags.spec_from_toml({}) == JobSpec()


@pytest.mark.parametrize(
    ("data", "where", "message"),
    [
        ({"job": {"nodez": 1}}, ("job", "nodez", False), "unknown key 'nodez' in [job]; known keys: nodes, gpus, name"),
        ({"job": {"nodes": True}}, ("job", "nodes", False), "job.nodes = True is a bool; expected int"),
        ({"kubernetes": {"flavor": 5}}, ("kubernetes", "flavor", False), "kubernetes.flavor = 5 is a int"),
        ({"job": {"gpus": 99}}, ("job", "gpus", True), "--gpus: 99 is out of range"),
    ],
)
def test_toml_errors_say_where(data: Any, where: tuple[str, str, bool], message: str) -> None:
    with pytest.raises(flags.TomlError) as caught:
        flags.spec_from_toml(data)
    assert (caught.value.table, caught.value.key, caught.value.from_spec) == where
    assert message in str(caught.value)


# ---------------------------------------------------------------------------------------------- honour or refuse


def test_defaults_are_honoured_everywhere() -> None:
    for backend in flags.TITLES:
        assert flags.unsupported_options(JobSpec(), backend) == []
        flags.check_supported(JobSpec(), backend)


def test_local_refuses_kubernetes_options() -> None:
    k8s = JobSpec(image="img:1", namespace="team-a", queue="q", flavor="jobset", service_account="sa",
                  node_selector={"pool": "gpu"}, tolerations=({"key": "k", "effect": "NoSchedule"},),
                  cpu="8", memory="64Gi", secret_env={"T": "s/k"}, volumes=("data:/data",))
    messages = flags.unsupported_options(k8s, "local")
    assert [m.split()[0] for m in messages] == [
        "--image", "--namespace", "--queue", "--flavor", "--service-account", "--cpu", "--memory",
        "--node-selector", "--toleration", "--secret-env", "--volume",
    ]
    assert messages[1] == ("--namespace team-a is a Kubernetes option; the local backend runs processes on this "
                           "machine: drop it or use --backend kubernetes.")
    assert flags.unsupported_options(k8s, "kubernetes") == []


def test_kubernetes_refuses_checkpoint_options_without_a_volume_naming_volume() -> None:
    spec = JobSpec(max_restarts=2, checkpoint_dir="/ckpt", keep_checkpoints=5)
    messages = flags.unsupported_options(spec, "kubernetes")
    assert [m.split()[0] for m in messages] == ["--checkpoint-dir", "--max-restarts", "--keep-checkpoints"]
    assert messages[1] == ("--max-restarts 2 on the kubernetes backend needs --volume: the kubernetes backend keeps "
                           "checkpoints only on a volume every pod mounts, and restarts only from them. Add --volume "
                           "CLAIM:/MOUNT/PATH, or drop --max-restarts.")
    assert flags.unsupported_options(spec, "local") == []
    assert flags.unsupported_options(spec.with_changes(volumes=("data:/ckpt",)), "kubernetes") == []


def test_options_that_are_no_backends_matter_are_never_refused() -> None:
    spec = JobSpec(name="x", tracking=False, experiment="e", max_capture_mb=1.0, allow_secrets=True)
    assert flags.unsupported_options(spec, "local") == flags.unsupported_options(spec, "kubernetes") == []
    # A backend nobody installed declares nothing: it honours those and the generic options, nothing else.
    assert flags.unsupported_options(spec.with_changes(nodes=2, strategy="fsdp", env={"A": "1"}), "ray") == []
    (message,) = flags.unsupported_options(JobSpec(namespace="ns"), "ray")
    assert message == ("--namespace ns is a Kubernetes option; the ray backend does not declare it in its "
                       "Capabilities: drop it or use --backend kubernetes.")


def test_a_backend_of_its_own_honours_what_its_capabilities_declare() -> None:
    declared = Capabilities(restarts=False, checkpoints=True, gpus=False, multi_node=False, shared_store=True,
                            options=frozenset({"--stall-after", "--image"}))
    honoured = JobSpec(stall_after_s=60.0, image="img:1", checkpoint_dir="/ckpt", keep_checkpoints=5)
    assert flags.unsupported_options(honoured, "team", declared) == []
    messages = flags.unsupported_options(JobSpec(nodes=2, device="gpu", max_restarts=1, warm=True), "team", declared)
    assert messages == [
        "--nodes 2: the team backend runs a gang on one node only (its Capabilities.multi_node is false): use "
        "--nodes 1, or another --backend.",
        "--device gpu: the team backend gives its ranks no GPU (its Capabilities.gpus is false): use --device cpu "
        "or auto, or another --backend.",
        "--warm is an option of the local backend only; the team backend does not declare it in its Capabilities: "
        "drop it or use --backend local.",
        "--max-restarts 1 is an option of the local, kubernetes and slurm backends only; the team backend does not "
        "restart a failed gang (its Capabilities.restarts is false): drop it (resume it by hand with %nbtrain "
        "resume RUN) or use --backend local, kubernetes or slurm.",
    ]


def test_the_built_ins_declare_through_the_table_and_their_capabilities_agree_with_it() -> None:
    from nbtrain.backends import backend_class

    for name in flags.TITLES:
        capabilities = backend_class(name).capabilities
        assert capabilities.options == frozenset(), name  # the table names what a built-in honours
        for option in flags.OPTIONS:
            if option.capability is not None:
                assert getattr(capabilities, option.capability) == (option.backends is None or name in option.backends)


def test_check_supported_raises_with_every_message() -> None:
    with pytest.raises(SpecError, match=r"^--namespace ns is a Kubernetes option"):
        flags.check_supported(JobSpec(namespace="ns"), "local")
    with pytest.raises(SpecError) as caught:
        flags.check_supported(JobSpec(namespace="ns", queue="q"), "local")
    lines = str(caught.value).splitlines()
    assert lines[0] == "the local backend cannot honour 2 options; nothing was started:"
    assert [line.split()[0] for line in lines[1:]] == ["--namespace", "--queue"]


# ---------------------------------------------------------------------------------------------- cheap imports


def test_the_cli_and_the_table_import_without_ipython() -> None:
    code = (
        "import sys, nbtrain.cli, nbtrain.flags\n"
        "nbtrain.cli.build_parser()\n"
        "heavy = sorted(m for m in sys.modules if m.split('.')[0] in ('IPython', 'torch', 'mlflow', 'kubernetes'))\n"
        "print(heavy)\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert result.stdout.strip() == "[]", result.stdout


# ---------------------------------------------------------------------------------------------- generated text


def test_dialog_data_is_json_and_describes_the_magic() -> None:
    data = json.loads(json.dumps(flags.dialog_data()))
    assert [b["name"] for b in data["backends"]] == list(flags.TITLES)
    assert set(data["options"]) == {o.flag for o in flags.options_for("magic")}
    gpus = data["options"]["--gpus"]
    assert (gpus["field"], gpus["default"], gpus["min"], gpus["max"]) == ("procs_per_node", 1, 0, 64)
    assert data["options"]["--strategy"]["choices"] == ["ddp", "fsdp", "deepspeed"]
    assert data["options"]["--namespace"]["backends"] == ["kubernetes"]


def test_markdown_has_one_row_per_option_and_a_column_per_backend() -> None:
    text = flags.markdown()
    header = next(line for line in text.splitlines() if line.startswith("| flag"))
    assert header == "| flag | type | default | TOML key | local | kubernetes | slurm | help |"
    rows = [line for line in text.splitlines() if line.startswith("| `--")]
    assert len(rows) == len(flags.OPTIONS)
    namespace = next(r for r in rows if r.startswith("| `--namespace`"))
    assert "| `kubernetes.namespace` | no | yes |" in namespace


def test_python_m_prints_the_markdown() -> None:
    result = subprocess.run([sys.executable, "-m", "nbtrain.flags", "--markdown"], capture_output=True, text=True,
                            timeout=60, check=True, cwd=ROOT)
    assert result.stdout == flags.markdown()


@pytest.mark.parametrize("path", sorted(flags.GENERATED))
def test_checked_in_copies_are_fresh(path: str) -> None:
    current = (ROOT / path).read_text(encoding="utf-8")
    assert flags.regenerated(path, current) == current, f"{path} is stale: {REGENERATE}"


def test_regenerating_replaces_only_the_marked_block() -> None:
    text = f"# Title\n\nkept\n{flags.BEGIN}\nold table\n{flags.END}\nafter\n"
    new = flags.regenerated("README.md", text)
    assert new.startswith("# Title\n\nkept\n" + flags.BEGIN) and new.endswith(flags.END + "\nafter\n")
    assert "old table" not in new and "| `--nodes` N |" in new
    with pytest.raises(SpecError, match="markers"):
        flags.regenerated("docs/options.md", "no markers here")


# ---------------------------------------------------------------------------------------------- %%distributed --resume




def _run_cell(ip: Any, source: str) -> Any:
    result = ip.run_cell(source, store_history=True)
    for error in (result.error_before_exec, result.error_in_exec):
        if error is not None:
            raise error
    return result.result


def test_resume_refuses_job_options_it_would_ignore(shell: Any) -> None:
    from IPython.core.error import UsageError

    from nbtrain.store import Store

    with pytest.raises(UsageError, match=r"--nodes, --backend would be ignored: a resumed run keeps its own spec"):
        _run_cell(shell, "%%distributed --resume digits-123 --nodes 2 --backend local --max-capture-mb 5\nx = 1\n")
    assert Store().ids() == []


def test_resume_dry_run_prints_the_next_attempts_plan_and_launches_nothing(
    shell: Any, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from nbtrain import client
    from nbtrain.store import Store

    calls: list[tuple[str, Any, Any]] = []

    class _Plan:
        def render(self) -> str:
            return "PLAN OF ATTEMPT 2"

    def plan_resume(run_id: str, bundle: Any, *, store: Any = None) -> _Plan:
        calls.append((run_id, bundle, store))
        return _Plan()

    def launched(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("--resume --dry-run attached to or relaunched the run")

    # plan_resume is the lead engineer's (nbtrain.client); this pins how the magic calls it.
    monkeypatch.setattr(client, "plan_resume", plan_resume, raising=False)
    monkeypatch.setattr(client, "attach", launched)
    assert _run_cell(shell, "%%distributed --resume digits-123 --dry-run\nx = 1\nx + 1\n") is None
    out = capsys.readouterr().out
    assert "PLAN OF ATTEMPT 2" in out
    [(run_id, bundle, store)] = calls
    assert run_id == "digits-123" and hasattr(bundle, "digest") and isinstance(store, Store)
    assert Store().ids() == []
