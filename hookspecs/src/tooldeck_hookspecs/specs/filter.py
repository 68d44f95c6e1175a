"""Filter stage: deal the model the few tools that fit the task."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from .._markers import hookspec
from ..model import Exclusion, Preference, SessionInfo, ToolDefinition
from ..protocols import Retriever

# -------------------------------------------------------------------------
# Retrieval (provider)
# -------------------------------------------------------------------------


@hookspec(firstresult=True)
def tooldeck_retriever(settings: Mapping[str, Any]) -> Retriever | None:
    """Provide the retriever that recalls candidate tools for a task.

    Called once at start-up; stops at the first non-None result. To swap the retriever, install a
    plugin whose implementation runs first (``tryfirst=True``) or disable the default one.

    :param settings: the whole tooldeck configuration; read your own table (e.g.
        ``settings.get("faiss", {})``).
    :return: an object implementing :class:`~tooldeck_hookspecs.protocols.Retriever`.
    """


# -------------------------------------------------------------------------
# Rules (policy)
# -------------------------------------------------------------------------


@hookspec
def tooldeck_filter_tools(
    query: str, candidates: Sequence[ToolDefinition], session: SessionInfo
) -> Sequence[Exclusion | Preference] | None:
    """Take candidates out of the hand, or prefer some, for this session and task.

    Called for every implementation on each selection; all results are collected and unioned:
    a tool excluded by any plugin is out, boosts add up. Should be pure and cheap: mark it
    ``@nonblocking`` and the deck calls it on its event loop; without the mark it runs in a worker
    thread under a deadline (10 s), and a filter that raises or does not answer in time is
    logged and left out of that selection (filters shape the hand; ``tooldeck_authorize_call``
    is where calls are refused).

    :param query: the task description the hand is dealt for.
    :param candidates: the recalled tools, best first, as a tuple every filter shares (a hook
        cannot add or drop candidates; it answers verdicts).
    :param session: a snapshot of the session (grants, excluded categories, max level, ...).
    :return: :class:`Exclusion` items (each with a reason) and :class:`Preference` items (a
        finite number as ``boost``). A verdict on a tool that is not a candidate is ignored;
        anything else (an item that is not a verdict, a name that is not a string, a boost
        that is NaN or not a number) is left out and logged, naming the plugin.
    """
