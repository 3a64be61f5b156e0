"""The one table of job options (pure and cheap to import: no IPython, no torch, no backend).

Every option a user can set on a job is one :class:`Option` row of :data:`OPTIONS`: the JobSpec field it
sets, its flag, the kind of value, its default (read from JobSpec itself), help, its nbtrain.toml key, the
backends that honour it and the surfaces that accept it (``%%distributed``: ``"magic"``; ``nbtrain submit``:
``"cli"``). Everything else is generated from the table, so an option is declared once:

- the flags of ``%%distributed`` and ``nbtrain submit``/``manifests`` (:func:`add_arguments`,
  :func:`build_parser`) and the JobSpec they give (:func:`spec_from_namespace`);
- the nbtrain.toml mapping, both directions (:func:`spec_to_toml`, :func:`spec_from_toml`);
- honour-or-refuse per backend (:func:`unsupported_options`, :func:`check_supported`);
- the JupyterLab dialog's data (:func:`dialog_data`, checked in as ``labextension/src/plugin/options.generated.ts``)
  and the options reference in README.md and docs/options.md (:func:`markdown`).

``python -m nbtrain.flags --write`` regenerates the checked-in copies (unit tests fail while one is stale);
``--markdown``, ``--json`` and ``--typescript`` print them. A new backend (e.g. ``slurm``) is one entry of
:data:`BACKENDS` plus its name in the ``backends`` of each option it honours.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import MISSING, Field, dataclass, fields
from pathlib import Path
from typing import Any, Literal

from nbtrain.errors import SpecError
from nbtrain.spec import LIMITS, NUMBER_LIMITS, JobSpec, choices_of

__all__ = [
    "BACKENDS", "EXCLUDED_FIELDS", "OPTIONS", "SURFACES", "TOML_TABLES", "BackendInfo", "Option", "TomlError",
    "add_arguments", "build_parser", "check_supported", "default_spec", "dialog_data", "given_options", "markdown",
    "option_for_flag", "options_for", "regenerated", "spec_from_namespace", "spec_from_toml", "spec_to_toml",
    "typescript", "unsupported_options",
]

Kind = Literal["int", "float", "str", "choice", "switch", "pairs", "tolerations"]
Surface = Literal["magic", "cli"]
SURFACES: tuple[Surface, ...] = ("magic", "cli")
_BOTH: frozenset[Surface] = frozenset(SURFACES)
_MAGIC: frozenset[Surface] = frozenset({"magic"})
_CLI: frozenset[Surface] = frozenset({"cli"})


@dataclass(frozen=True)
class BackendInfo:
    """A backend as refusals and the reference name it: ``title`` ("Kubernetes") and what it ``does``."""

    name: str
    title: str
    does: str


#: Every backend the table knows, in column order.
BACKENDS: Mapping[str, BackendInfo] = {
    "local": BackendInfo("local", "local", "runs processes on this machine"),
    "kubernetes": BackendInfo("kubernetes", "Kubernetes", "runs pods on a cluster"),
    "slurm": BackendInfo("slurm", "Slurm", "runs a batch job on a Slurm cluster"),
}
# Options the shared `accelerate launch` command (nbtrain/backends/launch.py) or the per-rank environment
# carry: every backend that launches through it honours them.
_LAUNCH = frozenset({"local", "kubernetes", "slurm"})
_K8S = frozenset({"kubernetes"})
_SLURM = frozenset({"slurm"})
# the nbtrain supervisor (local: on this machine; Slurm: inside the allocation) restarts gangs, keeps checkpoints
# on a shared filesystem and watches the ranks' progress
_CHECKPOINTS = frozenset({"local", "slurm"})
_SUPERVISED = frozenset({"local", "slurm"})
_LOCAL = frozenset({"local"})


def _field_default(f: Field[Any]) -> Any:
    return f.default_factory() if f.default_factory is not MISSING else f.default


_FIELD_DEFAULTS: dict[str, Any] = {f.name: _field_default(f) for f in fields(JobSpec)}


@dataclass(frozen=True)
class Option:
    """One job option.

    ``field`` is the JobSpec field it sets (None: a surface-only option such as ``--out``); ``default``
    is then JobSpec's own default. ``backends`` are the backends that honour it (None: not a backend
    matter, applied before any backend sees the job: capture, tracking, naming). ``why``/``instead``
    finish a refusal for a backend outside ``backends``. ``merge``: repeated NAME=VALUE flags add to
    the base spec's mapping (nbtrain.toml's) instead of replacing it. ``env``: the environment
    variable that changes the default.
    """

    flag: str
    kind: Kind
    help: str
    field: str | None = None
    toml: str | None = None  # "table.key" in nbtrain.toml
    backends: frozenset[str] | None = None
    surfaces: frozenset[Surface] = _BOTH
    metavar: str | None = None
    default: Any = None
    default_text: str | None = None  # how the reference shows the default, when the value alone says little
    env: str | None = None
    merge: bool = False
    why: str | None = None
    instead: str | None = None

    def __post_init__(self) -> None:
        if self.field is not None:
            object.__setattr__(self, "default", _FIELD_DEFAULTS[self.field])

    @property
    def dest(self) -> str:
        """The argparse destination: the JobSpec field, else the flag's name (``dry_run``)."""
        return self.field or self.flag.lstrip("-").replace("-", "_")

    @property
    def choices(self) -> tuple[str, ...]:
        """Accepted values of a ``choice`` option (JobSpec's own list)."""
        return choices_of(self.field) if self.field else ()

    @property
    def limits(self) -> tuple[int, int] | None:
        """Inclusive range of an ``int`` option (JobSpec's own), else None."""
        return LIMITS.get(self.field) if self.field else None

    @property
    def number_limits(self) -> tuple[float, float] | None:
        """``(above, highest)`` of a ``float`` option (JobSpec's own: finite, > above, <= highest), else None."""
        return NUMBER_LIMITS.get(self.field) if self.field else None

    @property
    def default_json(self) -> Any:
        """The default as JSON (enums as their value, mappings as objects, tuples as lists)."""
        value = self.default
        value = getattr(value, "value", value)
        return list(value) if isinstance(value, tuple) else dict(value) if isinstance(value, Mapping) else value


