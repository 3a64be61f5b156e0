"""JobSpec: what to run and where, validated on construction (pure, no I/O).

A JobSpec is built once at the parsing edge (the magic, the decorator, the CLI) and never mutated.
Bad values raise :class:`~nbtrain.errors.SpecError` naming the field, the value and the allowed range.
"""

from __future__ import annotations

import enum
import math
import os
import re
from collections.abc import Mapping
from dataclasses import MISSING, asdict, dataclass, field, fields, replace
from typing import Any

from nbtrain.backends.slurm.sbatchopts import reserved_reason, resolve_option
from nbtrain.errors import SpecError
from nbtrain.registry import backend_names, unknown_backend

__all__ = [
    "FLAVORS", "LIMITS", "NUMBER_LIMITS", "STRATEGY_OPTIONS", "Device", "FsdpSharding", "FsdpStateDict",
    "FsdpWrap", "JobSpec", "MixedPrecision", "Strategy", "ZeroOffload", "choices_of", "sbatch_lines", "split_volume",
]

_NAME_RE = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_ENV_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# C0/C1 control characters and the Unicode line/paragraph separators: never in a run name
_CONTROL_RE = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029]")


class _Choice(str, enum.Enum):
    """A str enum whose ``parse`` turns user text into a member or a SpecError listing the choices."""

    @classmethod
    def parse(cls, value: str | _Choice, flag: str) -> Any:
        if isinstance(value, cls):
            return value
        text = str(value).strip().lower()
        for member in cls:
            if member.value == text:
                return member
        allowed = ", ".join(m.value for m in cls)
        raise SpecError(f"{flag}: unknown value {value!r}; choose one of: {allowed}.")


class Device(_Choice):
    """Where ranks compute. AUTO = GPUs when present, else CPU (gloo)."""

    AUTO = "auto"
    GPU = "gpu"
    CPU = "cpu"


class Strategy(_Choice):
    """How Accelerate distributes the model."""

    DDP = "ddp"
    FSDP = "fsdp"
    DEEPSPEED = "deepspeed"


class MixedPrecision(_Choice):
    """Accelerate's --mixed_precision values."""

    NO = "no"
    FP16 = "fp16"
    BF16 = "bf16"
    FP8 = "fp8"


class FsdpSharding(_Choice):
    """How FSDP shards: parameters, gradients and optimizer state (full), or only gradients and optimizer state."""

    FULL = "full"
    SHARD_GRAD_OP = "shard-grad-op"
    HYBRID = "hybrid"
    NO_SHARD = "no-shard"


class FsdpWrap(_Choice):
    """FSDP's auto-wrap policy: the model's transformer blocks, modules above a size, or the root only."""

    TRANSFORMER = "transformer"
    SIZE = "size"
    NONE = "none"


class FsdpStateDict(_Choice):
    """How FSDP checkpoints: one file per rank (sharded) or a gathered full state dict on rank 0."""

    SHARDED = "sharded"
    FULL = "full"


class ZeroOffload(_Choice):
    """Where DeepSpeed ZeRO offloads the optimizer state (and, at stage 3, the parameters)."""

    NONE = "none"
    CPU = "cpu"
    NVME = "nvme"


