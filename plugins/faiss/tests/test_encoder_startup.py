"""In new processes: ``tooldeck select`` and ``tooldeck eval retrieval`` embed with the fast
encoder (no torch, transformers or sentence-transformers imported), say once on a terminal
that the catalog is embedded and cached, and print no progress bars or library warnings."""

from __future__ import annotations

import json
import os
import pty
import re
import subprocess
import sys
from pathlib import Path

import pytest

MODEL_STACK = ("torch", "transformers", "sentence_transformers")
#: tqdm bars ("it/s", "Batches", "%|") and transformers/torch/tokenizers notices.
STRAY = re.compile(r"it/s|Batches|%\||Loading weights|huggingface/tokenizers|UserWarning|"
                   r"FutureWarning|DeprecationWarning|transformers|torch")
WORDING = re.compile(
    r"tooldeck: embedding (\d[\d,]*) tool descriptions with all-MiniLM-L6-v2 "
    r"\(once; cached in (.+?)\)\.\.\. done in [\d.]+ s"
)


def _env(cache: Path) -> dict[str, str]:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TOOLDECK_HISTORY_FILE": "off",
           "XDG_CACHE_HOME": str(cache)}
    env.pop("TOOLDECK_CONFIG", None)
    return env


def _probe_argv(argv: list[str]) -> list[str]:
    """python -c running the CLI, then writing which model-stack modules it loaded (stdout)."""
    script = (
        "import sys\nfrom tooldeck.cli import main\n"
        f"code = main({argv!r})\n"
        f"print('LOADED=' + ','.join(m for m in {MODEL_STACK!r} if m in sys.modules))\n"
        "sys.exit(code)\n"
    )
    return [sys.executable, "-c", script]


def _run_on_tty(argv: list[str], env: dict[str, str], cwd: Path) -> tuple[int, str, str]:
    """Run with stderr on a pseudo-terminal; (exit code, stdout, what the terminal got)."""
    master, slave = pty.openpty()
    try:
        process = subprocess.Popen(argv, env=env, cwd=cwd, stdin=subprocess.DEVNULL,
                                   stdout=subprocess.PIPE, stderr=slave)
    finally:
        os.close(slave)
    chunks = []
    while True:
        try:
            data = os.read(master, 65536)
        except OSError:  # EIO: the child closed the terminal
            break
        if not data:
            break
        chunks.append(data)
    os.close(master)
    assert process.stdout is not None
    out = process.stdout.read().decode()
    return process.wait(timeout=300), out, b"".join(chunks).decode(errors="replace")


def _loaded(stdout: str) -> list[str]:
    for line in stdout.splitlines():
        if line.startswith("LOADED="):
            return [m for m in line.removeprefix("LOADED=").split(",") if m]
    raise AssertionError(f"no probe line in {stdout[-500:]!r}")


@pytest.fixture
def small_dataset(tmp_path: Path) -> Path:
    """40 Seal-Tools tools and 3 of their queries (quick to embed)."""
    source = Path("/work/shared/data/tool-retrieval/seal-tools.json")
    if not source.exists():
        pytest.skip("no Seal-Tools copy")
    data = json.loads(source.read_text())
    queries = data["queries"][:3]
    names = {n for q in queries for n in q["relevant"]}
    tools = [t for t in data["tools"] if t["name"] in names]
    tools += [t for t in data["tools"] if t["name"] not in names][: 40 - len(tools)]
    path = tmp_path / "small.json"
    path.write_text(json.dumps({**data, "tools": tools, "queries": queries}))
    return path


