"""One status line that rewrites itself while the kernel waits for a run (``Run.wait``)."""

from __future__ import annotations

import sys
import time
from typing import Any

__all__ = ["ProgressLine"]


class ProgressLine:
    """One status line that rewrites itself: a display handle in IPython, ``\\r`` on a terminal, lines otherwise."""

    def __init__(self, enabled: bool = True) -> None:
        self.enabled = enabled
        self.handle: Any = None
        self.last = ""
        self.last_plain = 0.0
        ipython = sys.modules.get("IPython")
        if enabled and ipython is not None and getattr(ipython, "get_ipython", lambda: None)() is not None:
            from IPython.display import display

            self.handle = display({"text/plain": ""}, raw=True, display_id=True)

    def update(self, text: str) -> None:
        if not self.enabled or text == self.last:
            return
        self.last = text
        if self.handle is not None:
            self.handle.update({"text/plain": text}, raw=True)
        elif sys.stderr.isatty():
            sys.stderr.write("\r\033[K" + text)
            sys.stderr.flush()
        elif time.monotonic() - self.last_plain > 5:
            self.last_plain = time.monotonic()
            sys.stderr.write(text + "\n")

    def say(self, text: str) -> None:
        """Add ``text`` once under the status line, whatever the rate (a fact the user should read, not a state)."""
        if not self.enabled:
            return
        if self.handle is not None:
            self.last = f"{self.last}\n{text}" if self.last else text
            self.handle.update({"text/plain": self.last}, raw=True)
        elif sys.stderr.isatty():
            sys.stderr.write(("\n" if self.last else "") + text)
            sys.stderr.flush()
            self.last = text
        else:
            sys.stderr.write(text + "\n")

    def close(self) -> None:
        if self.enabled and self.handle is None and sys.stderr.isatty():
            sys.stderr.write("\n")
