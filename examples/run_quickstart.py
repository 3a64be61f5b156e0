"""The demo: execute quickstart.ipynb headless (nbclient) on the local backend and print the run summary.

Usage: ``python examples/run_quickstart.py [--out executed.ipynb]``. Exit status 0 when the run succeeded.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient


def main() -> int:
    here = Path(__file__).resolve().parent
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--notebook", default=str(here / "quickstart.ipynb"))
    parser.add_argument("--out", default=str(here / "quickstart.executed.ipynb"))
    parser.add_argument("--timeout", type=int, default=600, help="per-cell timeout in seconds")
    args = parser.parse_args()
    notebook = nbformat.read(args.notebook, as_version=4)
    print(f"executing {args.notebook} headless (2 nodes x 2 processes on the local backend)…", flush=True)
    started = time.time()
    client = NotebookClient(notebook, timeout=args.timeout, kernel_name="python3",
                            resources={"metadata": {"path": str(here)}})
    try:
        client.execute()
    finally:
        nbformat.write(notebook, args.out)
    print(f"done in {time.time() - started:.0f} s; executed notebook: {args.out}\n")
    last = notebook.cells[-1]
    text = "".join(o.get("text", "") for o in last.get("outputs", []) if o.get("output_type") == "stream")
    print(text)
    return 0 if "succeeded" in text else 1


if __name__ == "__main__":
    sys.exit(main())
