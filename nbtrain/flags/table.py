"""The table of job options: one :class:`Option` row per option, and the backends it names (pure, cheap).

See :mod:`nbtrain.flags` for what is generated from it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import MISSING, Field, dataclass, fields
from typing import Any, Literal

from nbtrain.registry import backend_names
from nbtrain.spec import LIMITS, NUMBER_LIMITS, JobSpec, choices_of

__all__ = [
    "CLI_ONLY", "EXCLUDED_FIELDS", "MAGIC_ONLY", "OPTIONS", "SURFACES", "TITLES", "BackendInfo", "Capability", "Kind",
    "Option", "Surface", "backend_info", "installed_backends", "option_for_flag", "options_for",
]

Kind = Literal["int", "float", "str", "choice", "switch", "pairs", "tolerations", "list"]
Surface = Literal["magic", "cli"]
#: A :class:`nbtrain.backends.base.Capabilities` flag through which a backend the table does not name honours an option.
Capability = Literal["checkpoints", "restarts"]
SURFACES: tuple[Surface, ...] = ("magic", "cli")
_BOTH: frozenset[Surface] = frozenset(SURFACES)
MAGIC_ONLY: frozenset[Surface] = frozenset({"magic"})
CLI_ONLY: frozenset[Surface] = frozenset({"cli"})


@dataclass(frozen=True)
class BackendInfo:
    """A backend as refusals and the reference name it: ``title`` ("Kubernetes") and what it ``does``."""

    name: str
    title: str
    does: str


#: How the reference and refusals name the built-in backends, in column order. Which backends exist is not decided
#: here: it is the entry-point group (:func:`installed_backends`); a backend installed later is named by its name.
TITLES: Mapping[str, BackendInfo] = {
    "local": BackendInfo("local", "local", "runs processes on this machine"),
    "kubernetes": BackendInfo("kubernetes", "Kubernetes", "runs pods on a cluster"),
    "slurm": BackendInfo("slurm", "Slurm", "runs a batch job on a Slurm cluster"),
}


def backend_info(name: str) -> BackendInfo:
    """How refusals and the reference name backend ``name`` (one the table has no title for: by its name)."""
    return TITLES.get(name) or BackendInfo(name, name, "does not declare it in its Capabilities")


def installed_backends(*, builtin: bool = False) -> list[BackendInfo]:
    """The installed backends (entry-point group ``nbtrain.backends``): the titled ones in column order, then the
    others by name. ``builtin``: only nbtrain's own, what checked-in generated files show (they must not depend on
    what else is installed where they are written)."""
    names = backend_names(builtin=builtin)
    return [TITLES[n] for n in TITLES if n in names] + [backend_info(n) for n in names if n not in TITLES]


# Generic options (``backends=_EVERY``): the shared `accelerate launch` command (nbtrain/backends/launch.py) or the
# per-rank environment carries them, and every backend honours them (the Backend contract), those installed later too.
_EVERY = None
_K8S = frozenset({"kubernetes"})
_SLURM = frozenset({"slurm"})
# the nbtrain supervisor (local: on this machine; Slurm: inside the allocation) restarts gangs, keeps checkpoints
# on a shared filesystem and watches the ranks' progress
# on Kubernetes through a PersistentVolumeClaim every pod mounts (--volume): see _NEEDS_VOLUME
_CHECKPOINTS = frozenset({"local", "slurm", "kubernetes"})
_NEEDS_VOLUME: Mapping[str, tuple[str, str]] = {"kubernetes": (
    "volumes", "keeps checkpoints only on a volume every pod mounts, and restarts only from them")}
_SUPERVISED = frozenset({"local", "slurm"})
_LOCAL = frozenset({"local"})


def _field_default(f: Field[Any]) -> Any:
    return f.default_factory() if f.default_factory is not MISSING else f.default


_FIELD_DEFAULTS: dict[str, Any] = {f.name: _field_default(f) for f in fields(JobSpec)}


@dataclass(frozen=True)
class Option:
    """One job option.

    ``field`` is the JobSpec field it sets (None: a surface-only option such as ``--out``); ``default``
    is then JobSpec's own default. ``backends`` are the built-in backends that honour a backend-specific option;
    None: every backend honours it, those installed later too (a generic option: part of the Backend contract, or
    no backend's matter, applied before any backend sees the job: capture, tracking, naming). A backend outside
    ``backends`` honours a backend-specific option only when it declares it: the flag in its
    ``Capabilities.options``, or the ``capability`` flag of its Capabilities set. ``why``/``instead``
    finish a refusal for a backend outside ``backends``. ``needs``: a backend of ``backends`` that honours the
    option only together with another option (Kubernetes checkpoints need ``--volume``), and why. ``merge``:
    repeated NAME=VALUE flags add to the base spec's mapping (nbtrain.toml's) instead of replacing it. ``env``:
    the environment variable that changes the default.
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
    #: backend -> (JobSpec field, why): that backend honours the option only when the field is set too
    needs: Mapping[str, tuple[str, str]] | None = None
    #: the Capabilities flag through which a backend outside ``backends`` honours it (checkpoints, restarts)
    capability: Capability | None = None

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

    @property
    def default_shown(self) -> str:
        """How ``--help`` and the reference show the default ("" when there is nothing to show)."""
        if self.default_text is not None:
            return self.default_text
        value = self.default_json
        if value is None or value == [] or value == {}:
            return ""
        if value is False:
            return "off"
        if isinstance(value, float) and value.is_integer():
            return str(int(value))
        return str(value)


