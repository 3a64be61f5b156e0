"""The one table of job options (pure and cheap to import: no IPython, no torch, no backend).

Every option a user can set on a job is one :class:`Option` row of :data:`OPTIONS`: the JobSpec field it
sets, its flag, the kind of value, its default (read from JobSpec itself), help, its nbtrain.toml key, the
backends that honour it and the surfaces that accept it (``%%distributed``: ``"magic"``; ``nbtrain submit``:
``"cli"``). Everything else is generated from the table, so an option is declared once:

- the flags of ``%%distributed`` and ``nbtrain submit``/``manifests`` (:func:`add_arguments`,
  :func:`build_parser`) and the JobSpec they give (:func:`spec_from_namespace`);
- the nbtrain.toml mapping, both directions (:func:`spec_to_toml`, :func:`spec_from_toml`);
- honour-or-refuse per backend (:func:`unsupported_options`, :func:`check_supported`);
- the JupyterLab dialog's data (:func:`dialog_data`, checked in as ``labextension/src/plugin/options.generated.ts``)
  and the options reference in README.md and docs/options.md (:func:`markdown`).

``python -m nbtrain.flags --write`` regenerates the checked-in copies (unit tests fail while one is stale);
``--markdown``, ``--json`` and ``--typescript`` print them. Which backends exist is the ``nbtrain.backends``
entry-point group (:mod:`nbtrain.registry`): a backend installed later honours the generic options
(``Option.backends`` None) and declares the backend-specific ones it honours in its Capabilities; the others'
are refused automatically (docs/backends.md).
"""

from nbtrain.flags.generate import BEGIN, END, GENERATED, dialog_data, markdown, regenerated, typescript
from nbtrain.flags.parse import add_arguments, build_parser, default_spec, given_options, spec_from_namespace
from nbtrain.flags.support import check_supported, unsupported_options
from nbtrain.flags.table import (
    EXCLUDED_FIELDS,
    OPTIONS,
    SURFACES,
    TITLES,
    BackendInfo,
    Option,
    backend_info,
    installed_backends,
    option_for_flag,
    options_for,
)
from nbtrain.flags.tomlmap import TOML_TABLES, TomlError, spec_from_toml, spec_to_toml

__all__ = [
    "BEGIN", "END", "EXCLUDED_FIELDS", "GENERATED", "OPTIONS", "SURFACES", "TITLES", "TOML_TABLES", "BackendInfo",
    "Option", "TomlError", "add_arguments", "backend_info", "build_parser", "check_supported", "default_spec",
    "dialog_data", "given_options", "installed_backends", "markdown", "option_for_flag", "options_for", "regenerated",
    "spec_from_namespace", "spec_from_toml", "spec_to_toml", "typescript", "unsupported_options",
]
