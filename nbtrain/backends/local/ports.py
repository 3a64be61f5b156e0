"""A free loopback TCP port for the gang's rendezvous."""

from __future__ import annotations

import os
import socket

from nbtrain.errors import EnvironmentProblem

__all__ = ["free_port"]


def _can_bind(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


def free_port(host: str = "127.0.0.1") -> int:
    """A port nobody listens on, from ``NBTRAIN_PORT_RANGE`` ("29500-29600") or else the OS's choice.

    Raises EnvironmentProblem naming the range when every port in it is taken.
    """
    spec = os.environ.get("NBTRAIN_PORT_RANGE", "").strip()
    if spec:
        try:
            low_text, _, high_text = spec.partition("-")
            low, high = int(low_text), int(high_text or low_text)
        except ValueError as error:
            raise EnvironmentProblem(
                f"NBTRAIN_PORT_RANGE={spec!r} is not a port range; write it as LOW-HIGH, e.g. 29500-29600."
            ) from error
        if not 1 <= low <= high <= 65535:
            raise EnvironmentProblem(
                f"NBTRAIN_PORT_RANGE={spec!r} is not a valid range of TCP ports; "
                "write it as LOW-HIGH with 1 <= LOW <= HIGH <= 65535, e.g. 29500-29600."
            )
        for port in range(low, high + 1):
            if _can_bind(host, port):
                return port
        raise EnvironmentProblem(
            f"no free TCP port on {host} in NBTRAIN_PORT_RANGE={spec} for the gang's rendezvous; "
            "stop what listens there or widen the range."
        )
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind((host, 0))
        except OSError as error:
            raise EnvironmentProblem(f"no free TCP port on {host} for the gang's rendezvous: {error}.") from error
        return int(sock.getsockname()[1])