#: Kubernetes objects the kubernetes backend can create.
FLAVORS = ("job", "pytorchjob", "jobset", "trainjob")
#: Inclusive ranges of the whole-number fields: field -> (lowest, highest).
LIMITS: Mapping[str, tuple[int, int]] = {
    "nodes": (1, 1024),
    "procs_per_node": (0, 64),
    "max_restarts": (0, 100),
    "keep_checkpoints": (1, 1000),
    "fsdp_version": (1, 2),
    "zero_stage": (0, 3),
    "gradient_accumulation": (1, 1024),
}
#: Ranges of the number fields (seconds, megabytes): field -> (above, highest). A value must be finite, greater
#: than ``above`` and at most ``highest``: nothing downstream (a Kubernetes deadline, a process-group timeout, the
#: capture cap in bytes, a JSON reply) ever sees an infinity, a NaN or a number it cannot hold.
NUMBER_LIMITS: Mapping[str, tuple[float, float]] = {
    "timeout_s": (0.0, 30 * 24 * 3600.0),  # 30 days
    "collective_timeout_s": (0.0, 24 * 3600.0),  # 24 hours
    "max_capture_mb": (0.0, 10240.0),  # 10 GiB of pickled notebook objects
    "stall_after_s": (0.0, 24 * 3600.0),  # 24 hours
    "hang_timeout_s": (0.0, 7 * 24 * 3600.0),  # 7 days
    "warm_ttl_s": (0.0, 7 * 24 * 3600.0),  # 7 days
}
_ENUMS: Mapping[str, type[_Choice]] = {
    "device": Device, "strategy": Strategy, "mixed_precision": MixedPrecision, "fsdp_sharding": FsdpSharding,
    "fsdp_auto_wrap": FsdpWrap, "fsdp_state_dict": FsdpStateDict, "zero_offload": ZeroOffload,
}
#: Strategy options and the strategy each belongs to (set with another strategy: refused, never ignored).
STRATEGY_OPTIONS: Mapping[str, tuple[str, str]] = {
    "fsdp_version": ("--fsdp-version", "fsdp"),
    "fsdp_sharding": ("--fsdp-sharding", "fsdp"),
    "fsdp_auto_wrap": ("--fsdp-auto-wrap", "fsdp"),
    "fsdp_state_dict": ("--fsdp-state-dict", "fsdp"),
    "fsdp_cpu_offload": ("--fsdp-cpu-offload", "fsdp"),
    "zero_stage": ("--zero-stage", "deepspeed"),
    "zero_offload": ("--zero-offload", "deepspeed"),
    "gradient_accumulation": ("--gradient-accumulation", "deepspeed"),
}


def choices_of(field_name: str) -> tuple[str, ...]:
    """The values JobSpec accepts for ``field_name`` (empty for a field that is not a choice)."""
    if field_name in _ENUMS:
        return tuple(member.value for member in _ENUMS[field_name])
    if field_name == "backend":  # the installed backends (entry-point group nbtrain.backends), read once per process
        return backend_names()
    return {"flavor": FLAVORS}.get(field_name, ())


def tracking_default() -> bool:
    """MLflow tracking is on unless the environment says NBTRAIN_TRACKING=0 (or false/off/no)."""
    return os.environ.get("NBTRAIN_TRACKING", "1").strip().lower() not in ("0", "false", "off", "no")


def slugify(name: str) -> str:
    """Lower-case DNS-1123-ish slug of ``name`` (a–z, 0–9, '-'), at most 40 characters."""
    slug = re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")
    return slug[:40].strip("-") or "run"


