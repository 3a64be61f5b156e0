"""sbatch's long options, and what an ``--sbatch NAME=VALUE`` key means to sbatch (pure: names in, names out).

``--sbatch NAME=VALUE`` becomes an ``#SBATCH --NAME=VALUE`` line after nbtrain's own lines. sbatch parses those
lines with ``getopt_long``, so a key means what getopt_long makes of it, not what it looks like:

1. a key equal to a long option is that option (``mem`` is ``--mem``, although ``mem-bind`` starts with it);
2. otherwise a key that starts exactly one long option (or several spellings of one, such as ``tasks-per-node``
   and ``ntasks-per-node``) is that option: ``part`` is ``--partition``, ``out`` is ``--output``;
3. a key that starts several options is ambiguous (sbatch refuses the script): refused here, naming them;
4. a key that starts no option is unknown (sbatch refuses it too): refused here;
5. a later line wins: the user's ``--partition`` line after nbtrain's replaces it.

So every key is resolved (:func:`resolve_option`) before the reserved check (:func:`reserved_reason`): a key is
reserved when the option it resolves to sets what nbtrain sets itself (the gang's shape, GPUs, where output goes,
the environment, requeueing) or what an nbtrain option owns (``--partition`` ... ``--exclusive``), because a profile
may lock that option and a later ``#SBATCH`` line would replace it. :func:`setting` names the Slurm setting behind
an option, so options that set the same thing (``mem``, ``mem-per-cpu``, ``mem-per-gpu``) count as one when a
profile locks an ``--sbatch`` value.

The list of long options is the one ``sbatch`` itself builds: ``common_options[]`` in ``src/common/slurm_opt.c``
of Slurm 22.05.8 (tag ``slurm-22-05-8-1``: Debian 12's ``slurm-client`` 22.05.8, whose ``man sbatch`` lists the
same options), every entry with a ``set_func`` or ``set_func_sbatch``; :data:`LATER_OPTIONS` adds those Slurm added
up to 26.05, so that a prefix unambiguous on 22.05 but not on a newer Slurm is refused, and a newer option that
sets a reserved setting (``tres-per-task``) is reserved too.
"""

from __future__ import annotations

from nbtrain.errors import SpecError

__all__ = [
    "ALIASES", "LATER_OPTIONS", "LONG_OPTIONS", "SLURM_VERSION", "reserved_reason", "resolve_option", "setting",
]

SLURM_VERSION = "22.05.8"

# sbatch's long options in Slurm 22.05.8 (src/common/slurm_opt.c, common_options[], sbatch's entries), table order.
_SBATCH_22_05 = (
    "account", "acctg-freq", "array", "batch", "begin", "bb", "bbf", "cluster-constraint", "chdir", "cluster",
    "clusters", "comment", "container", "context", "contiguous", "constraint", "core-spec", "cores-per-socket",
    "cpu-freq", "cpus-per-gpu", "cpus-per-task", "deadline", "delay-boot", "dependency", "distribution", "error",
    "exclude", "exclusive", "export", "export-file", "extra-node-info", "get-user-env", "gid", "gpu-bind",
    "gpu-freq", "gpus", "gpus-per-node", "gpus-per-socket", "gpus-per-task", "gres", "gres-flags", "help", "hint",
    "hold", "ignore-pbs", "input", "job-name", "kill-on-invalid-dep", "licenses", "mail-type", "mail-user",
    "mcs-label", "mem", "mem-bind", "mem-per-cpu", "mem-per-gpu", "mincpus", "network", "nice", "no-kill",
    "no-requeue", "nodefile", "nodelist", "nodes", "ntasks", "ntasks-per-core", "ntasks-per-gpu", "ntasks-per-node",
    "ntasks-per-socket", "ntasks-per-tres", "open-mode", "output", "overcommit", "oversubscribe", "parsable",
    "partition", "power", "prefer", "priority", "profile", "propagate", "qos", "quiet", "reboot", "requeue",
    "reservation", "signal", "sockets-per-node", "spread-job", "switches", "tasks-per-node", "test-only",
    "thread-spec", "threads-per-core", "time", "time-min", "tmp", "uid", "use-min-nodes", "verbose", "version",
    "usage", "wait", "wait-all-nodes", "wckey", "wrap",
)
# Options sbatch gained after 22.05, up to 26.05 (the same file at slurm-26-05-3-1).
LATER_OPTIONS = (
    "autocomplete", "consolidate-segments", "container-id", "external", "extra", "mem-update", "oom-kill-step",
    "resources", "resv-ports", "runtime", "segment", "spread-segments", "stepmgr", "tres-bind", "tres-per-task",
)
LONG_OPTIONS = frozenset(_SBATCH_22_05 + LATER_OPTIONS)
# Two spellings of one option (the same getopt entry value): a prefix of both is not ambiguous.
ALIASES = {"tasks-per-node": "ntasks-per-node"}

