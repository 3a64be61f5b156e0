"""fsspec at the edge: is a URL's filesystem usable here, and the filesystem itself.

fsspec is a dependency of nbtrain's tracking stack; object stores need their own package
(``s3://`` -> s3fs, the ``nbtrain[s3]`` extra; ``gs://`` -> gcsfs; …). :func:`check_url` runs before
anything starts, so a missing package is a SpecError with the pip command, not a rank's traceback.
Credentials are never part of this: s3fs/botocore read them from the environment (``AWS_*``).
"""

from __future__ import annotations

from typing import Any

from nbtrain.errors import SpecError
from nbtrain.secrets import redact_url
from nbtrain.storage.uris import is_remote, scheme_of

__all__ = ["check_url", "filesystem"]

# Package (and nbtrain extra, where one exists) that provides each common scheme.
_INSTALL = {
    "s3": "pip install 'nbtrain[s3]'  (or: pip install s3fs)",
    "s3a": "pip install 'nbtrain[s3]'  (or: pip install s3fs)",
    "gs": "pip install gcsfs",
    "gcs": "pip install gcsfs",
    "az": "pip install adlfs",
    "abfs": "pip install adlfs",
    "abfss": "pip install adlfs",
}


def check_url(url: str, what: str) -> None:
    """Raise SpecError unless fsspec can open ``url`` here (its scheme is known and its package installed).

    ``what`` names the option for the message (``--checkpoint-dir``). Local paths and ``file://`` always pass.
    """
    if not is_remote(url):
        return
    shown = redact_url(url)
    if "@" in url.split("://", 1)[1].split("/", 1)[0]:
        raise SpecError(f"{what} {shown}: credentials in the URL are refused (they would be written to the run's "
                        "record); put them in the environment (AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, …) instead.")
    scheme = scheme_of(url)
    try:
        import fsspec
    except ImportError:
        raise SpecError(f"{what} {shown}: remote storage needs fsspec; {_INSTALL.get(scheme, 'pip install fsspec')}.") \
            from None
    try:
        fsspec.get_filesystem_class(scheme)
    except ImportError as error:
        hint = _INSTALL.get(scheme) or f"install the package fsspec names: {error}"
        raise SpecError(f"{what} {shown}: the {scheme}:// filesystem is not installed; {hint}.") from None
    except ValueError:
        raise SpecError(f"{what} {shown}: fsspec knows no {scheme!r} protocol; use a local path, file://, s3://, "
                        "gs:// or another fsspec URL.") from None


def filesystem(url: str) -> tuple[Any, str]:
    """``(fsspec filesystem, path within it)`` for ``url``; options such as the S3 endpoint come from the environment."""
    import fsspec

    fs, path = fsspec.core.url_to_fs(url)
    return fs, path
