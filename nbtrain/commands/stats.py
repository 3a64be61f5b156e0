"""``nbtrain stats`` and ``%nbtrain stats``: adoption figures of the run store (definitions: docs/stats.md)."""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

__all__ = ["MAGIC_USAGE", "register", "register_magic", "report"]

MAGIC_USAGE = "  stats [--since 30d] [--json]  adoption figures: success rate, recovery, queue wait, gang-hours"

_SINCE_HELP = ("only runs created in the last DURATION (30d, 12h, 90m, 2w, seconds; 'all': every run; "
               "default 30d). The time to first distributed run always uses every run.")


def report(stores: list[str] | None, since: str | None, output: str, tracking_uri: str | None = None) -> str:
    """The statistics of ``stores`` (None: the default store) in ``output`` form: text, json or prometheus;
    with the runs the configured MLflow has that the stores lack (``tracking_uri``: see configured_tracking_uri)."""
    from nbtrain.stats import parse_since
    from nbtrain.stats.collect import configured_tracking_uri, gather
    from nbtrain.stats.prometheus import to_prometheus
    from nbtrain.stats.render import to_json, to_text
    from nbtrain.store import Store

    window = parse_since(since)
    chosen = [Store(path) for path in stores] if stores else [Store()]
    for store in chosen:
        if stores and not store.root.is_dir():
            raise ValueError(f"--store {store.root}: no such directory; pass the root of an nbtrain store "
                             "(the directory that holds runs/, as $NBTRAIN_HOME names it).")
    stats, sources = gather(chosen, time.time(), window, tracking_uri=configured_tracking_uri(tracking_uri))
    if output == "json":
        return json.dumps(to_json(stats, sources), indent=2, sort_keys=True, allow_nan=False)
    if output == "prometheus":
        return to_prometheus(stats, sources).rstrip("\n")
    return to_text(stats, sources)


def _output(args: argparse.Namespace) -> str:
    return "json" if args.json else "prometheus" if args.prometheus else "text"


def _cmd_stats(args: argparse.Namespace) -> int:
    print(report(args.store, args.since, _output(args), args.tracking_uri))
    return 0


def register(sub: Any) -> None:
    """Add ``nbtrain stats``."""
    p = sub.add_parser("stats", help="adoption figures: time to first distributed run, success rate, time to "
                                     "recover, queue wait, templates, checkpoint recovery, gang-hours")
    p.add_argument("--since", default="30d", metavar="DURATION", help=_SINCE_HELP)
    out = p.add_mutually_exclusive_group()
    out.add_argument("--json", action="store_true", help="one JSON document (the same as GET /nbtrain/stats)")
    out.add_argument("--prometheus", action="store_true", help="the Prometheus text exposition format")
    p.add_argument("--store", action="append", metavar="PATH",
                   help="read this store instead of $NBTRAIN_HOME (repeat to merge several users' stores; "
                        "each store's runs count as its owner's)")
    p.add_argument("--tracking-uri", default=None, metavar="URI",
                   help="also count the nbtrain runs this MLflow has that the store no longer has (default: "
                        "$MLFLOW_TRACKING_URI when set; 'none': the store only)")
    p.set_defaults(handler=_cmd_stats)


def _magic_stats(args: argparse.Namespace, shell: Any) -> None:
    print(report(None, args.since, _output(args)))


def register_magic(sub: Any) -> None:
    """Add ``%nbtrain stats``."""
    p = sub.add_parser("stats", add_help=False)
    p.add_argument("--since", default="30d")
    out = p.add_mutually_exclusive_group()
    out.add_argument("--json", action="store_true")
    out.add_argument("--prometheus", action="store_true")
    p.set_defaults(magic=_magic_stats)