_SHAPE = "the gang's shape (--nodes, one task per node), which nbtrain sets; use --nodes"
_GPUS = "the GPUs or CPUs per node (--gres=gpu:G or --cpus-per-task), which nbtrain sets; use --gpus"
_RESERVED = {
    **dict.fromkeys(("nodes", "ntasks", "ntasks-per-node", "ntasks-per-core", "ntasks-per-gpu", "ntasks-per-socket",
                     "ntasks-per-tres"), _SHAPE),
    **dict.fromkeys(("gres", "gpus", "gpus-per-node", "gpus-per-socket", "gpus-per-task", "tres-per-task",
                     "cpus-per-task", "cpus-per-gpu"), _GPUS),
    **dict.fromkeys(("output", "error", "input", "open-mode"),
                    "where the job's output goes (the run's private store), which nbtrain sets"),
    "chdir": "the job's working directory, which nbtrain sets",
    **dict.fromkeys(("export", "export-file", "get-user-env"), "the job's environment, which nbtrain sets (use --env)"),
    "job-name": "the job's name, which nbtrain sets (use --name)",
    **dict.fromkeys(("requeue", "no-requeue"), "requeueing, which nbtrain sets (restarts are --max-restarts)"),
    **dict.fromkeys(("wrap", "array"), "what the batch job runs, which nbtrain sets"),
    **dict.fromkeys(("cluster", "clusters"), "the cluster the job is submitted to, which nbtrain follows it on"),
    **dict.fromkeys(("help", "usage", "version", "test-only", "wait", "parsable", "autocomplete"),
                    "how sbatch answers nbtrain, which nbtrain sets"),
    **dict.fromkeys(("uid", "gid"), "who the job runs as"),
    "partition": "--partition", "account": "--account", "qos": "--qos", "time": "--time",
    "constraint": "--constraint", "reservation": "--reservation",
    **dict.fromkeys(("exclusive", "oversubscribe"), "--exclusive"),
}
# Options that set one Slurm setting between them (the later line wins): one setting for a profile's lock.
_SETTINGS = {
    **dict.fromkeys(("mem", "mem-per-cpu", "mem-per-gpu"), "memory (--mem, --mem-per-cpu, --mem-per-gpu)"),
    **dict.fromkeys(("nodelist", "nodefile"), "the nodes asked for (--nodelist, --nodefile)"),
}


def resolve_option(key: str) -> str:
    """The sbatch long option that ``--KEY`` on an ``#SBATCH`` line is, as getopt_long resolves it (module rules).

    Raises SpecError, naming ``key``, for a key that starts several options (listing them) or none.
    """
    if key in LONG_OPTIONS:
        return ALIASES.get(key, key)
    targets = sorted({ALIASES.get(name, name) for name in LONG_OPTIONS if name.startswith(key)})
    if len(targets) == 1:
        return targets[0]
    if targets:
        raise SpecError(f"--sbatch {key}=: sbatch would read --{key} as an abbreviation of any of "
                        f"{', '.join('--' + t for t in targets)} (ambiguous, so it refuses the script); write the "
                        "whole option name.")
    raise SpecError(f"--sbatch {key}=: sbatch has no option --{key} nor one starting with it (Slurm "
                    f"{SLURM_VERSION} to 26.05, `man sbatch`); write a long sbatch option name, e.g. mem-per-cpu=2G.")


def reserved_reason(option: str) -> str | None:
    """Why ``--sbatch`` may not set the (resolved) ``option``: the nbtrain flag that owns it (``"--partition"``)
    or what nbtrain sets with it; None when ``--sbatch`` may set it."""
    return _RESERVED.get(option)


def setting(option: str) -> str:
    """The Slurm setting the (resolved) ``option`` sets: the option itself, or the name of the group of options
    that set one thing between them (``mem-per-cpu`` -> memory)."""
    return _SETTINGS.get(option, option)
