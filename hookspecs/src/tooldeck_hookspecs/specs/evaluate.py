"""Evaluation: how a selection plugin takes part in ``tooldeck eval`` and ``tooldeck demo``."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from .._markers import hookspec

# -------------------------------------------------------------------------
# Evaluation decks
# -------------------------------------------------------------------------


@hookspec
def tooldeck_evaluation_settings(settings: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """Adjust the configuration of an evaluation deck (``tooldeck eval retrieval``).

    Called for every implementation when ``tooldeck eval`` builds its isolated deck of a
    dataset's tools; all results are collected and merged over the evaluation's configuration
    (top-level tables, later plugins win per table). The evaluation deck holds, besides the
    dataset's tools, the installed entry points that take part in selection and in running a
    deck: those implementing ``tooldeck_retriever``, ``tooldeck_filter_tools``,
    ``tooldeck_validate_tool``, ``tooldeck_argument_validator``, ``tooldeck_executor`` or this
    hook (no tool pack). So a third-party retriever is evaluated with no extra code (disable
    the default one, or run first); implement this hook when the retriever keeps state the
    evaluation must not touch, e.g. a use history shared with a deployment.

    :param settings: the evaluation's configuration as built so far (the whole table).
    :return: tables to set (``{"faiss": {..., "history_store": "memory"}}``), or None.
    """


@hookspec(firstresult=True)
def tooldeck_token_counter() -> tuple[Callable[[str], int], str] | None:
    """Provide a tokenizer that counts the tokens of exported tool schemas.

    Called when a report (``tooldeck demo``'s hand sizes) needs a real count; stops at the first
    non-None result. Without one, tiktoken is used when it is installed, else an estimate
    (characters / 4) that says so.

    :return: ``(count, label)``: ``count(text)`` returns the number of tokens, ``label`` names
        the tokenizer in the report (``"MiniLM WordPiece tokenizer"``); None when unavailable.
    """
