"""``nbtrain`` commands that live in their own module (one command, or one family, per file).

Each module here defines ``register(sub)``: it adds its sub-parser(s) to the ``nbtrain`` parser's
sub-parsers and sets ``handler`` (``args -> exit code``) on each, exactly as :func:`nbtrain.cli.build_parser`
does for the core commands. :func:`nbtrain.cli.main` runs the handler and turns NbtrainError, OSError and
ValueError into one ``nbtrain COMMAND: REASON`` line and an exit code (:data:`nbtrain.commands._shared.EXIT_CODES`).
A module may also define ``register_magic(sub)`` for ``%nbtrain``: its sub-parsers (``add_help=False``) set
``magic`` (``(args, shell) -> value shown``; raise NbtrainError/ValueError for a clean UsageError), and its
``MAGIC_USAGE`` (lines like the others of ``%nbtrain help``) is added to the help.
Modules are found by name, in sorted order; a module starting with ``_`` is a helper, not a command.
"""

from __future__ import annotations

import importlib
import pkgutil
from typing import Any, Protocol, cast

__all__ = ["CommandModule", "magic_usage", "register_all", "register_all_magics"]


class CommandModule(Protocol):
    def register(self, sub: Any) -> None:
        """Add this module's sub-parser(s) to ``sub`` (argparse's sub-parsers action)."""


def _modules() -> list[Any]:
    return [importlib.import_module(f"{__name__}.{info.name}")
            for info in sorted(pkgutil.iter_modules(__path__), key=lambda i: i.name) if not info.name.startswith("_")]


def register_all(sub: Any) -> None:
    """Let every command module of this package add its sub-parsers to ``sub``."""
    for module in _modules():
        cast(CommandModule, module).register(sub)


def register_all_magics(sub: Any) -> None:
    """Let every command module with ``%nbtrain`` subcommands add them to ``sub``."""
    for module in _modules():
        if hasattr(module, "register_magic"):
            module.register_magic(sub)


def magic_usage() -> str:
    """The help lines of the command modules' ``%nbtrain`` subcommands."""
    return "\n".join(module.MAGIC_USAGE.rstrip("\n") for module in _modules() if getattr(module, "MAGIC_USAGE", ""))
