"""Honour or refuse: which options of a job a backend does not honour, in words that say what to do (pure)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from nbtrain.errors import SpecError
from nbtrain.flags.table import BACKENDS, OPTIONS, BackendInfo, Option
from nbtrain.spec import JobSpec

__all__ = ["check_supported", "unsupported_options"]


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
    if isinstance(value, tuple) and all(isinstance(v, str) for v in value):  # volumes
        return " ".join(value)
    if isinstance(value, tuple):  # tolerations
        return " ".join(f"{t.get('key')}{'=' + t['value'] if 'value' in t else ''}:{t.get('effect')}" for t in value)
    return str(value)


def unsupported_options(spec: JobSpec, backend: str) -> list[str]:
    """One message per option of ``spec`` that differs from its default and that ``backend`` does not honour.

    Pure. Each message names the flag (and its value), the backend, and what to do instead, e.g.
    "--namespace team-a is a Kubernetes option; the local backend runs processes on this machine: drop it
    or use --backend kubernetes." An option a backend honours only with another (``Option.needs``: checkpoints
    on Kubernetes need ``--volume``) is refused there without it, naming the missing option. An empty list:
    ``backend`` honours every option ``spec`` sets. A backend the table does not know honours only the options
    that are no backend's matter (name, tracking...).
    """
    info = BACKENDS.get(backend, BackendInfo(backend, backend, "is not declared in nbtrain.flags"))
    messages = []
    for option in OPTIONS:
        if option.field is None or option.backends is None:
            continue
        value = getattr(spec, option.field)
        if value == option.default:
            continue
        if backend in option.backends:
            message = _missing_companion(spec, option, backend, value)
            if message:
                messages.append(message)
            continue
        owners = [b for b in BACKENDS if b in option.backends]
        shown = _shown(value)
        fix = "drop it" + (f" ({option.instead})" if option.instead else "")
        fix += f" or use --backend {' or '.join(owners)}" if owners else ""
        messages.append(f"{option.flag}{' ' + shown if shown else ''} is {_owners(owners)}; the {info.name} backend "
                        f"{option.why or info.does}: {fix}.")
    return messages


def _missing_companion(spec: JobSpec, option: Option, backend: str, value: Any) -> str | None:
    """The refusal of ``option`` on ``backend`` when the option it needs there (``Option.needs``) is not set."""
    field, why = (option.needs or {}).get(backend, (None, ""))
    if field is None or getattr(spec, field) != _default_of(field):
        return None
    companion = next(o for o in OPTIONS if o.field == field)
    shown = _shown(value)
    return (f"{option.flag}{' ' + shown if shown else ''} on the {backend} backend needs {companion.flag}: the "
            f"{backend} backend {why}. Add {companion.flag} {companion.metavar}, or drop {option.flag}.")


def _default_of(field: str) -> Any:
    return next(o.default for o in OPTIONS if o.field == field)


def check_supported(spec: JobSpec, backend: str) -> None:
    """Raise :class:`SpecError` carrying every :func:`unsupported_options` message (one per line); else nothing."""
    messages = unsupported_options(spec, backend)
    if len(messages) == 1:
        raise SpecError(messages[0])
    if messages:
        raise SpecError(f"the {backend} backend cannot honour {len(messages)} options; nothing was started:\n"
                        + "\n".join(f"  {m}" for m in messages))
