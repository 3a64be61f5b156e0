"""A real S3-compatible server for tests: moto's server mode on 127.0.0.1, a free port, ended by its PID.

Reached the way users reach S3: s3fs/botocore with credentials and the endpoint from the environment
(``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``, ``AWS_DEFAULT_REGION``, ``AWS_ENDPOINT_URL``).
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

__all__ = ["S3Server", "s3_server"]

#: Fake credentials moto accepts; the secret is distinctive so tests can look for leaks of it.
ACCESS_KEY = "AKIANBTRAINTESTKEY01"
SECRET_KEY = "nbtrain-test-secret-d0c5a1e7"


@dataclass(frozen=True)
class S3Server:
    """A running server: its endpoint URL, its PID, and the environment that points clients at it."""

    endpoint: str
    pid: int

    @property
    def env(self) -> dict[str, str]:
        """The AWS_* variables a client (and every rank of a gang) needs to reach this server."""
        return {"AWS_ACCESS_KEY_ID": ACCESS_KEY, "AWS_SECRET_ACCESS_KEY": SECRET_KEY,
                "AWS_DEFAULT_REGION": "us-east-1", "AWS_ENDPOINT_URL": self.endpoint}


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextmanager
def s3_server(log_dir: Path, *, ready_timeout_s: float = 60.0) -> Iterator[S3Server]:
    """Start ``python -m moto.server`` on 127.0.0.1; yield once it answers HTTP; end it (SIGTERM, then SIGKILL)."""
    port = _free_port()
    log = open(log_dir / "moto.log", "wb")
    process = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                               stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    endpoint = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + ready_timeout_s
        while True:
            try:
                urllib.request.urlopen(f"{endpoint}/moto-api/", timeout=2).close()
                break
            except (urllib.error.URLError, OSError):
                if process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"moto server did not come up on {endpoint} within {ready_timeout_s} s: "
                                       f"{(log_dir / 'moto.log').read_text(errors='replace')[-2000:]}") from None
                time.sleep(0.2)
        yield S3Server(endpoint, process.pid)
    finally:
        try:
            os.kill(process.pid, signal.SIGTERM)
            process.wait(timeout=15)
        except ProcessLookupError:
            pass
        except subprocess.TimeoutExpired:
            os.kill(process.pid, signal.SIGKILL)
            process.wait(timeout=15)
        log.close()
