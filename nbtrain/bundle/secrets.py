"""Refuse bundles that would carry secrets (they land on disk, in run records and in pod specs).

What counts as a secret is decided in one place, :mod:`nbtrain.secrets` (also used for ``--env``, MLflow
params and every redaction). Two checks here, both skipped with ``CaptureOptions(allow_secrets=True)``:

1. The value of a secret-looking environment variable of the kernel (:func:`nbtrain.secrets.looks_secret`; at
   least 8 characters, so a short value does not match ordinary bytes) appears anywhere in the bundle's bytes:
   main.py, objects.pkl, attached files.
2. A captured, non-empty string literal that looks like a secret: its *variable name* says so (``API_KEY``,
   ``hf_token``, ``db_password``, ``STRIPE_KEY``) or its *value* is a credential (``hf_…``, ``ghp_…``, a URL with a
   password). Names that merely mention one (``token_path``, ``password_file``), special tokenizer tokens
   (``pad_token``, ``eos_token``...) and lookup keys (``sort_key``) are not secrets.

Messages name the variable, never the value.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from nbtrain.errors import SecretInBundleError
from nbtrain.secrets import looks_secret, looks_secret_name

from .pickling import PickledObjects

__all__ = ["check_env_secrets", "check_secret_literals", "looks_like_secret_name"]

_MIN_SECRET_LEN = 8
_FIX = (
    "Read it inside the cell with os.environ (and pass it to the job as an environment variable or a "
    "mounted secret) instead of capturing it; if shipping it is intended, pass --allow-secrets "
    "(CaptureOptions(allow_secrets=True))."
)


def looks_like_secret_name(name: str) -> bool:
    """True for ``API_KEY``, ``hf_token``, ``dbPassword``; False for ``pad_token``, ``sort_key``.

    The name rule of :func:`nbtrain.secrets.looks_secret_name` (kept under this name for its callers).
    """
    return looks_secret_name(name)


def _secret_env(environ: Mapping[str, str]) -> list[tuple[str, str]]:
    return sorted(
        (name, value)
        for name, value in environ.items()
        if len(value) >= _MIN_SECRET_LEN and looks_secret(name, value)
    )


def check_env_secrets(
    environ: Mapping[str, str],
    *,
    files: Mapping[str, bytes],
    carriers: Iterable[tuple[str, str]],
    pickled: PickledObjects | None,
    own_code: str,
) -> None:
    """Raise :class:`SecretInBundleError` if a secret env var's value is in ``files``.

    ``carriers`` pairs each captured name with the text it contributes to main.py, to say which name
    carries the value; ``own_code`` names the cell/function text itself (e.g. "the cell itself").
    """
    carriers = list(carriers)
    for env_name, value in _secret_env(environ):
        needles = {value.encode("utf-8", "surrogatepass"), repr(value)[1:-1].encode("utf-8", "replace")}
        for rel, data in sorted(files.items()):
            offset = min((i for i in (data.find(n) for n in needles) if i >= 0), default=-1)
            if offset < 0:
                continue
            carrier = _carrier(rel, offset, value, carriers, pickled, own_code)
            raise SecretInBundleError(
                f"The bundle would contain the value of the environment variable {env_name} "
                f"(carried by {carrier}, in {rel}). {_FIX}"
            )


def _carrier(
    rel: str,
    offset: int,
    value: str,
    carriers: list[tuple[str, str]],
    pickled: PickledObjects | None,
    own_code: str,
) -> str:
    if rel == "objects.pkl" and pickled is not None:
        owner = pickled.owner_of(offset)
        return f"the captured object {owner!r}" if owner else "objects.pkl"
    if rel == "main.py":
        escaped = repr(value)[1:-1]
        for name, text in carriers:
            if value in text or escaped in text:
                return f"the captured name {name!r}"
        return own_code
    return f"the attached file {rel}"


def check_secret_literals(literals: Iterable[tuple[str, Any]]) -> None:
    """Raise :class:`SecretInBundleError` for a string literal that looks like a secret (see module doc)."""
    for name, value in literals:
        if isinstance(value, (str, bytes)) and value and looks_secret(name, value):
            raise SecretInBundleError(
                f"The notebook variable {name!r} looks like a secret ({type(value).__name__} of "
                f"{len(value)} characters) and would be written into main.py. {_FIX}"
            )