@dataclass(frozen=True)
class JobSpec:
    """A distributed job: ``nodes`` x ``procs_per_node`` ranks running one bundle.

    ``procs_per_node`` is the magic's ``--gpus``: GPUs per node on a GPU machine, worker processes
    per node on CPU. ``env`` holds plain (non-secret) variables for every rank.
    """

    name: str = "run"
    nodes: int = 1
    procs_per_node: int = 1
    device: Device = Device.AUTO
    strategy: Strategy = Strategy.DDP
    mixed_precision: MixedPrecision = MixedPrecision.NO
    # Strategy options (FSDP, DeepSpeed): see STRATEGY_OPTIONS; a file of the team's own with accelerate_config.
    fsdp_version: int = 2
    fsdp_sharding: FsdpSharding = FsdpSharding.FULL
    fsdp_auto_wrap: FsdpWrap = FsdpWrap.TRANSFORMER
    fsdp_state_dict: FsdpStateDict = FsdpStateDict.SHARDED
    fsdp_cpu_offload: bool = False
    zero_stage: int = 2
    zero_offload: ZeroOffload = ZeroOffload.NONE
    gradient_accumulation: int = 1
    accelerate_config: str | None = None  # a YAML file merged under nbtrain's launch settings, shown by --dry-run
    backend: str = "local"
    image: str | None = None
    env: Mapping[str, str] = field(default_factory=dict)
    checkpoint_dir: str | None = None
    max_restarts: int = 0
    keep_checkpoints: int = 3
    timeout_s: float | None = None
    collective_timeout_s: float = 600.0
    stall_after_s: float = 300.0  # no progress for this long: the gang is reported stalled, stacks are dumped
    hang_timeout_s: float | None = None  # no progress for this long: the run fails, naming the stuck ranks
    tracking: bool = True
    experiment: str | None = None
    max_capture_mb: float = 50.0
    allow_secrets: bool = False
    env_public: tuple[str, ...] = ()  # --env names whose values may be shown (MLflow params, read-only REST users)
    oversubscribe: bool = False  # local backend: allow a CPU gang of more than 4 processes per core
    warm: bool = False  # local backend: run on a warm gang of per-node agents (nbtrain.warm)
    warm_ttl_s: float = 1800.0  # a warm gang idle this long ends
    # Kubernetes options (used by the kubernetes backend only).
    namespace: str | None = None
    queue: str | None = None
    flavor: str = "job"
    service_account: str | None = None
    node_selector: Mapping[str, str] = field(default_factory=dict)
    tolerations: tuple[Mapping[str, str], ...] = ()
    cpu: str | None = None
    memory: str | None = None
    secret_env: Mapping[str, str] = field(default_factory=dict)  # ENV_NAME -> "secret-name/key" (by reference)
    volumes: tuple[str, ...] = ()  # "CLAIM:/mount/path": a PersistentVolumeClaim mounted on every pod
    image_pull_secrets: tuple[str, ...] = ()  # Secrets (docker-registry) the kubelet pulls the image with
    priority_class: str | None = None  # the pods' PriorityClass
    shm_size: str | None = None  # sizeLimit of the pods' /dev/shm (a memory emptyDir), a quantity such as 16Gi
    labels: Mapping[str, str] = field(default_factory=dict)  # extra labels of every object and pod
    annotations: Mapping[str, str] = field(default_factory=dict)  # extra annotations of every object and pod
    gpu_resource: str = "nvidia.com/gpu"  # the extended resource GPUs are requested as (amd.com/gpu, ...)
    workload_priority: str | None = None  # Kueue WorkloadPriorityClass of the workload (with --queue)
    spread_by: str | None = None  # topology key the pods are spread over evenly (kubernetes.io/hostname: node each)
    pod_template: str | None = None  # YAML PodTemplateSpec fragment merged into every pod (strategic merge)
    # Slurm options (used by the slurm backend only): each becomes one #SBATCH line of the attempt's batch script.
    partition: str | None = None
    account: str | None = None
    qos: str | None = None
    time_limit: str | None = None  # Slurm's own formats: MINUTES, HH:MM:SS, D-HH[:MM[:SS]]
    constraint: str | None = None
    reservation: str | None = None
    exclusive: bool = False
    sbatch_options: Mapping[str, str] = field(default_factory=dict)  # extra #SBATCH --NAME=VALUE lines

    def __post_init__(self) -> None:
        object.__setattr__(self, "device", Device.parse(self.device, "--device"))
        object.__setattr__(self, "strategy", Strategy.parse(self.strategy, "--strategy"))
        object.__setattr__(
            self, "mixed_precision", MixedPrecision.parse(self.mixed_precision, "--mixed-precision")
        )
        for name, (flag, _) in STRATEGY_OPTIONS.items():
            if name in _ENUMS:
                object.__setattr__(self, name, _ENUMS[name].parse(getattr(self, name), flag))
        object.__setattr__(self, "env", dict(self.env))
        object.__setattr__(self, "node_selector", dict(self.node_selector))
        object.__setattr__(self, "secret_env", dict(self.secret_env))
        object.__setattr__(self, "sbatch_options", dict(self.sbatch_options))
        _check_slurm(self)
        for key, ref in self.secret_env.items():
            secret, sep, item = ref.partition("/")
            if not _ENV_NAME_RE.match(key) or not sep or not secret or not item:
                raise SpecError(
                    f"--secret-env: {key}={ref!r} must be NAME=SECRET/KEY (an environment variable filled from "
                    "key KEY of the Kubernetes Secret SECRET), e.g. HF_TOKEN=hf-credentials/token."
                )
        object.__setattr__(self, "tolerations", tuple(dict(t) for t in self.tolerations))
        object.__setattr__(self, "volumes", tuple(self.volumes))
        object.__setattr__(self, "image_pull_secrets", tuple(self.image_pull_secrets))
        object.__setattr__(self, "env_public", tuple(self.env_public))
        for name in self.env_public:
            if not isinstance(name, str) or not _ENV_NAME_RE.match(name):
                raise SpecError(f"--env-public: {name!r} is not an environment variable name; give the NAME of an "
                                "--env NAME=VALUE whose value may be shown.")
        object.__setattr__(self, "labels", dict(self.labels))
        object.__setattr__(self, "annotations", dict(self.annotations))
        for volume in self.volumes:
            split_volume(volume)
        _check_int("--nodes", self.nodes, *LIMITS["nodes"])
        _check_int("--gpus", self.procs_per_node, *LIMITS["procs_per_node"])
        _check_int("--max-restarts", self.max_restarts, *LIMITS["max_restarts"])
        _check_int("--keep-checkpoints", self.keep_checkpoints, *LIMITS["keep_checkpoints"])
        self._check_strategy_options()
        if not self.name or not self.name.strip():
            raise SpecError("--name: the run name is empty; give a short name such as 'digits'.")
        if len(self.name) > 100:
            raise SpecError(f"--name: {self.name[:40]!r}... is {len(self.name)} characters; use at most 100.")
        if _CONTROL_RE.search(self.name):
            # the name lands in generated text (job.sbatch comments, README headings): a line break there is code
            raise SpecError(f"--name: {self.name!r} contains control characters (line breaks, tabs, escapes); "
                            "give a name of printable characters only, such as 'digits'.")
        if self.timeout_s is not None:
            _check_number("--timeout", self.timeout_s, *NUMBER_LIMITS["timeout_s"], unit="seconds (30 days)")
        _check_number("--collective-timeout", self.collective_timeout_s, *NUMBER_LIMITS["collective_timeout_s"],
                      unit="seconds (24 hours)")
        _check_number("--max-capture-mb", self.max_capture_mb, *NUMBER_LIMITS["max_capture_mb"], unit="MB")
        _check_number("--stall-after", self.stall_after_s, *NUMBER_LIMITS["stall_after_s"], unit="seconds (24 hours)")
        if self.hang_timeout_s is not None:
            _check_number("--hang-timeout", self.hang_timeout_s, *NUMBER_LIMITS["hang_timeout_s"],
                          unit="seconds (7 days)")
        _check_number("--warm-ttl", self.warm_ttl_s, *NUMBER_LIMITS["warm_ttl_s"], unit="seconds (7 days)")
        for key, value in self.env.items():
            if not _ENV_NAME_RE.match(key):
                raise SpecError(f"--env: {key!r} is not a valid environment variable name.")
            if not isinstance(value, str):
                raise SpecError(f"--env: the value of {key} must be a string, got {type(value).__name__}.")
        if self.backend not in backend_names():
            raise SpecError(unknown_backend(self.backend))
        if self.flavor not in FLAVORS:
            raise SpecError(f"--flavor: unknown value {self.flavor!r}; choose one of: {', '.join(FLAVORS)}.")

    def _check_strategy_options(self) -> None:
        for name, (flag, owner) in STRATEGY_OPTIONS.items():
            if name in LIMITS:
                _check_int(flag, getattr(self, name), *LIMITS[name])
            default = _FIELD_DEFAULTS[name]
            if self.strategy.value != owner and getattr(self, name) != default:
                raise SpecError(f"{flag} applies to --strategy {owner}, but this job uses --strategy "
                                f"{self.strategy.value}: drop {flag} or use --strategy {owner}.")
        if self.fsdp_version == 2 and self.fsdp_sharding in (FsdpSharding.HYBRID, FsdpSharding.NO_SHARD):
            raise SpecError(f"--fsdp-sharding {self.fsdp_sharding.value} is an FSDP 1 sharding strategy; Accelerate's "
                            "FSDP 2 shards fully or re-shards after forward only: use --fsdp-version 1, or "
                            "--fsdp-sharding full / shard-grad-op.")
        if self.zero_offload is ZeroOffload.NVME and self.zero_stage < 3:
            raise SpecError(f"--zero-offload nvme needs --zero-stage 3 (got {self.zero_stage}): DeepSpeed offloads "
                            "parameters to NVMe only at stage 3; use --zero-offload cpu or --zero-stage 3.")
        if self.fsdp_sharding is FsdpSharding.HYBRID and self.nodes == 1:
            raise SpecError("--fsdp-sharding hybrid shards within a node and replicates across nodes: it needs "
                            "--nodes 2 or more; use --fsdp-sharding full on one node.")
        if self.accelerate_config is not None and not str(self.accelerate_config).strip():
            raise SpecError("--accelerate-config: the path is empty; give the YAML file of your team's Accelerate "
                            "config, or drop the option.")

    @property
    def world_size(self) -> int:
        """Total number of ranks (at least one process per node, even with ``--gpus 0``)."""
        return self.nodes * max(1, self.procs_per_node)

    @property
    def procs(self) -> int:
        """Worker processes per node (``--gpus 0`` still runs one CPU process per node)."""
        return max(1, self.procs_per_node)

    @property
    def slug(self) -> str:
        """The name as a DNS-1123 label prefix."""
        return slugify(self.name)

    def with_changes(self, **changes: Any) -> JobSpec:
        """A copy with ``changes`` applied (validated again)."""
        return replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        """JSON-serialisable form (enums as their values)."""
        out = asdict(self)
        for key, value in out.items():
            if isinstance(value, enum.Enum):
                out[key] = value.value
        out["tolerations"] = [dict(t) for t in self.tolerations]
        out["volumes"] = list(self.volumes)
        out["image_pull_secrets"] = list(self.image_pull_secrets)
        out["env_public"] = list(self.env_public)
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> JobSpec:
        """Inverse of :meth:`to_dict`; unknown keys are ignored (newer store versions)."""
        known = {f.name for f in fields(cls)}
        values = {k: v for k, v in data.items() if k in known}
        if "tolerations" in values:
            values["tolerations"] = tuple(values["tolerations"])
        return cls(**values)


