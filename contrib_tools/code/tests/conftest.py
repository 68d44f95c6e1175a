"""Fixtures of the code pack's tests: a workdir, a loopback server, a planted host secret."""

from __future__ import annotations

import secrets
import shutil
import socket
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest


@pytest.fixture
def workdir() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="tdcode-"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def loopback_server() -> Iterator[int]:
    """A TCP server on 127.0.0.1 that accepts and closes connections; yields its port."""
    server = socket.create_server(("127.0.0.1", 0))
    server.settimeout(0.2)
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            conn.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield server.getsockname()[1]
    finally:
        stop.set()
        thread.join(timeout=2)
        server.close()


@pytest.fixture
def host_secret(monkeypatch: pytest.MonkeyPatch) -> str:
    """A secret in the test process's environment that no sandboxed command may see."""
    value = "hostsecret-" + secrets.token_hex(12)
    monkeypatch.setenv("TOOLDECK_TEST_HOST_SECRET", value)
    return value
