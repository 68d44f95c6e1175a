"""Meta-tests (after datasette): every hook is documented, and every hook is exercised by a test."""

from __future__ import annotations

import inspect
from pathlib import Path

import pytest

from tooldeck_hookspecs import PROJECT_NAME
from tooldeck_hookspecs.specs import SPEC_MODULES

ROOT = Path(__file__).resolve().parents[1]
HOOKS = [
    (module.__name__.rsplit(".", 1)[-1], name, function)
    for module in SPEC_MODULES
    for name, function in vars(module).items()
    if name.startswith(f"{PROJECT_NAME}_") and hasattr(function, f"{PROJECT_NAME}_spec")
]


def _test_sources() -> str:
    here = Path(__file__).resolve()
    texts = []
    for path in ROOT.rglob("test_*.py"):
        if ".venv" in path.parts or ".nox" in path.parts or path.resolve() == here:
            continue
        texts.append(path.read_text(encoding="utf-8"))
    return "\n".join(texts)


def test_there_is_a_hookspec_module_per_stage():
    stages = {module.__name__.rsplit(".", 1)[-1] for module in SPEC_MODULES}
    assert {"register", "filter", "authorize", "cache", "execute"} <= stages
    assert len(HOOKS) >= 10


@pytest.mark.parametrize(("stage", "name", "function"), HOOKS, ids=[h[1] for h in HOOKS])
def test_hook_is_documented(stage, name, function):
    doc = inspect.getdoc(function) or ""
    sentences = doc.split("\n\n")
    assert len(sentences) >= 2, f"{name}: needs a summary and a paragraph on how it is called"
    # pytest's hookspec.py habit: the second paragraph says how the hook is called.
    assert "Called" in sentences[1], f"{name}: second paragraph must say how it is called"
    for parameter in inspect.signature(function).parameters:
        assert f":param {parameter}:" in doc, f"{name}: parameter {parameter!r} is undocumented"


def test_every_hook_is_exercised_by_a_test():
    sources = _test_sources()
    missing = [name for _, name, _ in HOOKS if name not in sources]
    assert missing == [], f"hooks with no test mentioning them: {missing}"


def test_docs_mention_every_hook():
    docs = (ROOT / "docs" / "hooks.md").read_text(encoding="utf-8")
    missing = [name for _, name, _ in HOOKS if name not in docs]
    assert missing == [], f"hooks missing from docs/hooks.md: {missing}"
