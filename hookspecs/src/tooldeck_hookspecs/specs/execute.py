"""Execute stage: run the call, then post-process its result."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .._markers import hookspec
from ..model import ToolCall, ToolDefinition, ToolResult
from ..protocols import Executor


@hookspec(firstresult=True)
def tooldeck_executor(settings: Mapping[str, Any]) -> Executor | None:
    """Provide the executor: queue per category, timeout, cancellation, retries, sandbox.

    Called once at start-up; stops at the first non-None result. The deck cannot run calls
    without one (install ``tooldeck-runner``).

    :param settings: the whole tooldeck configuration.
    """


@hookspec
def tooldeck_process_result(
    call: ToolCall, tool: ToolDefinition, result: ToolResult
) -> ToolResult | None:
    """Transform a result before it is returned, cached or logged (e.g. redact secrets).

    Called for every implementation in turn, each receiving the previous one's output (a chain);
    return None to leave the result unchanged. Runs for failures too. Mark a cheap processor
    ``@nonblocking`` and the deck calls it on its event loop; an unmarked one runs in a worker
    thread under the call's ``timeout_s`` (past it the result is withheld with ``TIMEOUT``). A
    ``tooldeck_offload`` attribute on the function (a predicate over the result) decides per
    result instead: the policy's redaction goes to a thread for big results only.

    :param call: the call that produced the result.
    :param tool: the tool's definition.
    :param result: the result so far.
    """


@hookspec
def tooldeck_redact(value: Any) -> Any | None:
    """Redact secrets from something the deck sends out that is not a known tool's result:
    the name of a tool nobody registered and its answer, a selection's task and the reasons
    dealt with it, the events observers get; servers and commands pass what they word
    themselves (an approval question, a search answer) through ``Deck.redact`` too.

    Called for every implementation in turn, each receiving the previous one's output (a
    chain); return None to leave the value unchanged, or a value of the same kind. ``value``
    is a ``str``, a JSON-like structure (mappings, lists, tuples: redact the strings inside,
    keys too) or a :class:`ToolResult` (its data, error and metadata). Mark a cheap, pure
    redactor ``@nonblocking`` and the deck calls it on its event loop for short values (long
    ones from a worker thread); an unmarked one runs in a worker thread under a deadline
    (10 s) when the deck redacts from its loop, so one that blocks or hangs withholds the values
    it was given and stalls nobody else. ``Deck.redact`` itself runs the chain where it is called.
    One that raises or answers another kind of value makes the deck withhold the value.

    :param value: what is about to leave the deck.
    """