def _o(flag: str, kind: Kind, help: str, **kw: Any) -> Option:
    return Option(flag, kind, help, **kw)


#: The table. Order: what the reference and ``--help`` show.
OPTIONS: tuple[Option, ...] = (
    _o("--nodes", "int", "Number of nodes (one launcher each).", field="nodes", toml="job.nodes",
       backends=_LAUNCH, metavar="N"),
    _o("--gpus", "int", "GPUs per node; on a machine without GPUs, worker processes per node (CPU, gloo); "
       "0 runs one CPU process per node.", field="procs_per_node", toml="job.gpus", backends=_LAUNCH, metavar="N"),
    _o("--name", "str", "Run name, used in the run id (digits-3fa9c2).", field="name", toml="job.name",
       metavar="NAME"),
    _o("--backend", "choice", "Where the gang runs: processes on this machine, pods on Kubernetes, or a Slurm batch job.",
       field="backend", toml="job.backend", env="NBTRAIN_BACKEND",
       default_text="local (NBTRAIN_BACKEND sets it)"),
    _o("--device", "choice", "auto: GPUs when present, else CPU (gloo).", field="device", toml="job.device",
       backends=_LAUNCH),
    _o("--strategy", "choice", "How Accelerate distributes the model.", field="strategy", toml="job.strategy",
       backends=_LAUNCH),
    _o("--mixed-precision", "choice", "Accelerate's mixed precision (GPU only).", field="mixed_precision",
       toml="job.mixed_precision", backends=_LAUNCH),
    _o("--fsdp-version", "int", "FSDP implementation (--strategy fsdp): 2 (per-parameter sharding, recommended) "
       "or 1.", field="fsdp_version", toml="strategy.fsdp_version", backends=_LAUNCH, metavar="1|2"),
    _o("--fsdp-sharding", "choice", "What FSDP shards (--strategy fsdp): full = parameters, gradients and "
       "optimizer state; shard-grad-op = gradients and optimizer state; hybrid = full within a node, replicated "
       "across nodes.", field="fsdp_sharding", toml="strategy.fsdp_sharding", backends=_LAUNCH),
    _o("--fsdp-auto-wrap", "choice", "FSDP's wrap policy (--strategy fsdp): the model's transformer blocks "
       "(its _no_split_modules), modules above 100M parameters, or the root only.", field="fsdp_auto_wrap",
       toml="strategy.fsdp_auto_wrap", backends=_LAUNCH),
    _o("--fsdp-state-dict", "choice", "How FSDP checkpoints (--strategy fsdp): one file per rank, or a full "
       "state dict gathered on rank 0.", field="fsdp_state_dict", toml="strategy.fsdp_state_dict",
       backends=_LAUNCH),
    _o("--fsdp-cpu-offload", "switch", "Offload FSDP parameters to CPU memory (--strategy fsdp).",
       field="fsdp_cpu_offload", toml="strategy.fsdp_cpu_offload", backends=_LAUNCH),
    _o("--zero-stage", "int", "DeepSpeed ZeRO stage 0-3 (--strategy deepspeed).", field="zero_stage",
       toml="strategy.zero_stage", backends=_LAUNCH, metavar="0-3"),
    _o("--zero-offload", "choice", "Where ZeRO offloads optimizer state, and at stage 3 parameters "
       "(--strategy deepspeed).", field="zero_offload", toml="strategy.zero_offload", backends=_LAUNCH),
    _o("--gradient-accumulation", "int", "DeepSpeed's gradient accumulation steps (--strategy deepspeed; "
       "1-1024).", field="gradient_accumulation", toml="strategy.gradient_accumulation", backends=_LAUNCH,
       metavar="N"),
    _o("--accelerate-config", "str", "Your team's Accelerate config (YAML): merged under nbtrain's launch "
       "settings (gang shape, rendezvous, strategy flags win), every key it sets shown by --dry-run.",
       field="accelerate_config", toml="strategy.accelerate_config", backends=_SUPERVISED, metavar="FILE",
       default_text="none", why="cannot read a file of this machine inside the pods yet"),
    _o("--image", "str", "Container image of the pods.", field="image", toml="job.image", backends=_K8S,
       metavar="IMAGE", default_text="NBTRAIN_K8S_IMAGE (required: Python, torch, accelerate)"),
    _o("--env", "pairs", "Environment variable for every rank (repeatable).", field="env", toml="job.env",
       backends=_LAUNCH, metavar="NAME=VALUE", merge=True),
    _o("--timeout", "float", "Fail the run after this many seconds (at most 30 days).", field="timeout_s",
       toml="job.timeout_s", backends=_LAUNCH, metavar="SECONDS", default_text="none"),
    _o("--collective-timeout", "float", "Seconds before a hung collective fails the gang (torch's own is 30 min; "
       "at most 24 hours).", field="collective_timeout_s", toml="job.collective_timeout_s", backends=_LAUNCH,
       metavar="SECONDS"),
    _o("--stall-after", "float", "Report the gang stalled when a rank (or all) made no progress (step, metric, "
       "collective) for this long, and dump every thread's stack into its log (at most 24 hours).",
       field="stall_after_s", toml="job.stall_after_s", backends=_SUPERVISED, metavar="SECONDS",
       why="does not watch the ranks' progress in pods yet"),
    _o("--hang-timeout", "float", "Fail the run when the gang made no progress for this long, naming the stuck "
       "ranks and the collective they wait in (at most 7 days).", field="hang_timeout_s", toml="job.hang_timeout_s",
       backends=_SUPERVISED, metavar="SECONDS", default_text="none",
       why="does not watch the ranks' progress in pods yet; use --timeout"),
    _o("--max-capture-mb", "float", "Cap on the pickled notebook objects the bundle carries (at most 10240 MB).",
       field="max_capture_mb", toml="job.max_capture_mb", metavar="MB"),
    _o("--allow-secrets", "switch", "Ship values that look like secrets anyway.", field="allow_secrets",
       toml="job.allow_secrets"),
    _o("--oversubscribe", "switch", "Start a CPU gang of more than 4 processes per CPU core of this machine "
       "(refused otherwise: it would crawl).", field="oversubscribe", toml="job.oversubscribe", backends=_LOCAL,
       why="schedules pods by their requests, not by this machine's cores"),
    _o("--experiment", "str", "MLflow experiment.", field="experiment", toml="tracking.experiment",
       metavar="NAME", default_text="the notebook's name"),
    _o("--no-tracking", "switch", "Don't record the run in MLflow (NBTRAIN_TRACKING=0 turns tracking off "
       "everywhere).", field="tracking", toml="tracking.enabled", default_text="tracked (NBTRAIN_TRACKING=0: not)"),
    _o("--checkpoint-dir", "str", "Checkpoint root for nbtrain.save_checkpoint.", field="checkpoint_dir",
       toml="job.checkpoint_dir", backends=_CHECKPOINTS, metavar="DIR", default_text="inside the run's directory",
       why="gives its ranks no checkpoint directory"),
    _o("--max-restarts", "int", "Restart a failed gang from its last checkpoint up to K times.",
       field="max_restarts", toml="job.max_restarts", backends=_CHECKPOINTS, metavar="K",
       why="does not restart a failed gang", instead="resume it by hand with %nbtrain resume RUN"),
    _o("--keep-checkpoints", "int", "Complete checkpoints kept per run.", field="keep_checkpoints",
       toml="job.keep_checkpoints", backends=_CHECKPOINTS, metavar="N", why="keeps no checkpoints"),
    _o("--namespace", "str", "Kubernetes namespace.", field="namespace", toml="kubernetes.namespace",
       backends=_K8S, metavar="NAMESPACE", default_text="the kubeconfig context's"),
    _o("--queue", "str", "Kueue LocalQueue: the job waits for all-or-nothing admission.", field="queue",
       toml="kubernetes.queue", backends=_K8S, metavar="QUEUE"),
    _o("--flavor", "choice", "Kubernetes object: an Indexed Job, a Kubeflow PyTorchJob or a JobSet.",
       field="flavor", toml="kubernetes.flavor", backends=_K8S),
    _o("--service-account", "str", "Service account of the pods.", field="service_account",
       toml="kubernetes.service_account", backends=_K8S, metavar="NAME"),
    _o("--cpu", "str", "CPU request per pod, e.g. 8.", field="cpu", toml="kubernetes.cpu", backends=_K8S,
       metavar="CPUS"),
    _o("--memory", "str", "Memory request per pod, e.g. 64Gi.", field="memory", toml="kubernetes.memory",
       backends=_K8S, metavar="QUANTITY"),
    _o("--node-selector", "pairs", "Node selector label of the pods (repeatable).", field="node_selector",
       toml="kubernetes.node_selector", backends=_K8S, metavar="KEY=VALUE", merge=True),
    _o("--toleration", "tolerations", "Pod toleration, EFFECT one of NoSchedule, PreferNoSchedule, NoExecute "
       "(repeatable).", field="tolerations", toml="kubernetes.tolerations", backends=_K8S,
       metavar="KEY[=VALUE]:EFFECT"),
    _o("--secret-env", "pairs", "Environment variable filled from a Kubernetes Secret, by reference "
       "(repeatable).", field="secret_env", toml="kubernetes.secret_env", backends=_K8S,
       metavar="NAME=SECRET/KEY", merge=True),
    _o("--partition", "str", "Slurm partition the job runs in.", field="partition", toml="slurm.partition",
       backends=_SLURM, metavar="PARTITION", default_text="the cluster's default"),
    _o("--account", "str", "Slurm account charged for the job.", field="account", toml="slurm.account",
       backends=_SLURM, metavar="ACCOUNT", default_text="your default account"),
    _o("--qos", "str", "Slurm quality of service.", field="qos", toml="slurm.qos", backends=_SLURM, metavar="QOS"),
    _o("--time", "str", "Slurm time limit (MINUTES, HH:MM:SS or DAYS-HH[:MM[:SS]]); Slurm ends the job after it and "
       "the run fails naming the limit.", field="time_limit", toml="slurm.time", backends=_SLURM, metavar="LIMIT",
       default_text="the partition's"),
    _o("--constraint", "str", "Slurm node features the nodes must have, e.g. a100|h100.", field="constraint",
       toml="slurm.constraint", backends=_SLURM, metavar="FEATURES"),
    _o("--reservation", "str", "Slurm reservation to run in.", field="reservation", toml="slurm.reservation",
       backends=_SLURM, metavar="NAME"),
    _o("--exclusive", "switch", "Whole nodes for the job (sbatch --exclusive).", field="exclusive",
       toml="slurm.exclusive", backends=_SLURM),
    _o("--sbatch", "pairs", "Extra #SBATCH line, as OPTION=VALUE for --OPTION=VALUE (repeatable), e.g. "
       "mem-per-cpu=4G.", field="sbatch_options", toml="slurm.sbatch", backends=_SLURM, metavar="OPTION=VALUE",
       merge=True),
    # Surface-only options: they steer the submission, not the job.
    _o("--dry-run", "switch", "Show what would ship and the launch plan; submit nothing.", default=False),
    _o("--out", "str", "Bind the Run handle to this variable name in the notebook.", surfaces=_MAGIC,
       metavar="VAR"),
    _o("--block", "switch", "Wait for the run to end; raise if it fails.", surfaces=_MAGIC, default=False),
    _o("--no-monitor", "switch", "Do not display the live monitor widget under the cell.", surfaces=_MAGIC,
       default=False),
    _o("--resume", "str", "Relaunch RUN (its own spec) with this cell's code as a new attempt, from its latest "
       "checkpoint; with --dry-run, print that attempt's plan.", surfaces=_MAGIC, metavar="RUN"),
    _o("--param", "pairs", "Set a parameter of the job (repeatable).", surfaces=_CLI, metavar="NAME=VALUE"),
    _o("--wait", "switch", "Wait for the run; exit with its outcome.", surfaces=_CLI, default=False),
    _o("--accept-edits", "switch", "Submit files edited after export (re-seals them).", surfaces=_CLI,
       default=False),
    _o("--quiet", "switch", "No progress line while waiting.", surfaces=_CLI, default=False),
    _o("--json", "switch", "Print the run as JSON.", surfaces=_CLI, default=False),
)

