"""``@nbtrain.distributed(...)``: a notebook function that runs as a gang when called."""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from typing import Any, TypeVar

__all__ = ["distributed"]

F = TypeVar("F", bound=Callable[..., Any])


def _history() -> list[str]:
    """The notebook's cell history (IPython's ``In``) when running in IPython; [] otherwise."""
    main = sys.modules.get("__main__")
    history = getattr(main, "In", None) if main is not None else None
    return [h for h in history if isinstance(h, str)] if isinstance(history, list) else []


def distributed(
    fn: Callable[..., Any] | None = None, *, store: Any = None, block: bool = False, **options: Any
) -> Any:
    """Decorate a function so that calling it submits a gang and returns a :class:`~nbtrain.client.Run`.

    ``options`` are the job options of ``%%distributed`` as keywords: a flag's name with underscores
    (``@distributed(nodes=2, gpus=2, max_restarts=1)``, ``profile="team"``) or a JobSpec field
    (``procs_per_node=2``). They resolve through the magic's one path
    (:func:`nbtrain.profiles.apply.resolve_args`): the defaults and the environment's (``NBTRAIN_BACKEND``...),
    then the profile (its locks hold), then these options; the job's name defaults to the function's.
    ``run.result()`` is rank 0's return value. Bad options, an unknown profile and an option changing a
    locked value raise SpecError at decoration time, before anything runs.
    """

    def decorate(func: Callable[..., Any]) -> Callable[..., Any]:
        from nbtrain.flags import default_spec
        from nbtrain.profiles.apply import environment_sources, keyword_namespace, resolve_args

        where = f"@nbtrain.distributed on {func.__name__}"
        resolved = resolve_args(keyword_namespace(options, where), base=default_spec().with_changes(name=func.__name__),
                                base_sources=environment_sources())
        spec = resolved.spec

        @functools.wraps(func)
        def submit(*args: Any, **kwargs: Any) -> Any:
            from nbtrain.bundle import CaptureOptions, capture_function
            from nbtrain.client import submit_bundle

            bundle = capture_function(
                func, args, kwargs, history=_history(),
                options=CaptureOptions(max_pickle_bytes=int(spec.max_capture_mb * 1024 * 1024),
                                       allow_secrets=spec.allow_secrets),
            )
            run = submit_bundle(bundle, spec, store=store, kind="function",
                                profile=resolved.profile.label if resolved.profile is not None else None)
            if block:
                run.wait()
            return run

        submit.__wrapped_spec__ = spec  # type: ignore[attr-defined]
        return submit

    return decorate(fn) if fn is not None else decorate
