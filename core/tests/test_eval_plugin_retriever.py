"""``tooldeck eval retrieval`` evaluates whichever retriever is installed, not one by name; a
plugin adjusts the evaluation deck's settings through ``tooldeck_evaluation_settings``; the
demo counts tokens with a plugin's ``tooldeck_token_counter`` (issue 15)."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tooldeck._demo import _token_counter
from tooldeck._plugins import TooldeckPluginManager
from tooldeck.testing import inline_plugin

#: A keyword retriever. It only ranks once the evaluation's hook has told it that it runs in an
#: evaluation deck: figures above zero prove both that the deck used it and that the hook ran.
KEYWORD = """
from tooldeck_hookspecs import ScoredTool, hookimpl

class Keyword:
    def __init__(self, evaluation):
        self.evaluation = evaluation
        self.texts = {}
    async def warm_up(self):
        pass
    async def index(self, tools):
        self.texts = {t.name: (t.name + " " + t.description).lower() for t in tools}
    async def add(self, tools):
        self.texts.update({t.name: (t.name + " " + t.description).lower() for t in tools})
    async def remove(self, names):
        for name in names:
            self.texts.pop(name, None)
    async def search(self, query, k):
        if not self.evaluation:
            return []
        words = [w for w in query.lower().split() if len(w) > 3]
        scored = [ScoredTool(name=n, score=float(sum(w in t for w in words)))
                  for n, t in self.texts.items()]
        scored.sort(key=lambda s: -s.score)
        return [s for s in scored if s.score > 0][:k]

@hookimpl
def tooldeck_retriever(settings):
    return Keyword(bool(settings.get("td_keyword", {}).get("evaluation")))

@hookimpl
def tooldeck_evaluation_settings(settings):
    return {"td_keyword": {"evaluation": True}}
"""

DATASET = {
    "tools": [
        {"name": "weatherForecast", "description": "Forecast the weather of a city"},
        {"name": "sendEmail", "description": "Send an email message to someone"},
        {"name": "convertCurrency", "description": "Convert money between currencies"},
    ],
    "queries": [
        {"query": "what weather is forecast for Paris", "relevant": ["weatherForecast"]},
        {"query": "send an email to Ann", "relevant": ["sendEmail"]},
        {"query": "convert money from euros", "relevant": ["convertCurrency"]},
    ],
}


def test_eval_retrieval_evaluates_a_third_party_retriever(tmp_path: Path, install_plugin) -> None:
    install_plugin(tmp_path, "td_keyword", KEYWORD)
    dataset = tmp_path / "tiny.json"
    dataset.write_text(json.dumps(DATASET), encoding="utf-8")
    env = {
        **os.environ,
        "PYTHONPATH": str(tmp_path),
        "HF_HUB_OFFLINE": "1",
        "TOOLDECK_HISTORY_FILE": "off",
        "TOOLDECK_DISABLE_PLUGINS": "faiss",  # the author's retriever is the only one
    }
    env.pop("TOOLDECK_CONFIG", None)
    done = subprocess.run(
        [sys.executable, "-m", "tooldeck", "eval", "retrieval", str(dataset), "--json"],
        capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300,
    )
    assert done.returncode == 0, done.stderr
    figures = json.loads(done.stdout)
    assert figures["queries"] == 3 and figures["tools"] == 3
    assert figures["R@5"] == 100.0 and figures["NDCG@10"] == 100.0


def test_the_demo_counts_tokens_with_a_plugins_tokenizer() -> None:
    def tooldeck_token_counter():
        return (lambda text: len(text.split())), "words"

    if importlib.util.find_spec("tiktoken") is not None:
        pytest.skip("tiktoken is installed: the demo counts with it before asking plugins")
    manager = TooldeckPluginManager()
    count, label = _token_counter(manager)
    assert label == "estimate: characters / 4" and count("abcdefgh") == 2
    manager.register(inline_plugin(tooldeck_token_counter), name="words")
    count, label = _token_counter(manager)
    assert label == "words" and count("one two three") == 3


#: A retriever that only ranks when its own configuration table says so: figures above zero
#: prove that ``tooldeck eval retrieval`` evaluated the deployment's settings.
CONFIGURED = """
from tooldeck_hookspecs import ScoredTool, hookimpl

class Configured:
    def __init__(self, on):
        self.on = on
        self.names = []
    async def warm_up(self):
        pass
    async def index(self, tools):
        self.names = [t.name for t in tools]
    async def add(self, tools):
        self.names += [t.name for t in tools]
    async def remove(self, names):
        self.names = [n for n in self.names if n not in names]
    async def search(self, query, k):
        if not self.on:
            return []
        words = set(query.lower().split())
        hits = [n for n in self.names if any(part in words for part in n.split("_"))]
        return [ScoredTool(name=n, score=1.0) for n in hits][:k]

@hookimpl
def tooldeck_retriever(settings):
    return Configured(settings.get("td_configured", {}).get("on") is True)

@hookimpl
def tooldeck_config_schema():
    return {"td_configured": {"type": "object", "properties": {"on": {"type": "boolean"}}}}
"""


@pytest.mark.parametrize("how", ["--config", "TOOLDECK_CONFIG", "--config pyproject spelling"])
def test_eval_retrieval_uses_the_configurations_selection_settings(
    tmp_path: Path, install_plugin, how: str
) -> None:
    install_plugin(tmp_path, "td_configured", CONFIGURED)
    dataset = tmp_path / "tiny.json"
    dataset.write_text(json.dumps(DATASET), encoding="utf-8")
    config = tmp_path / "tooldeck.toml"
    # The runner's table belongs to a stage the evaluation deck does not load: it is left out
    # instead of being reported as a table nobody reads.
    table = "tool.tooldeck.td_configured" if "spelling" in how else "td_configured"
    config.write_text(f"[{table}]\non = true\n\n[runner]\nzygote = false\n", "utf-8")
    env = {
        **os.environ,
        "PYTHONPATH": str(tmp_path),
        "HF_HUB_OFFLINE": "1",
        "TOOLDECK_HISTORY_FILE": "off",
        "TOOLDECK_DISABLE_PLUGINS": "faiss",
    }
    env.pop("TOOLDECK_CONFIG", None)
    command = [sys.executable, "-m", "tooldeck", "eval", "retrieval", str(dataset), "--json"]

    said: list[str] = []

    def run(extra: list[str], environ: dict[str, str]) -> dict:
        done = subprocess.run(
            command + extra, capture_output=True, text=True, env=environ, cwd=tmp_path / "..",
            timeout=300,
        )
        assert done.returncode == 0, done.stderr
        said.append(done.stderr)
        return json.loads(done.stdout)

    plain = run([], env)
    assert plain["R@5"] == 0.0 and plain["settings_from"] is None
    if how.startswith("--config"):
        figures = run(["--config", str(config)], env)
    else:
        figures = run([], {**env, "TOOLDECK_CONFIG": str(config)})
    assert figures["R@5"] == 100.0 and figures["complete@15"] == 100.0
    assert figures["settings_from"] == str(config)
    assert "no table of the evaluated plugins" not in said[-1]
    # A file with nothing for the evaluated plugins says so instead of silently evaluating
    # the defaults as if they were its settings.
    config.write_text("[hand]\nlimit = 12\n", "utf-8")
    assert run(["--config", str(config)], env)["R@5"] == 0.0
    assert "has no table of the evaluated plugins" in said[-1]
