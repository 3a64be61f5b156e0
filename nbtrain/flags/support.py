"""Honour or refuse: which options of a job a backend does not honour, in words that say what to do (pure)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from nbtrain.errors import SpecError
from nbtrain.flags.table import BACKENDS, OPTIONS, BackendInfo
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
