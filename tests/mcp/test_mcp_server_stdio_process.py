"""The ``tooldeck serve mcp`` process over stdio: its standard output, and how it ends.

Plugins here are real entry points of the command line (an extra one is added to what
``importlib.metadata`` reports, as an installed distribution would add it):

* whatever a plugin prints while it loads (at import, in its register hook), in a tool or in
  an observer goes to stderr, never into the JSON-RPC stream on stdout (``chatty: imported``
  used to arrive before the ``initialize`` answer);
* a client that hangs up while the retriever's model is still loading ends the process
  cleanly: the interpreter is not finalized under the load's thread (inside ONNX that aborted
  the process, SIGABRT). A finalizer of the plugin module tells whether it was.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

#: A guard against a hang, not a timing claim.
HANG_GUARD_S = 120

#: ``python -c`` running the command line with the plugin module ``NAME`` (in ``DIR``) as one
#: more entry point of the ``tooldeck`` group.
_WITH_PLUGIN = """
import importlib.metadata as md, sys
sys.path.insert(0, {dir!r})
real = md.entry_points
def entry_points(**params):
    found = real(**params)
    if params.get("group") == "tooldeck":
        return md.EntryPoints([*found, md.EntryPoint({name!r}, {name!r}, "tooldeck")])
    return found
md.entry_points = entry_points
from tooldeck.cli import main
sys.exit(main(sys.argv[1:]))
"""

_CHATTY = '''
import os, sys
print("chatty: imported")
from tooldeck_hookspecs import hookimpl, tool

@tool(category="text")
def shout(text: str) -> str:
    """Shout the text back (prints while it works)."""
    print("chatty: shouting", text)
    os.write(1, b"chatty: raw fd1 write\\n")
    return text.upper()

@hookimpl
def tooldeck_register_tools(register):
    print("chatty: registering")
    sys.stdout.flush()
    register(shout)

@hookimpl
def tooldeck_event(event):
    print("chatty: event", event.kind)
'''

_SLOW_MODEL = '''
import atexit, os, threading
import trio
from tooldeck.testing import KeywordRetriever
from tooldeck_hookspecs import hookimpl

_marks = os.open(os.environ["MARKS"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)


class _Finalized:
    # Runs when the interpreter tears this module down: only if the process finalizes.
    def __del__(self, _write=os.write, _fd=_marks):
        _write(_fd, b"finalized\\n")


_sentinel = _Finalized()
atexit.register(os.write, _marks, b"atexit\\n")


class SlowModel(KeywordRetriever):
    async def warm_up(self):
        os.write(_marks, b"loading\\n")
        await trio.to_thread.run_sync(threading.Event().wait)  # a load that never ends


class NoModel(KeywordRetriever):
    warm_up = None  # nothing to load


@hookimpl
def tooldeck_retriever(settings):
    return SlowModel() if os.environ.get("NEVER_LOADS") else NoModel()
'''


def _command(tmp_path: Path, name: str, source: str, *argv: str) -> list[str]:
    plugins = tmp_path / "plugins"
    plugins.mkdir(exist_ok=True)
    (plugins / f"{name}.py").write_text(source)
    return [sys.executable, "-c", _WITH_PLUGIN.format(dir=str(plugins), name=name), *argv]


def _env(**extra: str) -> dict[str, str]:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TOOLDECK_HISTORY_FILE": "off",
           "TOOLDECK_DISABLE_PLUGINS": "faiss", **extra}
    env.pop("TOOLDECK_CONFIG", None)
    return env


def _line(message: dict[str, Any]) -> bytes:
    return json.dumps(message).encode() + b"\n"


_INITIALIZE = _line({
    "jsonrpc": "2.0", "id": 1, "method": "initialize",
    "params": {"protocolVersion": "2025-06-18", "capabilities": {},
               "clientInfo": {"name": "raw", "version": "0"}},
})


def _serve(command: list[str], cwd: Path, env: dict[str, str]) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        cwd=str(cwd), env=env,
    )


def _ask(process: subprocess.Popen[bytes], message: bytes) -> Any:
    assert process.stdin is not None and process.stdout is not None
    process.stdin.write(message)
    process.stdin.flush()
    line = process.stdout.readline()
    try:
        return json.loads(line)
    except ValueError:
        pytest.fail(f"not a JSON-RPC message on the server's stdout: {line!r}")


def _end(process: subprocess.Popen[bytes]) -> tuple[bytes, bytes]:
    """Close the client's end; the rest of stdout and all of stderr once the server exited."""
    assert process.stdin is not None and process.stdout is not None
    assert process.stderr is not None
    process.stdin.close()
    try:
        process.wait(timeout=HANG_GUARD_S)
    finally:
        if process.poll() is None:
            process.kill()
    return process.stdout.read(), process.stderr.read()