def _o(flag: str, kind: Kind, help: str, **kw: Any) -> Option:
    return Option(flag, kind, help, **kw)


#: The table. Order: what the reference and ``--help`` show.
OPTIONS: tuple[Option, ...] = (
    _o("--nodes", "int", "Number of nodes (one launcher each).", field="nodes", toml="job.nodes",
       backends=_EVERY, metavar="N"),
    _o("--gpus", "int", "GPUs per node; on a machine without GPUs, worker processes per node (CPU, gloo); "
       "0 runs one CPU process per node.", field="procs_per_node", toml="job.gpus", backends=_EVERY, metavar="N"),
    _o("--name", "str", "Run name, used in the run id (digits-3fa9c2).", field="name", toml="job.name",
       metavar="NAME"),
    _o("--backend", "choice", "Where the gang runs: processes on this machine, pods on Kubernetes, or a Slurm batch job.",
       field="backend", toml="job.backend", env="NBTRAIN_BACKEND",
       default_text="local (NBTRAIN_BACKEND sets it)"),
    _o("--device", "choice", "auto: GPUs when present, else CPU (gloo).", field="device", toml="job.device",
       backends=_EVERY),
    _o("--strategy", "choice", "How Accelerate distributes the model.", field="strategy", toml="job.strategy",
       backends=_EVERY),
    _o("--mixed-precision", "choice", "Accelerate's mixed precision (GPU only).", field="mixed_precision",
       toml="job.mixed_precision", backends=_EVERY),
    _o("--fsdp-version", "int", "FSDP implementation (--strategy fsdp): 2 (per-parameter sharding, recommended) "
       "or 1.", field="fsdp_version", toml="strategy.fsdp_version", backends=_EVERY, metavar="1|2"),
    _o("--fsdp-sharding", "choice", "What FSDP shards (--strategy fsdp): full = parameters, gradients and "
       "optimizer state; shard-grad-op = gradients and optimizer state; hybrid = full within a node, replicated "
       "across nodes.", field="fsdp_sharding", toml="strategy.fsdp_sharding", backends=_EVERY),
    _o("--fsdp-auto-wrap", "choice", "FSDP's wrap policy (--strategy fsdp): the model's transformer blocks "
       "(its _no_split_modules), modules above 100M parameters, or the root only.", field="fsdp_auto_wrap",
       toml="strategy.fsdp_auto_wrap", backends=_EVERY),
    _o("--fsdp-state-dict", "choice", "How FSDP checkpoints (--strategy fsdp): one file per rank, or a full "
       "state dict gathered on rank 0.", field="fsdp_state_dict", toml="strategy.fsdp_state_dict",
       backends=_EVERY),
    _o("--fsdp-cpu-offload", "switch", "Offload FSDP parameters to CPU memory (--strategy fsdp).",
       field="fsdp_cpu_offload", toml="strategy.fsdp_cpu_offload", backends=_EVERY),
    _o("--zero-stage", "int", "DeepSpeed ZeRO stage 0-3 (--strategy deepspeed).", field="zero_stage",
       toml="strategy.zero_stage", backends=_EVERY, metavar="0-3"),
    _o("--zero-offload", "choice", "Where ZeRO offloads optimizer state, and at stage 3 parameters "
       "(--strategy deepspeed).", field="zero_offload", toml="strategy.zero_offload", backends=_EVERY),
    _o("--gradient-accumulation", "int", "DeepSpeed's gradient accumulation steps (--strategy deepspeed; "
       "1-1024).", field="gradient_accumulation", toml="strategy.gradient_accumulation", backends=_EVERY,
       metavar="N"),
    _o("--accelerate-config", "str", "Your team's Accelerate config (YAML): merged under nbtrain's launch "
       "settings (gang shape, rendezvous, strategy flags win), every key it sets shown by --dry-run.",
       field="accelerate_config", toml="strategy.accelerate_config", backends=_SUPERVISED, metavar="FILE",
       default_text="none", why="cannot read a file of this machine inside the pods yet"),
    _o("--image", "str", "Container image of the pods.", field="image", toml="job.image", backends=_K8S,
       metavar="IMAGE", default_text="NBTRAIN_K8S_IMAGE (required: Python, torch, accelerate)"),
    _o("--env", "pairs", "Environment variable for every rank (repeatable).", field="env", toml="job.env",
       backends=_EVERY, metavar="NAME=VALUE", merge=True),
    _o("--timeout", "float", "Fail the run after this many seconds (at most 30 days).", field="timeout_s",
       toml="job.timeout_s", backends=_EVERY, metavar="SECONDS", default_text="none"),
    _o("--collective-timeout", "float", "Seconds before a hung collective fails the gang (torch's own is 30 min; "
       "at most 24 hours).", field="collective_timeout_s", toml="job.collective_timeout_s", backends=_EVERY,
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
    _o("--env-public", "list", "Name of an --env variable whose value may be shown (repeatable): in MLflow params "
       "and to REST users who may not start runs, every other --env value is ***.", field="env_public",
       toml="job.env_public", metavar="NAME"),
    _o("--oversubscribe", "switch", "Start a CPU gang of more than 4 processes per CPU core of this machine "
       "(refused otherwise: it would crawl).", field="oversubscribe", toml="job.oversubscribe", backends=_LOCAL,
       why="schedules pods by their requests, not by this machine's cores"),
    _o("--warm", "switch", "Run on a warm gang: the first run starts one agent per node that imports torch and "
       "Accelerate once and stays up; later --warm runs of the same shape fork their ranks from it (a fresh process "
       "per rank and run) and reach their first step in a fraction of a cold start. One run at a time per gang.",
       field="warm", toml="job.warm", backends=_LOCAL, why="keeps no warm gangs yet"),
    _o("--warm-ttl", "float", "A warm gang idle this long ends (at most 7 days); it also ends with the kernel "
       "that started it, or with %nbtrain gang stop.", field="warm_ttl_s", toml="job.warm_ttl_s", backends=_LOCAL,
       metavar="SECONDS", why="keeps no warm gangs yet"),
    _o("--experiment", "str", "MLflow experiment.", field="experiment", toml="tracking.experiment",
       metavar="NAME", default_text="the notebook's name"),
    _o("--no-tracking", "switch", "Don't record the run in MLflow (NBTRAIN_TRACKING=0 turns tracking off "
       "everywhere).", field="tracking", toml="tracking.enabled", default_text="tracked (NBTRAIN_TRACKING=0: not)"),
    _o("--checkpoint-dir", "str", "Checkpoint root for nbtrain.save_checkpoint.", field="checkpoint_dir",
       toml="job.checkpoint_dir", backends=_CHECKPOINTS, metavar="DIR",
       default_text="inside the run's directory (Kubernetes: nbtrain-checkpoints on the first --volume)",
       why="gives its ranks no checkpoint directory", needs=_NEEDS_VOLUME, capability="checkpoints"),
    _o("--max-restarts", "int", "Restart a failed gang from its last checkpoint up to K times.",
       field="max_restarts", toml="job.max_restarts", backends=_CHECKPOINTS, metavar="K",
       why="does not restart a failed gang", instead="resume it by hand with %nbtrain resume RUN",
       needs=_NEEDS_VOLUME, capability="restarts"),
    _o("--keep-checkpoints", "int", "Complete checkpoints kept per run.", field="keep_checkpoints",
       toml="job.keep_checkpoints", backends=_CHECKPOINTS, metavar="N", why="keeps no checkpoints",
       needs=_NEEDS_VOLUME, capability="checkpoints"),
    _o("--namespace", "str", "Kubernetes namespace.", field="namespace", toml="kubernetes.namespace",
       backends=_K8S, metavar="NAMESPACE", default_text="the kubeconfig context's"),
    _o("--queue", "str", "Kueue LocalQueue: the job waits for all-or-nothing admission.", field="queue",
       toml="kubernetes.queue", backends=_K8S, metavar="QUEUE"),
    _o("--flavor", "choice", "Kubernetes object: an Indexed Job, a Kubeflow PyTorchJob, a JobSet or a Kubeflow "
       "Trainer v2 TrainJob (on the runtime NBTRAIN_K8S_TRAINJOB_RUNTIME names).",
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
    _o("--volume", "list", "PersistentVolumeClaim mounted on every pod of every attempt at an absolute path "
       "(repeatable): shared storage for checkpoints (--checkpoint-dir under it), --max-restarts and resume, and "
       "data.", field="volumes", toml="kubernetes.volumes", backends=_K8S, metavar="CLAIM:/MOUNT/PATH",
       why="reads and writes this machine's files: give a directory instead (--checkpoint-dir)"),
    _o("--image-pull-secret", "list", "Secret (type docker-registry) the kubelet pulls --image with (repeatable).",
       field="image_pull_secrets", toml="kubernetes.image_pull_secrets", backends=_K8S, metavar="SECRET"),
    _o("--priority-class", "str", "PriorityClass of the pods (their scheduling priority and preemption).",
       field="priority_class", toml="kubernetes.priority_class", backends=_K8S, metavar="NAME"),
    _o("--shm-size", "str", "Size limit of the pods' /dev/shm (a memory-backed emptyDir; it counts against the "
       "pod's memory), e.g. 16Gi.", field="shm_size", toml="kubernetes.shm_size", backends=_K8S, metavar="QUANTITY",
       default_text="no limit of its own"),
    _o("--label", "pairs", "Extra label on every object and pod the run creates, e.g. cost-center=ml (repeatable).",
       field="labels", toml="kubernetes.labels", backends=_K8S, metavar="KEY=VALUE", merge=True),
    _o("--annotation", "pairs", "Extra annotation on every object and pod the run creates, e.g. "
       "sidecar.istio.io/inject=false (repeatable).", field="annotations", toml="kubernetes.annotations",
       backends=_K8S, metavar="KEY=VALUE", merge=True),
    _o("--gpu-resource", "str", "Extended resource the pods request their GPUs as (--gpus per pod), e.g. amd.com/gpu "
       "or gpu.intel.com/i915; the nodes' device plugin defines it.", field="gpu_resource",
       toml="kubernetes.gpu_resource", backends=_K8S, metavar="NAME"),
    _o("--workload-priority", "str", "Kueue WorkloadPriorityClass of the workload (its priority in the queue and "
       "for preemption); needs --queue.", field="workload_priority", toml="kubernetes.workload_priority",
       backends=_K8S, metavar="NAME", needs={"kubernetes": (
           "queue", "gives a workload a Kueue priority only when Kueue admits it (without --queue Kueue ignores it)")}),
    _o("--spread-by", "str", "Spread the run's pods evenly over this node-label topology (at most one pod more in "
       "any domain than in the least loaded), e.g. kubernetes.io/hostname (a node each) or "
       "topology.kubernetes.io/zone.", field="spread_by", toml="kubernetes.spread_by", backends=_K8S,
       metavar="TOPOLOGY_KEY"),
    _o("--pod-template", "str", "YAML PodTemplateSpec (metadata and spec) merged into every pod with Kubernetes' "
       "strategic-merge rules, for what no flag sets (affinity, sidecars, extra env or devices); changes that break "
       "nbtrain's pods or the restricted profile are refused; --dry-run shows the result (docs/kubernetes.md).",
       field="pod_template", toml="kubernetes.pod_template", backends=_K8S, metavar="FILE", default_text="none"),
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
    _o("--out", "str", "Bind the Run handle to this variable name in the notebook.", surfaces=MAGIC_ONLY,
       metavar="VAR"),
    _o("--block", "switch", "Wait for the run to end; raise if it fails.", surfaces=MAGIC_ONLY, default=False),
    _o("--no-monitor", "switch", "Do not display the live monitor widget under the cell.", surfaces=MAGIC_ONLY,
       default=False),
    _o("--resume", "str", "Relaunch RUN (its own spec) with this cell's code as a new attempt, from its latest "
       "checkpoint; with --dry-run, print that attempt's plan.", surfaces=MAGIC_ONLY, metavar="RUN"),
    # Sweep options (docs/sweeps.md): any of them makes the cell (or the job) a sweep of trials.
    _o("--sweep", "str", "Run a sweep of trials over --sweep-param values: grid (every combination) or random "
       "(--trials draws); each trial is an ordinary run.", metavar="grid|random", default_text="grid"),
    _o("--sweep-param", "pairs", "A parameter the sweep varies (repeatable): NAME=V1,V2,... (values), NAME=LOW..HIGH "
       "or NAME=log:LOW..HIGH (random only). NAME: a plain value the cell uses, as --param takes it.",
       metavar="NAME=VALUES"),
    _o("--trials", "int", "How many trials a random sweep draws.", metavar="N"),
    _o("--seed", "int", "Seed of a random sweep's draws (the same seed, the same trials).", metavar="N",
       default_text="0"),
    _o("--objective", "str", "The metric (nbtrain.log) a sweep compares trials by: early stop and the best trial.",
       metavar="METRIC"),
    _o("--objective-mode", "str", "Whether a lower (min) or higher (max) --objective is better.", metavar="min|max",
       default_text="min"),
    _o("--concurrency", "int", "How many trials of a sweep run at once.", metavar="N", default_text="1"),
    _o("--early-stop", "str", "Stop a sweep's trials that fall behind: median (worse than the median of completed "
       "trials at the same step), asha (outside the best third at rungs --grace-steps x 3^k) or none.",
       metavar="median|asha|none", default_text="median with --objective"),
    _o("--grace-steps", "int", "A sweep's early stop judges a trial only from this step on (asha: the first rung).",
       metavar="N", default_text="3"),
    _o("--param", "pairs", "Set a parameter of the job (repeatable).", surfaces=CLI_ONLY, metavar="NAME=VALUE"),
    _o("--wait", "switch", "Wait for the run; exit with its outcome.", surfaces=CLI_ONLY, default=False),
    _o("--accept-edits", "switch", "Submit files edited after export (re-seals them).", surfaces=CLI_ONLY,
       default=False),
    _o("--quiet", "switch", "No progress line while waiting.", surfaces=CLI_ONLY, default=False),
    _o("--json", "switch", "Print the run as JSON.", surfaces=CLI_ONLY, default=False),
    _o("--profile", "str", "Start from this profile's options (`nbtrain templates list`); flags override them, "
       "except those it locks. --dry-run shows where each value came from (docs/templates.md).", metavar="NAME"),
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
