"""The one secret heuristic: what looks like a credential, for refusing it and for masking it (pure, stdlib only).

Every place that decides "is this a secret?" asks this module, so a value refused at capture is also
refused in ``--env``, masked in MLflow params, and redacted in REST answers, ``--json`` and exported files:

- :func:`looks_secret_name` — a *name* that holds a credential: a word token, secret, password, passwd,
  passphrase, pat, credential(s), auth, oauth or apikey anywhere in it (``HF_TOKEN``, ``GITHUB_PAT``,
  ``AWS_SECRET_ACCESS_KEY``, ``dbPassword``, ``hftoken``), pass, pwd or cookie after a qualifier (``DB_PASS``,
  ``MYSQL_PWD``, ``SESSION_COOKIE``; not the shell's ``PWD``), or a ``*_KEY`` whose qualifier is not a data
  word (``STRIPE_KEY``, ``api_key`` yes; ``sort_key``, ``text_key``, a bare ``key`` no). Words, not substrings:
  ``TOKENIZERS_PARALLELISM`` and ``MONKEY`` are not secrets. A name that ends by naming something *about* the
  secret is not one (``HF_TOKEN_PATH``, ``KEY_FILE``, ``SSH_AUTH_SOCK``, ``auth_method``, ``AWS_ACCESS_KEY_ID``),
  nor are tokenizer tokens (``pad_token``, ``eos_token``).
- :func:`looks_secret_value` — a *value* that is a credential whatever its name: known token prefixes
  (``hf_``, ``ghp_``/``gho_``/``ghs_``…, ``github_pat_``, ``glpat-``, ``sk-``, ``sk_live_``/``sk_test_``,
  ``AKIA…``, ``xox…-``, Google's ``AIza…``), a JWT (``eyJ….eyJ….…``), ``Bearer …``, a PEM private key, a URL
  with a password (``postgres://u:pw@host``), a Slack or Discord webhook URL, or a connection string's
  ``AccountKey=``/``SharedAccessKey=``/``SharedAccessSignature=``/``Password=`` (Azure, ADO.NET).
- :func:`looks_secret` — either: a value that looks like a credential, or a secret name with a value that could
  hold one (not empty, not the mask, not a switch such as ``1``/``true``/``off``).
- :func:`mask` / :func:`redact_env` — the value, or ``***`` where :func:`looks_secret` says so.
- :func:`refuse_secret_env` — the ``--env`` check every backend runs before anything starts (``Backend.plan``).
- :func:`shown_env` — ``--env`` for readers who may not start runs (MLflow params, read-only REST users): every
  value masked but the ``--env-public`` names' (no heuristic is complete).
- :func:`redact_url` — text with the user-info of every URL removed (``https://u:p@host/`` -> ``https://host/``)
  and secret-named query parameters masked (``?access_token=***``).

Messages built from these never show the value, only the name.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping

from nbtrain.errors import SpecError

__all__ = [
    "MASK", "looks_secret", "looks_secret_name", "looks_secret_value", "mask", "redact_env", "redact_url",
    "refuse_secret_env", "shown_env",
]

#: What a redacted value is replaced with.
MASK = "***"

# Words that make a name a secret's (anywhere in the name).
_SECRET_WORDS = frozenset(
    "token secret secrets password passwords passwd passphrase pat credential credentials auth oauth apikey "
    "apikeys privatekey".split()
)
# Words that hold a credential only with a qualifier: DB_PASS, MYSQL_PWD, SESSION_COOKIE (PWD alone is the shell's
# working directory).
_QUALIFIED_SECRET_WORDS = frozenset("pass pwd cookie cookies".split())
# Compound words: hftoken, dbpassword, openaiapikey, clientsecret.
_SECRET_SUFFIXES = ("token", "secret", "password", "passwd", "apikey")
# A last word that names something about the secret, not the secret: HF_TOKEN_PATH, KEY_FILE, SSH_AUTH_SOCK.
_ABOUT_THE_SECRET = frozenset(
    "path paths file filename files dir directory home sock socket method methods type kind name names id ids "
    "url uri endpoint host hostname port header scheme mode enabled enable disabled disable required len length "
    "size count limit prefix suffix env var provider domain realm server version helper command cmd format "
    "expiry expires expiration ttl".split()
)
# "<word>_token" that is a tokenizer's special token, not a credential.
_TOKENIZER_WORDS = frozenset(
    "pad bos eos unk sep cls mask special start end stop image audio video eot additional".split()
)
# "<word>_key" that names a lookup key, not a credential (sort_key, text_key, metric_key, rng_key...).
_DATA_KEY_WORDS = frozenset(
    "sort primary foreign partition shard sharding join index group cache hash lookup dict map mapping "
    "metric metrics monitor label labels text image images input inputs output outputs target targets column "
    "columns col field fields row item items sample samples feature features prompt response answer question "
    "context audio video dataset data split train eval test valid validation loss score state model layer "
    "attention kv query value values batch rng prng random seed unique lock config json yaml name id order "
    "result results reward category class source dest destination".split()
)

# Credential formats that are secrets whatever the variable is called. Each needs a long random-looking body, so
# ``hf_home`` or ``sk-SK`` is no token.
_TOKEN_VALUE = re.compile(
    r"(?<![A-Za-z0-9])(?:"
    r"hf_[A-Za-z0-9]{20,}"
    r"|gh[pousr]_[A-Za-z0-9]{20,}"
    r"|github_pat_[A-Za-z0-9_]{20,}"
    r"|glpat-[A-Za-z0-9_-]{20,}"
    r"|sk-(?:proj-|ant-|svcacct-)?[A-Za-z0-9_-]{20,}"
    r"|[sr]k_(?:live|test)_[A-Za-z0-9]{10,}"
    r"|(?:AKIA|ASIA)[0-9A-Z]{16}"
    r"|xox[abposr]-[A-Za-z0-9-]{10,}"
    r")"
)
# Credential formats whose shape alone says so (no digit needed): a JWT (header.payload.signature, both JSON
# parts base64url of '{"'), a Google API key (AIza + 35), a Slack or Discord webhook URL (the URL is the secret),
# an Azure connection string's AccountKey/SharedAccessKey/SharedAccessSignature, a connection string's Password=.
_CREDENTIAL_FORM = re.compile(
    r"(?<![A-Za-z0-9_-])eyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}"
    r"|(?<![A-Za-z0-9_-])AIza[0-9A-Za-z_-]{35}(?![A-Za-z0-9_-])"
    r"|hooks\.slack\.com/(?:services|workflows|triggers)/[A-Za-z0-9_/-]{16,}"
    r"|discord(?:app)?\.com/api/webhooks/[0-9]+/[A-Za-z0-9_-]{16,}"
    r"|(?i:(?<![A-Za-z])(?:AccountKey|SharedAccessKey|SharedAccessSignature)\s*=\s*[^;\s]{8,})"
    r"|(?i:(?:^|;)\s*(?:password|pwd)\s*=\s*[^;\s]+)"
)
_BEARER = re.compile(r"(?i)\bbearer\s+[A-Za-z0-9._~+/=-]{16,}")
_PRIVATE_KEY = re.compile(r"-----BEGIN (?:[A-Z]+ )?PRIVATE KEY-----")
# scheme://user:password@ (the user may be empty: redis://:pw@host); the password has no '/', '@' or space.
_URL_PASSWORD = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://[^/\s:@]*:[^/\s@]+@")
# scheme://<user-info>@ within any text; the user-info runs to the last '@' before the host (a password with an
# unencoded '@' is still removed whole).
_URL_USERINFO = re.compile(r"(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*://)(?P<userinfo>[^/?#\s]*)@")
# Values that hold nothing to hide, whatever the name says (HF_HUB_DISABLE_IMPLICIT_TOKEN=1).
_NOT_A_SECRET = frozenset({"", MASK, "0", "1", "true", "false", "yes", "no", "on", "off", "none", "null"})
# name=value in a URL's query or fragment (an OAuth implicit grant returns #access_token=...). In a URL, a
# parameter named sig or ...signature is a signed URL's proof (Azure SAS sig=, X-Amz-Signature, X-Goog-Signature).
_QUERY_PARAM = re.compile(r"(?P<lead>[?&;#])(?P<name>[^=&#;\s]+)=(?P<value>[^&#;\s]*)")


def _words(name: str) -> list[str]:
    spaced = re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", name)
    return [w for w in re.split(r"[^a-z0-9]+", spaced.lower()) if w]


def looks_secret_name(name: str) -> bool:
    """True for a name that holds a credential (``HF_TOKEN``, ``STRIPE_KEY``, ``GITHUB_PAT``, ``db_password``).

    False for ``pad_token``, ``sort_key``, ``key``, ``HF_TOKEN_PATH``, ``TOKENIZERS_PARALLELISM`` (see the module doc).
    """
    words = _words(str(name))
    if len(words) > 1 and words[-1] in _ABOUT_THE_SECRET:
        return False
    for index, word in enumerate(words):
        before = words[index - 1] if index else ""
        if word in ("key", "keys"):
            if before and before not in _DATA_KEY_WORDS:
                return True
            continue
        if word in ("token", "tokens") and before in _TOKENIZER_WORDS:
            continue
        if word in _SECRET_WORDS or word.endswith(_SECRET_SUFFIXES) or (word in _QUALIFIED_SECRET_WORDS and before):
            return True
    return False


def looks_secret_value(value: str) -> bool:
    """True for a value that is a credential whatever it is called (token prefixes, Bearer, PEM key, URL password)."""
    text = str(value)
    match = _TOKEN_VALUE.search(text)
    if match is not None and any(c.isdigit() for c in match.group(0)):
        return True
    return bool(_BEARER.search(text) or _PRIVATE_KEY.search(text) or _URL_PASSWORD.search(text)
                or _CREDENTIAL_FORM.search(text))


def looks_secret(name: str, value: str | bytes | None) -> bool:
    """The one test: ``value`` looks like a credential, or ``name`` does and ``value`` is not empty (nor the mask)."""
    if value is None:
        return False
    text = value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)
    if looks_secret_value(text):
        return True
    return text.strip().lower() not in _NOT_A_SECRET and looks_secret_name(name)


def mask(name: str, value: str) -> str:
    """``value``, or :data:`MASK` when :func:`looks_secret` says ``name=value`` is a secret."""
    return MASK if looks_secret(name, value) else value


def redact_env(env: Mapping[str, str]) -> dict[str, str]:
    """A copy of ``env`` with every secret-looking value replaced by :data:`MASK` (the names stay)."""
    return {name: mask(name, value) for name, value in env.items()}


def shown_env(env: Mapping[str, str], public: Iterable[str] = ()) -> dict[str, str]:
    """A copy of ``env`` for readers who may not start runs (MLflow params, read-only REST users): every value is
    :data:`MASK` but those of the ``public`` names (``--env-public``) and values that hold nothing (``1``,
    ``true``, empty...). No heuristic finds every secret; this shows only what the user said may be shown. A
    public name's value is still masked when :func:`looks_secret` says so (``--env-public HF_TOKEN`` is a slip)."""
    shown = set(public)
    return {name: mask(name, value) if name in shown or value.strip().lower() in _NOT_A_SECRET else MASK
            for name, value in env.items()}


