"""The table as argparse flags (``%%distributed``, ``nbtrain submit``) and the JobSpec the parsed flags give (pure)."""

from __future__ import annotations

import argparse
import os
from collections.abc import Iterable
from typing import Any

from nbtrain.errors import SpecError
from nbtrain.flags.table import OPTIONS, TITLES, Option, Surface, options_for
from nbtrain.spec import JobSpec

__all__ = ["add_arguments", "build_parser", "default_spec", "given_options", "spec_from_namespace"]


def _help(option: Option) -> str:
    text = option.help
    shown = option.default_shown
    if option.field is not None and option.kind != "switch" and shown:
        text += f" Default: {shown}."
    owners = [b for b in TITLES if option.backends is not None and b in option.backends]
    if option.backends is not None and len(owners) < len(TITLES):
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
            if option.kind in ("pairs", "tolerations", "list"):
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
            "--secret-env": "--secret-env HF_TOKEN=hf-credentials/token", "--label": "--label cost-center=ml",
            "--annotation": "--annotation sidecar.istio.io/inject=false"}.get(option.flag, f"{option.flag} A=1")


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
        elif option.kind == "list":
            value = tuple(value or ())
        changes[option.field] = value
    return spec.with_changes(**changes) if changes else spec
