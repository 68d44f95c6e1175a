"""The snippets in README.md and docs/ work as written (issue 15, "the CLI and the docs").

Every ``python`` block compiles and every ``toml`` block parses. The tool pack of
docs/plugin-authors.md is built from its own snippets (pyproject.toml, plugin module, test),
installed (as a wheel, into a folder of its own) and its test is run with pytest, in a
subprocess: what a plugin author copies from the docs installs and passes.
"""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
_BLOCK = re.compile(r"^```(\w+)\n(.*?)^```", re.S | re.M)


def _blocks(kind: str) -> list[tuple[str, int, str]]:
    found = []
    for path in DOCS:
        text = path.read_text(encoding="utf-8")
        for match in _BLOCK.finditer(text):
            if match.group(1) == kind:
                line = text.count("\n", 0, match.start()) + 1
                found.append((f"{path.relative_to(ROOT)}:{line}", line, match.group(2)))
    return found


PYTHON = _blocks("python")
TOML = _blocks("toml")


@pytest.mark.parametrize(("where", "line", "code"), PYTHON, ids=[b[0] for b in PYTHON])
def test_python_snippets_compile(where, line, code):
    # `...` bodies and top-level `await` in fragments are fine: compile as a coroutine body too.
    try:
        ast.parse(code)
    except SyntaxError:
        body = "".join(f"    {line}\n" for line in code.splitlines())
        ast.parse("async def _snippet():\n" + body)


@pytest.mark.parametrize(("where", "line", "text"), TOML, ids=[b[0] for b in TOML])
def test_toml_snippets_parse(where, line, text):
    tomllib.loads(text)


def _snippet(first_line: str, kind: str) -> str:
    for _, _, code in _blocks(kind):
        if code.splitlines() and code.splitlines()[0].strip() == first_line:
            return code
    raise AssertionError(f"docs/plugin-authors.md has no {kind} block starting {first_line!r}")


def test_the_plugin_authors_pack_installs_and_its_test_passes(tmp_path):
    pack = tmp_path / "acme-tools"
    (pack / "src" / "acme_tools").mkdir(parents=True)
    (pack / "tests").mkdir()
    (pack / "pyproject.toml").write_text(_snippet("# pyproject.toml", "toml"))
    (pack / "src" / "acme_tools" / "__init__.py").write_text("")
    (pack / "src" / "acme_tools" / "plugin.py").write_text(
        _snippet("# src/acme_tools/plugin.py", "python")
    )
    (pack / "tests" / "test_acme.py").write_text(_snippet("# tests/test_acme.py", "python"))
    wheels, target = tmp_path / "wheels", tmp_path / "site"
    build = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
         "-w", str(wheels), str(pack)],
        capture_output=True, text=True, timeout=300,
    )
    assert build.returncode == 0, build.stderr[-2000:]
    (wheel,) = wheels.glob("acme_tools-0.1.0-*.whl")
    install = subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(target),
         str(wheel)],
        capture_output=True, text=True, timeout=300,
    )
    assert install.returncode == 0, install.stderr[-2000:]
    # The pack's entry point is found on sys.path like any installed distribution's.
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(target), os.environ.get(
        "PYTHONPATH", "")]), "HF_HUB_OFFLINE": "1"}
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(pack / "tests")],
        capture_output=True, text=True, timeout=300, cwd=pack, env=env,
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-2000:]
    assert "1 passed" in run.stdout


def test_the_readme_agent_loop_runs_as_written(tmp_path, monkeypatch):
    """The README's first snippet, with a scripted OpenAI client in place of the real one: the
    deck is loaded once, tool calls run (a malformed one answered, not raised), the loop ends."""
    from openai.types.chat import ChatCompletion

    code = next(c for _, _, c in PYTHON if c.startswith("import trio\nfrom openai import OpenAI"))
    code = code[: code.index("print(trio.run(")]  # everything but the call with a real client
    (tmp_path / "config.toml").write_text("answer = 42\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("TOOLDECK_DISABLE_PLUGINS", "redis,mcp,browser,search")

    def completion(message: dict) -> ChatCompletion:
        return ChatCompletion.model_validate({
            "id": "c", "object": "chat.completion", "created": 0, "model": "gpt-4.1",
            "choices": [{"index": 0, "finish_reason": "stop", "message": message}],
        })

    script = [
        completion({"role": "assistant", "content": None, "tool_calls": [
            {"id": "t1", "type": "function",
             "function": {"name": "list_dir", "arguments": '{"path": "."}'}},
            {"id": "t2", "type": "function",
             "function": {"name": "file_read", "arguments": '{"path": "config.toml"'}},  # cut
        ]}),
        completion({"role": "assistant", "content": None, "tool_calls": [
            {"id": "t3", "type": "function",
             "function": {"name": "file_read", "arguments": '{"path": "config.toml"}'}},
        ]}),
        completion({"role": "assistant", "content": "answer is 42"}),
    ]
    seen: list[list] = []

    class Completions:
        def create(self, **kwargs):
            seen.append(list(kwargs["messages"]))
            return script.pop(0)

    class Client:
        chat = type("Chat", (), {"completions": Completions()})()

    namespace: dict = {}
    exec(compile(code, "README.md", "exec"), namespace)
    import trio

    answer = trio.run(namespace["agent"], Client(), "list the folder and read the config file")
    assert answer == "answer is 42" and not script
    tool_messages = [m for m in seen[-1] if isinstance(m, dict) and m.get("role") == "tool"]
    by_id = {m["tool_call_id"]: m["content"] for m in tool_messages}
    assert "config.toml" in by_id["t1"]
    assert "INVALID_ARGUMENTS" in by_id["t2"]  # the cut JSON came back to the model
    assert "answer = 42" in by_id["t3"]
