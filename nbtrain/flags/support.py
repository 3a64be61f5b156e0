"""Honour or refuse: which options of a job a backend does not honour, in words that say what to do.

Pure for the built-in backends; for a backend installed later it reads that backend's declared Capabilities.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from nbtrain.errors import SpecError
from nbtrain.flags.table import OPTIONS, TITLES, BackendInfo, Option, backend_info
from nbtrain.registry import backend_entry_points
from nbtrain.spec import Device, JobSpec

if TYPE_CHECKING:
    from nbtrain.contract import Capabilities

__all__ = ["check_supported", "unsupported_options"]


def _join(names: Sequence[str], word: str) -> str:
    """"a", "a and b", "a, b and c" (``word``: and/or)."""
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} {word} {names[-1]}"


def _owners(names: Sequence[str]) -> str:
    """"a Kubernetes option" (a backend named after a product), else "an option of the local backend only"."""
    if len(names) == 1 and TITLES[names[0]].title != names[0]:
        return f"a {TITLES[names[0]].title} option"
    return f"an option of the {_join(names, 'and')} backend{'s' if len(names) > 1 else ''} only"


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


def unsupported_options(spec: JobSpec, backend: str, capabilities: Capabilities | None = None) -> list[str]:
    """One message per option of ``spec`` that differs from its default and that ``backend`` does not honour.

    Each message names the flag (and its value), the backend, and what to do instead, e.g.
    "--namespace team-a is a Kubernetes option; the local backend runs processes on this machine: drop it
    or use --backend kubernetes." An option a backend honours only with another (``Option.needs``: checkpoints
    on Kubernetes need ``--volume``) is refused there without it, naming the missing option. An empty list:
    ``backend`` honours every option ``spec`` sets.

    Generic options (``Option.backends`` None) are honoured by every backend. A backend-specific option is honoured
    by the built-ins the table names, and by any other backend that declares it in ``capabilities``
    (:class:`~nbtrain.backends.base.Capabilities`: the flag in ``options``, or the option's ``capability`` flag
    set); its ``multi_node`` and ``gpus`` flags refuse ``--nodes`` above 1 and ``--device gpu``. ``capabilities``
    None: the built-ins are answered by the table alone (pure, nothing imported); another backend's are read
    from its installed class (a backend nobody installed declares nothing).
    """
    if capabilities is None and backend not in TITLES:
        capabilities = _declared(backend)
    info = backend_info(backend)
    messages = _capability_refusals(spec, info, capabilities)
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
        if _declares(capabilities, option):
            continue
        owners = [b for b in TITLES if b in option.backends]
        shown = _shown(value)
        fix = "drop it" + (f" ({option.instead})" if option.instead else "")
        fix += f" or use --backend {_join(owners, 'or')}" if owners else ""
        if backend in TITLES:
            why = option.why or info.does
        elif option.capability:  # a backend of its own: the option's own reason, and where it would declare it
            why = f"{option.why or info.does} (its Capabilities.{option.capability} is false)"
        else:
            why = info.does
        messages.append(f"{option.flag}{' ' + shown if shown else ''} is {_owners(owners)}; the {info.name} backend "
                        f"{why}: {fix}.")
    return messages


def _declared(backend: str) -> Capabilities | None:
    """The ``capabilities`` that the installed backend ``backend`` declares on its class; None when no package
    registers it, its entry point does not load, or it declares none. Loads the entry point's object and reads one
    class attribute, so these checks never import :mod:`nbtrain.backends` (which imports them)."""
    from nbtrain.contract import Capabilities

    point = backend_entry_points().get(backend)
    if point is None:
        return None
    try:
        declared = getattr(point.load(), "capabilities", None)
    except ImportError:
        return None
    return declared if isinstance(declared, Capabilities) else None


def _declares(capabilities: Capabilities | None, option: Option) -> bool:
    """Whether ``capabilities`` declares the backend-specific ``option``: its flag, or its capability flag set."""
    if capabilities is None:
        return False
    return option.flag in capabilities.options or bool(option.capability and getattr(capabilities, option.capability))


def _capability_refusals(spec: JobSpec, info: BackendInfo, capabilities: Capabilities | None) -> list[str]:
    """What a backend's Capabilities rule out whatever the table says: more than one node, GPUs."""
    if capabilities is None:
        return []
    messages = []
    if not capabilities.multi_node and spec.nodes > 1:
        messages.append(f"--nodes {spec.nodes}: the {info.name} backend runs a gang on one node only (its "
                        "Capabilities.multi_node is false): use --nodes 1, or another --backend.")
    if not capabilities.gpus and spec.device is Device.GPU:
        messages.append(f"--device gpu: the {info.name} backend gives its ranks no GPU (its Capabilities.gpus is "
                        "false): use --device cpu or auto, or another --backend.")
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


def check_supported(spec: JobSpec, backend: str, capabilities: Capabilities | None = None) -> None:
    """Raise :class:`SpecError` carrying every :func:`unsupported_options` message (one per line); else nothing."""
    messages = unsupported_options(spec, backend, capabilities)
    if len(messages) == 1:
        raise SpecError(messages[0])
    if messages:
        raise SpecError(f"the {backend} backend cannot honour {len(messages)} options; nothing was started:\n"
                        + "\n".join(f"  {m}" for m in messages))
