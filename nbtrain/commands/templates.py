"""``nbtrain templates list|show NAME`` and ``%nbtrain templates …``: the profiles a job can start from."""

from __future__ import annotations

import argparse
import json
from typing import Any

MAGIC_USAGE = """  templates list            the profiles (templates) %%distributed --profile NAME can use
  templates show NAME       one profile: its options, locks, source and documentation"""


def _text(args: argparse.Namespace) -> tuple[str, bool]:
    """(what to print, whether every source loaded)."""
    from nbtrain.profiles import load_catalog
    from nbtrain.profiles.render import catalog_table, profile_json, profile_page

    catalog = load_catalog()
    if args.templates_command == "show":
        profile = catalog.get(args.name, asked_as="templates show")
        return (json.dumps(profile_json(profile), indent=2) if args.json else profile_page(profile)), True
    if args.json:
        data = {"profiles": [profile_json(p) for _, p in sorted(catalog.profiles.items())],
                "problems": list(catalog.problems)}
        return json.dumps(data, indent=2), not catalog.problems
    return catalog_table(catalog), not catalog.problems


def _handler(args: argparse.Namespace) -> int:
    text, ok = _text(args)
    print(text)
    return 0 if ok else 2  # nbtrain.commands._shared.EXIT_USAGE: a profile source is broken


def _magic(args: argparse.Namespace, shell: Any) -> None:
    print(_text(args)[0])


def _add(sub: Any, *, add_help: bool) -> argparse.ArgumentParser:
    help_text = "list or show the profiles (templates) jobs start from: --profile NAME"
    parser: argparse.ArgumentParser = sub.add_parser("templates", add_help=add_help, help=help_text,
                                                     description=help_text)
    commands = parser.add_subparsers(dest="templates_command", required=True)
    listing = commands.add_parser("list", add_help=add_help, help="every profile and where it comes from")
    listing.add_argument("--json", action="store_true", help="as JSON")
    show = commands.add_parser("show", add_help=add_help, help="one profile's options, locks and docs")
    show.add_argument("name", metavar="NAME")
    show.add_argument("--json", action="store_true", help="as JSON")
    return parser


def register(sub: Any) -> None:
    """``nbtrain templates list [--json]`` and ``nbtrain templates show NAME [--json]``."""
    _add(sub, add_help=True).set_defaults(handler=_handler)


def register_magic(sub: Any) -> None:
    """``%nbtrain templates list`` and ``%nbtrain templates show NAME``."""
    _add(sub, add_help=False).set_defaults(magic=_magic)
