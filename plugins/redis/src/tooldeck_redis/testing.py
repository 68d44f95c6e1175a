"""A throw-away ``redis-server`` for tests and benchmarks: loopback only, no persistence.

::

    with RedisServer.start_new() as server:  # raises FileNotFoundError without the binary
        url = server.url                     # redis://127.0.0.1:<free port>/0
        server.stop(); server.restart()      # outage and recovery, same port
        server.pause(); server.resume()      # a hung server (SIGSTOP / SIGCONT)
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from types import TracebackType

__all__ = ["RedisServer", "redis_server_binary", "free_port"]


def redis_server_binary() -> str | None:
    """The path of ``redis-server`` (``$REDIS_SERVER`` first, then ``PATH``), or None."""
    explicit = os.environ.get("REDIS_SERVER")
    if explicit and os.access(explicit, os.X_OK):
        return explicit
    return shutil.which("redis-server")


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class RedisServer:
    """One ``redis-server`` process on 127.0.0.1 with ``--save '' --appendonly no``.

    :param binary: the ``redis-server`` executable.
    :param port: the port (a free one by default).
    :param extra_args: more server options, e.g. ``["--maxmemory", "2mb"]``.
    """

    def __init__(
        self, binary: str, port: int | None = None, extra_args: tuple[str, ...] = ()
    ) -> None:
        self.binary = binary
        self.port = port or free_port()
        self.extra_args = tuple(extra_args)
        self.process: subprocess.Popen[bytes] | None = None
        self._dir = tempfile.mkdtemp(prefix="tooldeck-redis-")

    @classmethod
    def start_new(cls, *, extra_args: tuple[str, ...] = ()) -> RedisServer:
        """Start a server on a free port.

        :raises FileNotFoundError: no ``redis-server`` binary (install the ``redis-server``
            Debian package or set ``REDIS_SERVER``).
        """
        binary = redis_server_binary()
        if binary is None:
            raise FileNotFoundError(
                "redis-server not found: apt-get install -y redis-server, or set REDIS_SERVER"
            )
        server = cls(binary, extra_args=extra_args)
        server.restart()
        return server

    @property
    def url(self) -> str:
        """``redis://127.0.0.1:<port>/0``."""
        return f"redis://127.0.0.1:{self.port}/0"

    def restart(self, timeout_s: float = 10.0) -> None:
        """Start the process (again, on the same port) and wait until it answers PING."""
        if self.process is not None and self.process.poll() is None:
            return
        self.process = subprocess.Popen(
            [
                self.binary,
                "--port", str(self.port),
                "--bind", "127.0.0.1",
                "--save", "",
                "--appendonly", "no",
                "--dir", self._dir,
                "--logfile", "",
                *self.extra_args,
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )  # fmt: skip
        deadline = time.monotonic() + timeout_s
        while True:
            if self.process.poll() is not None:
                raise RuntimeError(f"redis-server exited with {self.process.returncode}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.2) as sock:
                    sock.sendall(b"PING\r\n")
                    # -NOAUTH: a server started with --requirepass answers, too.
                    if sock.recv(16).startswith((b"+PONG", b"-NOAUTH")):
                        return
            except OSError:
                pass
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"redis-server did not answer on port {self.port}")
            time.sleep(0.02)

    def stop(self) -> None:
        """Stop the process (the port becomes free; a restart reuses it)."""
        if self.process is None:
            return
        if self.process.poll() is None:
            self.resume()
            self.process.terminate()
            try:
                self.process.wait(5)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.process = None

    def pause(self) -> None:
        """Freeze the server (SIGSTOP): connections stay open, commands time out."""
        if self.process is not None:
            self.process.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        """Unfreeze a paused server (SIGCONT)."""
        if self.process is not None:
            self.process.send_signal(signal.SIGCONT)

    def close(self) -> None:
        """Stop the process and remove its directory."""
        self.stop()
        shutil.rmtree(self._dir, ignore_errors=True)

    def __enter__(self) -> RedisServer:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