def split_volume(text: str) -> tuple[str, str]:
    """``"CLAIM:/mount/path"`` as ``(claim, mount path)``; SpecError naming the value when it is not of that form.

    Only the form is checked here; what the cluster requires of the names and paths is checked by the kubernetes
    backend (:func:`nbtrain.backends.kubernetes.validate.check_spec`), before anything is created.
    """
    claim, sep, path = str(text).partition(":")
    if not isinstance(text, str) or not sep or not claim or not path.startswith("/"):
        raise SpecError(f"--volume {text!r}: write it as CLAIM:/mount/path (a PersistentVolumeClaim's name, then the "
                        "absolute path where every pod mounts it), e.g. --volume training-data:/data.")
    return claim, path


def _field_defaults() -> dict[str, Any]:
    return {f.name: f.default for f in fields(JobSpec) if f.default is not MISSING}


_FIELD_DEFAULTS = _field_defaults()


# A Slurm value lands on an #SBATCH line of a shell script: one token, no whitespace, quotes or shell syntax.
_SLURM_VALUE_RE = re.compile(r"^[A-Za-z0-9_.,:@%+=/\[\]|&!*()-]+$")
_SLURM_OPTION_RE = re.compile(r"^[a-z][a-z0-9-]*$")
_SLURM_TIME_RE = re.compile(r"^(\d+|\d+:\d{1,2}|\d+:\d{1,2}:\d{1,2}|\d+-\d{1,2}|\d+-\d{1,2}:\d{1,2}|"
                            r"\d+-\d{1,2}:\d{1,2}:\d{1,2}|UNLIMITED|INFINITE)$")
