"""How the faiss plugin takes part in ``tooldeck eval`` and ``tooldeck demo`` (hookimpls,
re-exported by :mod:`tooldeck_faiss.plugin`)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from tooldeck_hookspecs import hookimpl


@hookimpl
def tooldeck_evaluation_settings(settings: Mapping[str, Any]) -> dict[str, Any]:
    """The use history in memory only: an evaluation neither reads the deployment's history
    (it would bias the figures) nor writes the replayed queries into it."""
    table = settings.get("faiss")
    # Both: memory only even where the configuration names a shared store (Redis).
    return {
        "faiss": {
            **(table if isinstance(table, Mapping) else {}),
            "history_file": None,
            "history_store": "memory",
        }
    }


@hookimpl
def tooldeck_token_counter() -> tuple[Callable[[str], int], str] | None:
    """The MiniLM model's WordPiece tokenizer (shipped with the model, works offline)."""
    try:
        from transformers import AutoTokenizer

        from ._retriever import default_model_path

        tokenizer = AutoTokenizer.from_pretrained(str(default_model_path()))
    except Exception:
        return None
    # Counting, not encoding for the model: long texts are fine (no 512-token warning).
    tokenizer.model_max_length = 1 << 30
    return (lambda text: len(tokenizer.encode(text))), "MiniLM WordPiece tokenizer"