#: JobSpec fields that deliberately have no option, with the reason (none today: every field is an option).
EXCLUDED_FIELDS: Mapping[str, str] = {}


def options_for(surface: Surface, *, spec_only: bool = False) -> list[Option]:
    """The options ``surface`` accepts, in table order (``spec_only``: only those that set a JobSpec field)."""
    return [o for o in OPTIONS if surface in o.surfaces and (o.field is not None or not spec_only)]


def option_for_flag(flag: str) -> Option:
    """The option spelled ``flag`` (``--gpus``); KeyError when the table has none."""
    for option in OPTIONS:
        if option.flag == flag:
            return option
    raise KeyError(flag)


# ---------------------------------------------------------------------------------------------- argparse


def _help(option: Option) -> str:
    text = option.help
    shown = _default_text(option)
    if option.field is not None and option.kind != "switch" and shown:
        text += f" Default: {shown}."
    owners = [b for b in BACKENDS if option.backends is not None and b in option.backends]
    if option.backends is not None and len(owners) < len(BACKENDS):
        text += f" [{' and '.join(owners) or 'no'} backend{'s' if len(owners) > 1 else ''} only]"
    return text.replace("%", "%%")  # argparse formats help with %


def add_arguments(parser: argparse.ArgumentParser, surface: Surface, *, spec_only: bool = False,
                  job_title: str | None = None) -> None:
    """Add the flags of ``surface`` to ``parser``; with ``job_title``, the job options go in a group of that title.

    Job options default to "not given" (``argparse.SUPPRESS``), so :func:`spec_from_namespace` knows
    which were typed; surface-only options get their plain default (``args.out is None``). Choices are
    not given to argparse: JobSpec checks them (case-insensitively) and names the allowed values.
    """
    group = parser.add_argument_group(job_title) if job_title else parser
    for option in options_for(surface, spec_only=spec_only):
        target = group if option.field is not None else parser
        kwargs: dict[str, Any] = {"dest": option.dest, "help": _help(option)}
        kwargs["default"] = argparse.SUPPRESS if option.field is not None else option.default
        if option.kind == "switch":
            kwargs.update(action="store_const", const=not option.default)
        else:
            kwargs["metavar"] = option.metavar or "|".join(option.choices) or None
            if option.kind in ("pairs", "tolerations"):
                kwargs["action"] = "append"
            else:
                kwargs["type"] = {"int": int, "float": float}.get(option.kind, str)
        target.add_argument(option.flag, **kwargs)


