"""Commands that only run or list tools load no model stack (torch, sentence-transformers,
transformers, onnxruntime), no FAISS or numpy, no Redis client and no ``limits``. (That the
MCP server module loads no MCP SDK is tooldeck-mcp's test: plugins/mcp/tests.)

Each check runs in a new process with every installed plugin (the real faiss plugin
included), since a module imported by any earlier test would hide an import here.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tooldeck._bench import HEAVY_MODULES

#: Also kept out of commands that never select or rate-limit: numpy (via the faiss plugin), the
#: ONNX runtime and tokenizers, redis-py, the rate limiter's ``limits``, OpenTelemetry, the
#: shell analyzer and the retry library (issue 16).
STARTUP_MODULES = (
    *HEAVY_MODULES,
    "numpy",
    "onnxruntime",
    "tokenizers",
    "redis",
    "limits",
    "tooldeck_faiss._retriever",
    # Loaded at the first signal, command argument or retry (issue 16's `tooldeck call`).
    "opentelemetry",
    "tooldeck_policy._shell",
    "stamina",
    # The sandbox machinery loads at the first sandboxed call; an in-process one never needs it.
    "tooldeck_runner._sandbox",
)


def _probe(script: str, cwd: Path) -> dict[str, list[str]]:
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    env.pop("TOOLDECK_CONFIG", None)
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=cwd, env=env, capture_output=True, text=True,
        timeout=300, check=False,
    )
    for line in done.stdout.splitlines():
        if line.startswith("PROBE="):
            return dict(json.loads(line.removeprefix("PROBE=")))
    raise AssertionError(f"probe failed ({done.returncode}): {done.stderr[-2000:]}")


def test_call_tools_plugins_export_load_no_model_and_no_faiss(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("hello\n")
    commands = [
        ["call", "file_read", '{"path": "notes.txt"}', "--workdir", str(tmp_path)],
        ["tools", "--json"],
        ["plugins", "--json"],
        ["export", "--format", "openai"],
    ]
    script = f"""
import contextlib, io, json, sys
from tooldeck.cli import main
found = {{}}
for argv in {commands!r}:
    with contextlib.redirect_stdout(io.StringIO()):
        code = main(argv)
    assert code == 0, (argv, code)
    found[argv[0]] = [m for m in {STARTUP_MODULES!r} if m in sys.modules]
plugins = {{}}
with contextlib.redirect_stdout(io.StringIO()) as out:
    main(["plugins", "--json"])
found["plugins_loaded"] = [p["name"] for p in json.loads(out.getvalue())["plugins"]]
print("PROBE=" + json.dumps(found))
"""
    found = _probe(script, tmp_path)
    # The real retriever plugin is installed and loaded: it just loads nothing heavy.
    assert "faiss" in found.pop("plugins_loaded")
    assert found == {"call": [], "tools": [], "plugins": [], "export": []}
