"""Capture latency: a cell that uses 50 notebook dependencies, defined in a real IPython shell.

The mix: 20 functions calling each other, 10 classes (some subclassing others, one dataclass),
10 literals, 5 imports (aliases included), 5 small numpy arrays. Prints the median of 20 captures
(bundle built in memory, nothing written) against a 100 ms target. Run: ``python bench/capture.py``.
"""

from __future__ import annotations

import statistics
import time

TARGET_MS = 100.0
RUNS = 20


def notebook_cells() -> list[str]:
    """The cells a user would have run before the distributed cell."""
    cells = [
        "import numpy as np\nimport math\nimport json\nfrom collections import OrderedDict as OD\n"
        "import functools\nfrom dataclasses import dataclass",
        "\n".join(f"LIT{i} = {i * 1.5!r}" for i in range(8)) + "\nNAMES = ['a', 'b', 'c']\nCONFIG = {'lr': 0.1}",
        "\n".join(f"ARR{i} = np.arange({100 * (i + 1)}, dtype=np.float64)" for i in range(5)),
    ]
    # 10 classes: a small hierarchy, one dataclass.
    cells.append(
        "class Base0:\n    def value(self):\n        return LIT0\n"
        + "".join(
            f"class Cls{i}(Base0):\n    def value(self):\n        return super().value() + LIT{i % 8}\n"
            for i in range(1, 9)
        )
        + "@dataclass\nclass Settings:\n    lr: float = LIT1\n    name: str = 'run'\n"
    )
    # 20 functions calling each other (a chain plus cross calls), using everything above.
    funcs = []
    for i in range(20):
        body = [f"def fn{i}(x):"]
        if i < 19:
            body.append(f"    y = fn{i + 1}(x)")
        else:
            body.append("    y = x")
        body.append(f"    y += Cls{1 + i % 8}().value() + LIT{i % 8}")
        if i % 5 == 0:
            body.append(f"    y += float(np.sum(ARR{i // 5 % 5})) + math.sqrt(len(NAMES))")
        if i % 4 == 0:
            body.append("    y += len(json.dumps(OD(CONFIG))) + functools.reduce(lambda a, b: a + b, [1, 2])")
        body.append("    return y")
        funcs.append("\n".join(body))
    cells.append("\n\n".join(funcs))
    cells.append("settings = Settings()\n")
    return cells


CELL = "total = fn0(1.0) + ARR4.sum() + Base0().value()\nprint(total, settings)\ntotal\n"


def main() -> None:
    from IPython.core.interactiveshell import InteractiveShell
    from traitlets.config import Config

    from nbtrain.bundle import capture_cell

    config = Config()
    config.HistoryManager.hist_file = ":memory:"
    shell = InteractiveShell.instance(config=config)
    for cell in notebook_cells():
        shell.run_cell(cell, store_history=True).raise_error()
    history = list(shell.user_ns["In"])
    body = shell.transform_cell(CELL)

    bundle = capture_cell(body, shell.user_ns, history=history)  # warm-up: imports, version lookups
    counts: dict[str, int] = {}
    for captured in bundle.captured:
        counts[captured.kind.value] = counts.get(captured.kind.value, 0) + 1
    timings = []
    for _ in range(RUNS):
        start = time.perf_counter()
        capture_cell(body, shell.user_ns, history=history)
        timings.append((time.perf_counter() - start) * 1000)
    median = statistics.median(timings)
    print(f"captured {len(bundle.captured)} names: {counts}")
    print(f"capture latency: median {median:.1f} ms over {RUNS} runs (min {min(timings):.1f}, max {max(timings):.1f})")
    verdict = "met" if median < TARGET_MS else "NOT met"
    print(f"target < {TARGET_MS:.0f} ms: {verdict}")


if __name__ == "__main__":
    main()