def test_what_plugins_print_never_reaches_the_protocol_stream(tmp_path: Path) -> None:
    process = _serve(
        _command(tmp_path, "chatty", _CHATTY, "serve", "mcp", "--workdir", str(tmp_path)),
        tmp_path, _env(),
    )
    answer = _ask(process, _INITIALIZE)
    assert answer["id"] == 1 and answer["result"]["serverInfo"]["name"] == "tooldeck"
    assert process.stdin is not None
    process.stdin.write(_line({"jsonrpc": "2.0", "method": "notifications/initialized"}))
    shouted = _ask(process, _line({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
                                   "params": {"name": "shout", "arguments": {"text": "hi"}}}))
    assert shouted["result"]["structuredContent"] == {"ok": True, "data": "HI"}
    rest, stderr = _end(process)
    assert process.returncode == 0, stderr.decode(errors="replace")
    # Every line the client got is a JSON-RPC message; what the plugin printed went to stderr,
    # from its import to the last event of the session's end.
    assert rest == b"", rest
    printed = stderr.decode(errors="replace")
    for said in ("chatty: imported", "chatty: registering", "chatty: shouting hi",
                 "chatty: raw fd1 write", "chatty: event session.closed"):
        assert said in printed, printed


def test_other_commands_keep_their_standard_output(tmp_path: Path) -> None:
    command = _command(tmp_path, "chatty", _CHATTY)
    listed = subprocess.run([*command, "tools", "--json"], capture_output=True, cwd=tmp_path,
                            env=_env(), timeout=HANG_GUARD_S)
    assert listed.returncode == 0, listed.stderr
    assert b"chatty: imported" in listed.stdout  # untouched: printed where the plugin said
    assert b'"name": "shout"' in listed.stdout
    helped = subprocess.run([*command, "serve", "mcp", "--help"], capture_output=True,
                            cwd=tmp_path, env=_env(), timeout=HANG_GUARD_S)
    assert helped.returncode == 0 and b"--transport" in helped.stdout


def test_stdio_is_the_only_transport_whose_stdout_is_kept_aside() -> None:
    from tooldeck.cli import _speaks_on_stdout

    for argv in (["serve", "mcp"], ["--strict", "serve", "mcp", "--workdir", "w"],
                 ["serve", "mcp", "--transport", "stdio"], ["serve", "mcp", "--transport=stdio"],
                 ["serve", "mcp", "--trans", "stdio"]):
        assert _speaks_on_stdout(argv), argv
    for argv in (["serve", "mcp", "--transport", "http"], ["serve", "mcp", "--transport=http"],
                 ["serve", "mcp", "--tr", "http"], ["serve", "mcp", "--help"],
                 ["serve", "mcp", "-h"], ["tools", "--json"], ["call", "serve", "{}"], []):
        assert not _speaks_on_stdout(argv), argv


@pytest.mark.parametrize("never_loads", [False, True], ids=["nothing-to-load", "still-loading"])
def test_a_client_hanging_up_while_the_model_loads_ends_the_process_cleanly(
    tmp_path: Path, never_loads: bool
) -> None:
    marks = tmp_path / "marks.txt"
    env = _env(MARKS=str(marks), NEVER_LOADS="1" if never_loads else "")
    process = _serve(
        _command(tmp_path, "slow_model", _SLOW_MODEL, "serve", "mcp", "--workdir",
                 str(tmp_path)),
        tmp_path, env,
    )
    assert _ask(process, _INITIALIZE)["id"] == 1
    listed = _ask(process, _line({"jsonrpc": "2.0", "id": 2, "method": "tools/list"}))
    assert "search_tools" in {tool["name"] for tool in listed["result"]["tools"]}
    if never_loads:
        # The client hangs up in the middle of the load (started once the SDK took over).
        while "loading" not in (marks.read_text() if marks.exists() else ""):
            assert _ask(process, _line({"jsonrpc": "2.0", "id": 3, "method": "ping"}))["id"] == 3
    rest, stderr = _end(process)
    assert process.returncode == 0, stderr.decode(errors="replace")
    assert rest == b""
    seen = marks.read_text().split()
    # The deck was closed and atexit handlers ran either way; the interpreter was finalized
    # only when no load was running in a thread (the twin without a model shows that the
    # finalizer would have said so).
    assert "atexit" in seen, seen
    if never_loads:
        assert "loading" in seen and "finalized" not in seen, seen
    else:
        assert "loading" not in seen and "finalized" in seen, seen