def test_select_embeds_once_says_so_on_a_terminal_and_imports_no_torch(tmp_path: Path) -> None:
    env = _env(tmp_path / "xdg")
    argv = _probe_argv(["select", "read the notes file and list the folder", "--json"])
    code, out, terminal = _run_on_tty(argv, env, tmp_path)
    assert code == 0, terminal
    assert _loaded(out) == []
    found = WORDING.findall(terminal)
    assert len(found) == 1, terminal
    count, folder = found[0]
    assert int(count.replace(",", "")) >= 5
    assert Path(folder) == tmp_path / "xdg" / "tooldeck" / "embeddings"
    assert not STRAY.search(terminal), terminal
    json.loads(out[: out.rindex("LOADED=")])  # stdout is the JSON hand, nothing mixed in

    # Cached now: a second process embeds nothing and says nothing.
    code, out, terminal = _run_on_tty(argv, env, tmp_path)
    assert code == 0, (terminal, out[-2000:])
    assert _loaded(out) == []
    assert "embedding" not in terminal and not STRAY.search(terminal), terminal


def test_not_a_terminal_means_no_line_and_no_bars(tmp_path: Path, small_dataset: Path) -> None:
    env = _env(tmp_path / "xdg")
    for argv in (
        ["select", "read the notes file and list the folder"],
        ["eval", "retrieval", str(small_dataset), "--limit", "5", "--json"],
    ):
        done = subprocess.run(_probe_argv(argv), env=env, cwd=tmp_path, capture_output=True,
                              text=True, timeout=300, check=False)
        assert done.returncode == 0, done.stderr
        assert _loaded(done.stdout) == [], argv
        # (eval also reports the dataset's camelCase names renamed by the core: not ours.)
        assert "tooldeck: embedding" not in done.stderr, argv
        assert not STRAY.search(done.stderr), (argv, done.stderr)
        if argv[0] == "select":
            assert done.stderr == "", done.stderr


def test_eval_on_a_terminal_says_it_once(tmp_path: Path, small_dataset: Path) -> None:
    env = _env(tmp_path / "xdg")
    argv = _probe_argv(["eval", "retrieval", str(small_dataset), "--limit", "5", "--json"])
    code, out, terminal = _run_on_tty(argv, env, tmp_path)
    assert code == 0, terminal
    assert _loaded(out) == []
    assert len(WORDING.findall(terminal)) == 1, terminal
    assert not STRAY.search(terminal), terminal


def test_mcp_server_first_search_embeds_quietly_without_torch(tmp_path: Path) -> None:
    """``tooldeck serve mcp`` (stdio, stderr a pipe): the first ``search_tools`` embeds the
    catalog with the fast encoder and prints nothing on stderr."""
    script = (
        "import atexit, sys\n"
        "atexit.register(lambda: sys.stderr.write('LOADED=' + ','.join(m for m in "
        f"{MODEL_STACK!r} if m in sys.modules) + '\\n'))\n"
        "from tooldeck.cli import main\nsys.exit(main(['serve', 'mcp']))\n"
    )
    messages = [
        {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {},
            "clientInfo": {"name": "test", "version": "0"}}},
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {
            "name": "search_tools", "arguments": {"task": "read the notes file"}}},
    ]
    process = subprocess.Popen(
        [sys.executable, "-c", script], env=_env(tmp_path / "xdg"), cwd=tmp_path,
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    assert process.stdin is not None and process.stdout is not None
    answer = None
    try:
        for message in messages:
            process.stdin.write(json.dumps(message) + "\n")
            process.stdin.flush()
        for line in process.stdout:
            reply = json.loads(line)
            if reply.get("id") == 2:
                answer = reply
                break
    finally:
        process.stdin.close()  # the server exits at end of input
        assert process.stderr is not None
        stderr = process.stderr.read()
        process.wait(timeout=120)
    assert answer is not None and "result" in answer, (answer, stderr)
    assert not answer["result"].get("isError"), answer
    assert "file_read" in json.dumps(answer["result"])
    loaded = [line for line in stderr.splitlines() if line.startswith("LOADED=")]
    assert loaded == ["LOADED="], stderr
    rest = "\n".join(line for line in stderr.splitlines() if not line.startswith("LOADED="))
    assert not STRAY.search(rest) and "tooldeck: embedding" not in rest, rest
