"""Refuse bundles that would carry secrets (they land on disk, in run records and in pod specs).

Two checks, both skipped with ``CaptureOptions(allow_secrets=True)``:

1. The value of a secret-looking environment variable (its *name* contains token, key, secret,
   password, passwd, credential or auth; its value has at least 8 characters) appears anywhere in the
   bundle's bytes: main.py, objects.pkl, attached files.
2. A captured, non-empty string literal whose *variable name* ends like a secret's (``API_KEY``,
   ``hf_token``, ``db_password``, ``AUTH``). Names that merely mention one (``token_path``,
   ``password_file``), special tokenizer tokens (``pad_token``, ``eos_token``...) and keys that are not
   credentials (``sort_key``) are not secrets.

Messages name the variable, never the value.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

from nbtrain.errors import SecretInBundleError

from .pickling import PickledObjects

__all__ = ["check_env_secrets", "check_secret_literals", "looks_like_secret_name"]

_ENV_NAME = re.compile(r"token|key|secret|password|passwd|credential|auth", re.IGNORECASE)
_ENV_NOT_SECRET_SUFFIXES = ("_SOCK", "_PATH", "_FILE", "_DIR", "_HOME")  # SSH_AUTH_SOCK, KEY_FILE...
_MIN_SECRET_LEN = 8
_SECRET_WORDS = frozenset({"token", "secret", "secrets", "password", "passwd", "credential", "credentials", "auth"})
_SECRET_SUFFIXES = ("token", "secret", "password", "apikey")  # hftoken, dbpassword, openaiapikey
_KEY_QUALIFIERS = frozenset(
    "api access secret private auth client signing encryption service account master ssh license "
    "openai wandb hf aws gcp azure".split()
)
_TOKENIZER_TOKENS = frozenset(
    {"pad", "bos", "eos", "unk", "sep", "cls", "mask", "special", "start", "end", "stop", "image"}
)
_FIX = (
    "Read it inside the cell with os.environ (and pass it to the job as an environment variable or a "
    "mounted secret) instead of capturing it; if shipping it is intended, pass --allow-secrets "
    "(CaptureOptions(allow_secrets=True))."
)


def _words(name: str) -> list[str]:
    spaced = re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", name)
    return [w for w in spaced.lower().split("_") if w]


def looks_like_secret_name(name: str) -> bool:
    """True for ``API_KEY``, ``hf_token``, ``dbPassword``; False for ``pad_token``, ``sort_key``.

    Only the last word counts: ``token_path`` names a path, ``auth_method`` a method.
    """
    words = _words(name)
    if not words:
        return False
    word = words[-1]
    before = words[-2] if len(words) > 1 else ""
    if word in ("token", "tokens") and before in _TOKENIZER_TOKENS:
        return False
    if word == "key":
        return before in _KEY_QUALIFIERS
    return word in _SECRET_WORDS or word.endswith(_SECRET_SUFFIXES)


def _secret_env(environ: Mapping[str, str]) -> list[tuple[str, str]]:
    return sorted(
        (name, value)
        for name, value in environ.items()
        if _ENV_NAME.search(name)
        and not name.upper().endswith(_ENV_NOT_SECRET_SUFFIXES)
        and len(value) >= _MIN_SECRET_LEN
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
    """Raise :class:`SecretInBundleError` for a secret-named string literal (see module doc)."""
    for name, value in literals:
        if isinstance(value, (str, bytes)) and value and looks_like_secret_name(name):
            raise SecretInBundleError(
                f"The notebook variable {name!r} looks like a secret ({type(value).__name__} of "
                f"{len(value)} characters) and would be written into main.py. {_FIX}"
            )
