"""TCP ports on this machine: a free one, and whether a chosen one is taken."""

from __future__ import annotations

import errno
import socket


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that is free on ``host`` right now (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def port_in_use(host: str, port: int) -> bool:
    """Whether another socket holds ``host:port``, i.e. the server could not bind there.

    Binds a test socket with ``SO_REUSEADDR`` as uvicorn does, so connections of an earlier
    server that linger in TIME_WAIT do not count, while a listener (also one on 0.0.0.0)
    does. Other bind errors (an address not of this machine) return False and are left to
    the server to report.
    """
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, int(port)))
        except OSError as exc:
            return exc.errno == errno.EADDRINUSE
    return False


def port_in_use_message(host: str, port: int) -> str:
    """The one-line error for a busy ``--port``."""
    return f"port {port} on {host} is in use by another process; choose another --port"