def _check_slurm(spec: JobSpec) -> None:
    for flag, value in (("--partition", spec.partition), ("--account", spec.account), ("--qos", spec.qos),
                        ("--constraint", spec.constraint), ("--reservation", spec.reservation)):
        if value is not None and not _SLURM_VALUE_RE.match(str(value)):
            raise SpecError(f"{flag}: {value!r} is not a Slurm name (letters, digits and _.,:@%+=/-[]|&!*() only, "
                            "no spaces); give the name as `sinfo`/`sacctmgr` show it.")
    if spec.time_limit is not None and not _SLURM_TIME_RE.match(str(spec.time_limit)):
        raise SpecError(f"--time: {spec.time_limit!r} is not a Slurm time limit; use MINUTES, HH:MM:SS or "
                        "DAYS-HH[:MM[:SS]] (e.g. 30, 2:00:00, 1-12).")
    object.__setattr__(spec, "sbatch_options", sbatch_lines(spec.sbatch_options))


def sbatch_lines(options: Mapping[str, str]) -> dict[str, str]:
    """``--sbatch`` pairs keyed by the sbatch option each key is (getopt_long's prefix rules, a later key winning,
    as on ``#SBATCH`` lines: :mod:`nbtrain.backends.slurm.sbatchopts`).

    Raises SpecError naming the key as typed for a malformed pair, an ambiguous or unknown key, and a key that
    resolves to an option nbtrain sets itself or an nbtrain option owns (``part=`` is ``--partition``).
    """
    lines: dict[str, str] = {}
    for name, value in options.items():
        if not _SLURM_OPTION_RE.match(name) or (value and not _SLURM_VALUE_RE.match(value)):
            raise SpecError(f"--sbatch: {name}={value!r} must be OPTION=VALUE with a long sbatch option name "
                            "(e.g. mem-per-cpu=2G) and a value without spaces or quotes.")
        option = resolve_option(name)
        why = reserved_reason(option)
        if why is not None:
            read = f"sbatch reads {name} as --{option}: " if option != name else ""
            if why.startswith("--"):
                raise SpecError(f"--sbatch {name}={value}: {read}nbtrain sets --{option} from its own option {why} "
                                f"(which a profile may lock); use {why} and drop {name}= from --sbatch.")
            raise SpecError(f"--sbatch {name}={value}: {read}--{option} sets {why}; drop {name}= from --sbatch.")
        lines.pop(option, None)  # a later line wins, and stands where it is written
        lines[option] = value
    return lines


def _check_int(flag: str, value: object, low: int, high: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise SpecError(f"{flag}: expected a whole number, got {value!r}.")
    if not low <= value <= high:
        raise SpecError(f"{flag}: {value} is out of range; use a value from {low} to {high}.")


def _check_number(flag: str, value: object, above: float, highest: float, *, unit: str) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise SpecError(f"{flag}: expected a number, got {value!r}.")
    if not (math.isfinite(value) and above < value <= highest):
        raise SpecError(f"{flag}: {value!r} is out of range; use a number above {above:g} and at most "
                        f"{highest:.0f} {unit}.")
