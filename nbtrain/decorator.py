"""``@nbtrain.distributed(...)``: a notebook function that runs as a gang when called."""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from typing import Any, TypeVar

from nbtrain.spec import JobSpec

__all__ = ["distributed"]

F = TypeVar("F", bound=Callable[..., Any])


def _history() -> list[str]:
    """The notebook's cell history (IPython's ``In``) when running in IPython; [] otherwise."""
    main = sys.modules.get("__main__")
    history = getattr(main, "In", None) if main is not None else None
    return [h for h in history if isinstance(h, str)] if isinstance(history, list) else []


def distributed(
    fn: Callable[..., Any] | None = None, *, store: Any = None, block: bool = False, **spec_options: Any
) -> Any:
    """Decorate a function so that calling it submits a gang and returns a :class:`~nbtrain.client.Run`.

    ``spec_options`` are :class:`~nbtrain.spec.JobSpec` fields, with ``gpus`` accepted for
    ``procs_per_node`` (``@distributed(nodes=2, gpus=2)``). ``run.result()`` is rank 0's return value.
    Bad options raise SpecError at decoration time, before anything runs.
    """
    if "gpus" in spec_options:
        spec_options["procs_per_node"] = spec_options.pop("gpus")

    def decorate(func: Callable[..., Any]) -> Callable[..., Any]:
        options = {"name": func.__name__, **spec_options}
        spec = JobSpec(**options)

        @functools.wraps(func)
        def submit(*args: Any, **kwargs: Any) -> Any:
            from nbtrain.bundle import CaptureOptions, capture_function
            from nbtrain.client import submit_bundle

            bundle = capture_function(
                func, args, kwargs, history=_history(),
                options=CaptureOptions(max_pickle_bytes=int(spec.max_capture_mb * 1024 * 1024),
                                       allow_secrets=spec.allow_secrets),
            )
            run = submit_bundle(bundle, spec, store=store, kind="function")
            if block:
                run.wait()
            return run

        submit.__wrapped_spec__ = spec  # type: ignore[attr-defined]
        return submit

    return decorate(fn) if fn is not None else decorate