def build_parser(surface: Surface, *, parser_class: type[argparse.ArgumentParser] = argparse.ArgumentParser,
                 spec_only: bool = False, **parser_kwargs: Any) -> argparse.ArgumentParser:
    """A parser accepting exactly the flags of ``surface`` (``parser_class``: e.g. IPython's MagicArgumentParser)."""
    parser = parser_class(**parser_kwargs)
    add_arguments(parser, surface, spec_only=spec_only)
    return parser


def given_options(ns: argparse.Namespace) -> list[Option]:
    """The job options (those with a JobSpec field) present in ``ns``: the ones the user typed."""
    return [o for o in OPTIONS if o.field is not None and hasattr(ns, o.dest)]


def _pairs(option: Option, items: Iterable[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise SpecError(f"{option.flag} {item!r}: write it as {option.metavar}, e.g. {_example(option)}.")
        out[key] = value
    return out


def _example(option: Option) -> str:
    return {"--env": "--env NCCL_DEBUG=INFO", "--node-selector": "--node-selector pool=gpu",
            "--secret-env": "--secret-env HF_TOKEN=hf-credentials/token"}.get(option.flag, f"{option.flag} A=1")


def _tolerations(items: Iterable[str]) -> tuple[dict[str, str], ...]:
    out = []
    for item in items:
        head, sep, effect = item.rpartition(":")
        key, eq, value = head.partition("=")
        if not sep or not key or effect not in ("NoSchedule", "PreferNoSchedule", "NoExecute"):
            raise SpecError(
                f"--toleration {item!r}: write it as KEY[=VALUE]:EFFECT with EFFECT one of NoSchedule, "
                "PreferNoSchedule, NoExecute, e.g. nvidia.com/gpu:NoSchedule."
            )
        toleration = {"key": key, "effect": effect, "operator": "Equal" if eq else "Exists"}
        if eq:
            toleration["value"] = value
        out.append(toleration)
    return tuple(out)


def default_spec() -> JobSpec:
    """JobSpec's defaults with the environment's (``NBTRAIN_BACKEND``) applied: what a bare magic runs."""
    changes: dict[str, Any] = {}
    for option in OPTIONS:
        if option.field and option.env and os.environ.get(option.env, "").strip():
            changes[option.field] = os.environ[option.env].strip()
    try:
        return JobSpec(**changes)
    except SpecError as error:
        names = ", ".join(f"{o.env}={os.environ[o.env]!r}" for o in OPTIONS if o.env and o.field in changes)
        raise SpecError(f"{names} (a default taken from the environment): {error} Fix or unset it.") from None


def spec_from_namespace(ns: argparse.Namespace, base: JobSpec | None = None) -> JobSpec:
    """The JobSpec of parsed flags: ``base`` (default :func:`default_spec`) with every typed option applied.

    Repeatable NAME=VALUE options marked ``merge`` add to ``base``'s mapping. Raises :class:`SpecError`
    naming the flag, the value and the allowed values (the magic turns it into UsageError).
    """
    spec = base if base is not None else default_spec()
    changes: dict[str, Any] = {}
    for option in given_options(ns):
        assert option.field is not None  # given_options returns job options only
        value = getattr(ns, option.dest)
        if option.kind == "pairs":
            value = _pairs(option, value or [])
            if option.merge:
                value = {**getattr(spec, option.field), **value}
        elif option.kind == "tolerations":
            value = _tolerations(value or [])
        changes[option.field] = value
    return spec.with_changes(**changes) if changes else spec


# ---------------------------------------------------------------------------------------------- backends


def _owners(names: Sequence[str]) -> str:
    """"a Kubernetes option" (a backend named after a product), else "an option of the local backend only"."""
    if len(names) == 1 and BACKENDS[names[0]].title != names[0]:
        return f"a {BACKENDS[names[0]].title} option"
    return f"an option of the {' and '.join(names)} backend{'s' if len(names) > 1 else ''} only"


def _shown(value: Any) -> str:
    """A value as the user typed it (switches show nothing beyond the flag)."""
    value = getattr(value, "value", value)
    if isinstance(value, bool):
        return ""
    if isinstance(value, Mapping):
        return " ".join(f"{k}={v}" for k, v in value.items())
    if isinstance(value, tuple):  # tolerations
        return " ".join(f"{t.get('key')}{'=' + t['value'] if 'value' in t else ''}:{t.get('effect')}" for t in value)
    return str(value)


def unsupported_options(spec: JobSpec, backend: str) -> list[str]:
    """One message per option of ``spec`` that differs from its default and that ``backend`` does not honour.

    Pure. Each message names the flag (and its value), the backend, and what to do instead, e.g.
    "--namespace team-a is a Kubernetes option; the local backend runs processes on this machine: drop it
    or use --backend kubernetes." An empty list: ``backend`` honours every option ``spec`` sets. A backend
    the table does not know honours only the options that are no backend's matter (name, tracking...).
    """
    info = BACKENDS.get(backend, BackendInfo(backend, backend, "is not declared in nbtrain.flags"))
    messages = []
    for option in OPTIONS:
        if option.field is None or option.backends is None or backend in option.backends:
            continue
        value = getattr(spec, option.field)
        if value == option.default:
            continue
        owners = [b for b in BACKENDS if b in option.backends]
        shown = _shown(value)
        fix = "drop it" + (f" ({option.instead})" if option.instead else "")
        fix += f" or use --backend {' or '.join(owners)}" if owners else ""
        messages.append(f"{option.flag}{' ' + shown if shown else ''} is {_owners(owners)}; the {info.name} backend "
                        f"{option.why or info.does}: {fix}.")
    return messages


def check_supported(spec: JobSpec, backend: str) -> None:
    """Raise :class:`SpecError` carrying every :func:`unsupported_options` message (one per line); else nothing."""
    messages = unsupported_options(spec, backend)
    if len(messages) == 1:
        raise SpecError(messages[0])
    if messages:
        raise SpecError(f"the {backend} backend cannot honour {len(messages)} options; nothing was started:\n"
                        + "\n".join(f"  {m}" for m in messages))


# ---------------------------------------------------------------------------------------------- nbtrain.toml

_TOML_TYPES: Mapping[str, tuple[type, ...]] = {
    "int": (int,), "float": (int, float), "str": (str,), "choice": (str,), "switch": (bool,),
    "pairs": (dict,), "tolerations": (list,),
}
TOML_TABLES = ("job", "strategy", "tracking", "kubernetes", "slurm")


class TomlError(SpecError):
    """A bad nbtrain.toml value; ``table``/``key`` locate it when known, ``from_spec``: JobSpec refused it."""

    def __init__(self, message: str, table: str | None = None, key: str | None = None, from_spec: bool = False):
        super().__init__(message)
        self.table, self.key, self.from_spec = table, key, from_spec


def spec_to_toml(spec: JobSpec) -> dict[str, dict[str, Any]]:
    """``{table: {key: value}}`` of ``spec`` for nbtrain.toml (None and empty values left out: TOML has no null)."""
    values = spec.to_dict()
    tables: dict[str, dict[str, Any]] = {}
    for option in OPTIONS:
        if option.toml is None or option.field is None:
            continue
        value = values[option.field]
        if value is None or (isinstance(value, (dict, list)) and not value):
            continue
        table, key = option.toml.split(".")
        tables.setdefault(table, {})[key] = value
    return {t: tables[t] for t in TOML_TABLES if t in tables}


def spec_from_toml(data: Mapping[str, Mapping[str, Any]]) -> JobSpec:
    """Inverse of :func:`spec_to_toml` (tables other than :data:`TOML_TABLES` are ignored here).

    Raises :class:`TomlError` for unknown keys, values of the wrong type and values JobSpec refuses.
    """
    by_key = {tuple(o.toml.split(".")): o for o in OPTIONS if o.toml}
    kwargs: dict[str, Any] = {}
    for table in TOML_TABLES:
        for key, value in data.get(table, {}).items():
            option = by_key.get((table, key))
            if option is None or option.field is None:
                known = ", ".join(k for t, k in by_key if t == table)
                raise TomlError(f"unknown key {key!r} in [{table}]; known keys: {known}.", table, key)
            types = _TOML_TYPES[option.kind]
            if not isinstance(value, types) or (bool not in types and isinstance(value, bool)):
                raise TomlError(f"{table}.{key} = {value!r} is a {type(value).__name__}; expected "
                                f"{' or '.join(t.__name__ for t in types)}.", table, key)
            kwargs[option.field] = tuple(value) if isinstance(value, list) else value
    try:
        return JobSpec(**kwargs)
    except SpecError as error:
        message = str(error)
        option = next((o for o in OPTIONS if o.toml and message.startswith(o.flag + ":")), None)
        if option is None or option.toml is None:
            raise TomlError(message) from None
        table, key = option.toml.split(".")
        raise TomlError(message, table, key, from_spec=True) from None


# ---------------------------------------------------------------------------------------------- generated text


def dialog_data() -> dict[str, Any]:
    """JSON-serialisable description of the ``%%distributed`` options for the JupyterLab dialog."""
    options = {}
    for option in options_for("magic"):
        limits = option.limits or option.number_limits  # a float's "min" is exclusive: it must be above it
        options[option.flag] = {
            "field": option.field, "type": option.kind, "choices": list(option.choices),
            "default": option.default_json, "min": limits[0] if limits else None,
            "max": limits[1] if limits else None, "help": option.help,
            "backends": None if option.backends is None else [b for b in BACKENDS if b in option.backends],
            "toml": option.toml, "repeatable": option.kind in ("pairs", "tolerations"),
        }
    backends = [{"name": b.name, "title": b.title, "does": b.does} for b in BACKENDS.values()]
    return {"backends": backends, "options": options}


def typescript() -> str:
    """labextension/src/plugin/options.generated.ts: :func:`dialog_data` as a typed constant."""
    data = dialog_data()
    def one(value: Any) -> str:  # one entry per line: diffs show which option changed
        return json.dumps(value, ensure_ascii=False)

    backends = "".join(f"    {one(b)},\n" for b in data["backends"])
    options = "".join(f"    {one(flag)}: {one(o)},\n" for flag, o in data["options"].items())
    return ("// Generated from nbtrain/flags.py by `python -m nbtrain.flags --write`: do not edit by hand.\n"
            "/** The %%distributed options: flags, types, choices, defaults, ranges, help and backends. */\n"
            f"export const JOB_OPTIONS = {{\n  backends: [\n{backends}  ],\n  options: {{\n{options}  }},\n}} as const;\n")


def _default_text(option: Option) -> str:
    if option.default_text is not None:
        return option.default_text
    value = option.default_json
    if value is None or value == [] or value == {}:
        return ""
    if value is False:
        return "off"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def _type_text(option: Option) -> str:
    if option.choices:
        return " \\| ".join(option.choices)
    if option.limits:
        return f"integer {option.limits[0]}–{option.limits[1]}"
    if option.number_limits:
        return f"number > {option.number_limits[0]:g}, ≤ {option.number_limits[1]:.0f}"
    return {"int": "integer", "float": "number", "str": "text", "switch": "switch",
            "pairs": f"{option.metavar}, repeatable", "tolerations": f"{option.metavar}, repeatable"}[option.kind]


def markdown() -> str:
    """The options reference: one Markdown table (flag, type, default, TOML key, one column per backend, help)."""
    head = ["flag", "type", "default", "TOML key", *BACKENDS, "help"]
    rows = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for option in OPTIONS:
        flag = f"`{option.flag}`" + (f" {option.metavar}" if option.metavar else "")
        where = {_MAGIC: "Notebook only. ", _CLI: "`nbtrain submit` only. "}.get(option.surfaces, "")
        cells = [flag.replace("|", "\\|"), _type_text(option), _default_text(option) or "—",
                 f"`{option.toml}`" if option.toml else "—",
                 *("yes" if option.backends is None or b in option.backends else "no" for b in BACKENDS),
                 where + option.help]
        rows.append("| " + " | ".join(cells) + " |")
    intro = ("Generated from `nbtrain/flags.py` by `python -m nbtrain.flags --write`; do not edit by hand. "
             "`%%distributed` takes every option not marked otherwise; `nbtrain submit` and `nbtrain manifests` take "
             "the job options as overrides of `nbtrain.toml`. A backend marked \"no\" refuses a job that sets the "
             "option, before anything starts.")
    return intro + "\n\n" + "\n".join(rows) + "\n"


BEGIN, END = "<!-- options:begin -->", "<!-- options:end -->"
#: Checked-in generated files, relative to the repository root: path -> how its generated part is written.
GENERATED = {"README.md": "markdown", "docs/options.md": "markdown",
             "labextension/src/plugin/options.generated.ts": "typescript"}


def regenerated(path: str, text: str) -> str:
    """``text`` (the current content of the generated file ``path``) with its generated part brought up to date."""
    if GENERATED[path] == "typescript":
        return typescript()
    start, end = text.find(BEGIN), text.find(END)
    if start < 0 or end < start:
        raise SpecError(f"{path}: the markers {BEGIN} and {END} are missing; put them where the options go.")
    return text[: start + len(BEGIN)] + "\n" + markdown() + text[end:]


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m nbtrain.flags --markdown|--json|--typescript|--write [ROOT]``."""
    parser = argparse.ArgumentParser(prog="python -m nbtrain.flags", description="Print or write the options reference.")
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--markdown", action="store_true", help="print the options reference (Markdown)")
    mode.add_argument("--json", action="store_true", help="print the dialog's data (JSON)")
    mode.add_argument("--typescript", action="store_true", help="print options.generated.ts")
    mode.add_argument("--write", metavar="ROOT", nargs="?", const=".",
                      help="update README.md, docs/options.md and options.generated.ts under ROOT (default .)")
    args = parser.parse_args(argv)
    if args.write is None:
        text = markdown() if args.markdown else typescript() if args.typescript else json.dumps(dialog_data(), indent=2)
        print(text.rstrip("\n"))
        return 0
    for name in GENERATED:
        path = Path(args.write) / name
        old = path.read_text(encoding="utf-8") if path.exists() else ""
        new = regenerated(name, old)
        if new != old:
            path.write_text(new, encoding="utf-8")
            print(f"updated {path}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