def redact_url(text: str) -> str:
    """``text`` with credentials removed from every URL in it, for display.

    The user-info goes (``https://u:pw@mlflow.example.com/`` -> ``https://mlflow.example.com/``) and the value
    of a secret-named query parameter is masked (``?access_token=***``). Text without URLs comes back unchanged.
    """
    text = _URL_USERINFO.sub(lambda m: m.group("scheme"), str(text))
    if "://" not in text or "=" not in text:
        return text

    def query(match: re.Match[str]) -> str:
        name, value = match.group("name"), match.group("value")
        if looks_secret(name, value) or (_words(name)[-1:] in (["sig"], ["signature"]) and value):
            return f"{match.group('lead')}{match.group('name')}={MASK}"
        return match.group(0)

    return _QUERY_PARAM.sub(query, text)


# How to pass a secret instead of --env, per backend (what the ranks of that backend can read).
_INSTEAD = {
    "kubernetes": "Put it in a Kubernetes Secret and pass --secret-env {name}=SECRET/KEY instead (the pods read it "
                  "through a secretKeyRef; nothing of it is written by nbtrain)",
    "local": "Leave it out of --env: keep it in the kernel's environment (set before Jupyter starts, or "
             "os.environ[{name!r}] = ... in an earlier cell), which the ranks inherit, or read it inside the cell",
}
_INSTEAD_OTHER = ("Leave it out of --env: give it to the ranks through the environment they inherit from the "
                  "kernel, or read it inside the cell")


def refuse_secret_env(env: Mapping[str, str], *, backend: str, allow: bool = False) -> None:
    """Raise :class:`~nbtrain.errors.SpecError` for the first ``--env`` entry that :func:`looks_secret` (unless ``allow``).

    ``--env`` values are written in plain text into the run record and plan (and, on Kubernetes, the manifest),
    shown by ``nbtrain status`` and exported; a secret belongs elsewhere, which the message says for ``backend``.
    The message names the variable, never its value. ``allow`` is ``--allow-secrets``.
    """
    if allow:
        return
    for name in sorted(env):
        value = env[name]
        if not looks_secret(name, value):
            continue
        why = "its value looks like a credential" if looks_secret_value(value) else "its name says it holds a secret"
        instead = _INSTEAD.get(backend, _INSTEAD_OTHER).format(name=name)
        raise SpecError(
            f"--env {name}=...: this looks like a secret ({why}), and --env values are written in plain text into "
            f"the run's record and plan. {instead}. If it is not a secret, pass --allow-secrets."
        )
