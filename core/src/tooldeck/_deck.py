"""The deck and its sessions: the call pipeline and the hand dealt per task.

Per call: find the tool (fallback: widen retrieval) -> validate arguments -> authorize (deny > ask
> allow, confirmation) -> cache get -> rate limit -> execute (queue, timeout, sandbox) -> process
result (redaction) -> cache put -> ToolResult. Every failure is a ToolResult; nothing raises to the
caller except trio's own cancellation of the caller's scope.
"""

from __future__ import annotations

import contextvars
import hashlib
import inspect
import itertools
import logging
import math
import os
import re
import threading
import time
import uuid
import weakref
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal, TypeVar

import attrs
import trio

from tooldeck_hookspecs import (
    CALL_DEADLINE,
    EVENT_KINDS_ATTR,
    LEVEL_ORDER,
    ArgumentProblem,
    ArgumentValidator,
    ConfigError,
    Decision,
    ErrorCode,
    Event,
    Exclusion,
    Preference,
    RegistrationError,
    ScoredTool,
    SecurityLevel,
    SessionInfo,
    StageMissingError,
    ToolCall,
    ToolContext,
    ToolDefinition,
    ToolError,
    ToolResult,
    cache_key,
    canonical_json,
    canonical_json_sha256,
    is_nonblocking,
    never_suspends,
    normalise_rules,
    protected_rule,
)
from tooldeck_hookspecs._progress import clean_progress

from ._approvals import InMemoryApprovalStore
from ._catalog import (
    CatalogView,
    RegistrationWarning,
    ToolCatalog,
    flatten_parameters,
    repair_definition,
    sanitize_parameters,
)
from ._config import DEFAULT_MAX_TASK_CHARS as _DEFAULT_MAX_TASK_CHARS
from ._config import Config, load_config, trust_store_path
from ._events import EventPump
from ._frozen import freeze_schema
from ._imports import shadow_rules
from ._introspect import apply_override, definition_from_function
from ._normalise import (
    MAX_ARGUMENT_DEPTH,
    MAX_ARGUMENT_ITEMS,
    json_safe,
    json_safe_sized,
    json_size,
    shorten,
)
from ._plugins import (
    BUILTIN_ENTRY_POINTS,
    FailedPlugin,
    HookImpl,
    PluginInfo,
    TooldeckPluginManager,
    import_timeout,
)

__all__ = ["Deck", "Session", "Hand", "ConfirmRequest", "ConfirmCallback"]

log = logging.getLogger("tooldeck")

#: Which package to install when a stage is missing.
STAGE_PACKAGES = {
    "register": ("tooldeck_argument_validator", "tooldeck-schema"),
    "filter": ("tooldeck_retriever", "tooldeck-faiss"),
    "execute": ("tooldeck_executor", "tooldeck-runner"),
}


@attrs.frozen(kw_only=True)
class ConfirmRequest:
    """What a confirm callback is asked: may this exact call run?"""

    session_id: str
    tool: ToolDefinition
    call: ToolCall
    reasons: tuple[str, ...]


#: An async callback: True approves this call, "always" approves the tool for the session (the
#: definition shown in the request: registered again differently, it asks again), False (or
#: raising, or timing out) denies.
ConfirmCallback = Callable[[ConfirmRequest], Awaitable[bool | Literal["always"]]]


@attrs.frozen(kw_only=True)
class Hand:
    """The tools dealt to the model for one task, with why each is there and what was removed.

    Its texts (query, reasons, exclusions' reasons, problems) passed :meth:`Deck.redact`: a
    hand is printed, served over MCP and observed, so a secret in the task stays out of it.
    """

    #: The task, secrets redacted.
    query: str
    tools: tuple[ToolDefinition, ...]
    scores: Mapping[str, float]
    #: Why a tool is in the hand: "retrieved" (then the retriever's own reason, if it gave
    #: one: ``ScoredTool.reason``), "pinned", "sticky", plus preference reasons.
    reasons: Mapping[str, tuple[str, ...]]
    exclusions: tuple[Exclusion, ...]
    candidates: int
    #: Estimated schema tokens of the dealt tools (``tooldeck._catalog.schema_tokens``).
    tokens: int = 0
    #: The token budget the hand was dealt under (``hand.max_tokens``), or None.
    max_tokens: int | None = None
    #: Tools ranked into the hand but left out because their schema did not fit the budget.
    over_budget: tuple[str, ...] = ()
    #: What went wrong while dealing, if anything: a retriever that raised, did not answer in
    #: time or answered something unusable (the hand then holds pinned and sticky tools only),
    #: entries of its answer that were dropped (unknown shape, duplicates), or a task longer
    #: than ``hand.max_task_chars`` that was read by its beginning and end only.
    problems: tuple[str, ...] = ()

    @property
    def names(self) -> list[str]:
        """Tool names in hand order."""
        return [t.name for t in self.tools]

    def export(self, format: str) -> list[dict[str, Any]]:
        """The hand as a provider's tool schemas (``openai``, ``anthropic``, ``mcp``, ...)."""
        from .adapters import export_tools

        return export_tools(self.tools, format)


# Call ids: unique per process and across processes (random prefix), cheaper than a uuid4 per call.
_CALL_PREFIX = uuid.uuid4().hex[:6]
_call_counter = itertools.count(1)


_checkpoints = itertools.count()


_ACTIONS = frozenset({"allow", "ask", "deny"})
#: Pending approvals one session keeps at most (each also expires with the approval's TTL).
_MAX_PENDING = 10_000
#: How many times a call is judged again while its session keeps changing before it starts.
_JUDGE_AGAIN_ROUNDS = 4


def _malformed_decision(plugin: str, decision: object) -> Decision:
    """Anything but a well-formed Decision from a policy hook: fail closed, naming the plugin."""
    if isinstance(decision, Decision):
        what = f"a Decision with the unknown action {shorten(decision.action, 40)!r}"
    else:
        what = f"{type(decision).__name__} {shorten(repr_safe(decision), 60)}"
    log.error("plugin %r: tooldeck_authorize_call returned %s", plugin, what)
    return Decision.deny(
        f"policy plugin {plugin!r} returned {what} instead of a Decision or None; the call "
        "was refused",
        code=ErrorCode.PLUGIN_ERROR,
        plugin=plugin,
    )


def repr_safe(value: object) -> str:
    try:
        return repr(value)
    except Exception:
        return f"<{type(value).__name__}>"


_V = TypeVar("_V")
#: What a withheld text reads (its redactor failed): nothing of the value is left.
WITHHELD_TEXT = "[withheld: redaction failed]"


def _same_kind(value: object, changed: object) -> bool:
    """Whether a redactor's answer can stand for ``value`` (text for text, and so on)."""
    for kind in (str, ToolResult, Mapping, list | tuple):
        if isinstance(value, kind):
            return isinstance(changed, kind)
    return True


def _withheld(value: Any, plugin: str, why: str = "failed") -> Any:
    """What goes out instead of ``value`` when its redaction failed: nothing of it."""
    if isinstance(value, str):
        return WITHHELD_TEXT
    if isinstance(value, ToolResult):
        return ToolResult.fail(
            ErrorCode.PLUGIN_ERROR,
            f"redaction by plugin {plugin!r} {why}; the result was withheld",
        )
    if isinstance(value, Mapping):
        return {}
    if isinstance(value, list | tuple):
        return type(value)() if type(value) in (list, tuple) else []
    return None


#: Argument problems listed in an INVALID_ARGUMENTS answer's details (the rest counted).
_MAX_LISTED_PROBLEMS = 100

#: How long the deck waits for a ``tooldeck_redact`` hook that is not ``@nonblocking`` when it
#: redacts from its loop (:meth:`Deck.aredact`) and no call's deadline applies.
REDACT_TIMEOUT_S = 10.0

#: Worker threads each session's blocking policy hooks may use at once.
_POLICY_THREADS_PER_SESSION = 8

#: How long resume() waits for the approval store when the call's tool is gone.
_RESUME_STORE_TIMEOUT_S = 30.0

#: Session attributes its SessionInfo snapshot is built from: assigning one rebuilds it.
_SNAPSHOT_FIELDS = frozenset(
    {
        "workdir",
        "grants",
        "excluded_categories",
        "max_level",
        "always_allowed",
        "environment",
        "attributes",
    }
)

_WATCHED_SETS = frozenset({"grants", "excluded_categories", "always_allowed"})
_WATCHED_DICTS = frozenset({"environment", "attributes"})


def _notifying(base: type, name: str) -> Any:
    """``base.name`` that calls ``self._changed()`` once it has changed the container."""
    method = getattr(base, name)

    def mutate(self: Any, *args: Any, **kwargs: Any) -> Any:
        result = method(self, *args, **kwargs)
        self._changed()
        return result

    mutate.__name__ = name
    return mutate


class _WatchedSet(set[str]):
    """A session's set field (``grants``, ``excluded_categories``, ``always_allowed``) that
    tells its session when it is changed in place: ``session.grants.discard("shell")`` is a
    revoke like :meth:`Session.revoke` (the policy snapshot is rebuilt, and calls waiting for
    the user are judged again), not a change seen whenever the snapshot happens to be rebuilt.
    """

    def __init__(self, items: Iterable[str], changed: Callable[[], None]) -> None:
        super().__init__(items)
        self._changed = changed

    def __reduce__(self) -> Any:
        return (set, (list(self),))  # a copy or a pickle is a plain set: nobody to tell

    add = _notifying(set, "add")
    discard = _notifying(set, "discard")
    remove = _notifying(set, "remove")
    pop = _notifying(set, "pop")
    clear = _notifying(set, "clear")
    update = _notifying(set, "update")
    difference_update = _notifying(set, "difference_update")
    intersection_update = _notifying(set, "intersection_update")
    symmetric_difference_update = _notifying(set, "symmetric_difference_update")
    __ior__ = _notifying(set, "__ior__")
    __iand__ = _notifying(set, "__iand__")
    __isub__ = _notifying(set, "__isub__")
    __ixor__ = _notifying(set, "__ixor__")


class _WatchedDict(dict[str, Any]):
    """A session's ``environment`` or ``attributes`` that tells its session when it is changed
    in place (as :class:`_WatchedSet`): policy reads both (``url_allow``, ``VIRTUAL_ENV``)."""

    def __init__(self, items: Mapping[str, Any], changed: Callable[[], None]) -> None:
        super().__init__(items)
        self._changed = changed

    def __reduce__(self) -> Any:
        return (dict, (dict(self),))

    __setitem__ = _notifying(dict, "__setitem__")
    __delitem__ = _notifying(dict, "__delitem__")
    pop = _notifying(dict, "pop")
    popitem = _notifying(dict, "popitem")
    clear = _notifying(dict, "clear")
    update = _notifying(dict, "update")
    setdefault = _notifying(dict, "setdefault")
    __ior__ = _notifying(dict, "__ior__")


#: How long the rule filters that run in a thread (not ``@nonblocking``) may take per selection.
_FILTER_TIMEOUT_S = 10.0

#: How long an installed pack's ``tooldeck_register_tools`` may take (``register_timeout_s``).
#: Generous: the MCP bridge starts its servers there, one after the other (20 s start-up each).
DEFAULT_REGISTER_TIMEOUT_S = 120.0
#: How long a selection waits for the retriever's answer (the first one may load a model).
_RECALL_TIMEOUT_S = 60.0
#: Default ``hand.max_task_chars``: the characters of a task that selection reads. Tasks are a
#: request or two (the open retrieval sets' longest is 4,737 characters); an agent that passes
#: a whole transcript or document made every stage pay for all of it: a 1 MB task took about a
#: minute of a core in the retriever (its second channel reads every token) and was kept, whole,
#: in the hand, the history and the query caches.
DEFAULT_MAX_TASK_CHARS = _DEFAULT_MAX_TASK_CHARS


def _bounded_task(task: str, limit: int) -> tuple[str, str | None]:
    """``task`` as selection reads it, and a note when it was shortened.

    A longer task keeps its beginning and its end (half of ``limit`` each, cut at a space
    where one is near): a document's instructions come first, a transcript's latest request
    last.
    """
    if len(task) <= limit:
        return task, None
    half = limit // 2
    head, tail = task[:half], task[len(task) - (limit - half):]
    # At a word boundary when one is within the last (first) 10% of a half: no half-words.
    space = head.rfind(" ", half - half // 10)
    head = head[:space] if space > 0 else head
    space = tail.find(" ", 0, half // 10)
    tail = tail[space + 1:] if space >= 0 else tail
    note = (f"the task has {len(task):,} characters; selection read its first {len(head):,} "
            f"and its last {len(tail):,} (hand.max_task_chars = {limit:,})")
    return f"{head}\n…\n{tail}", note


#: Longest ``ScoredTool.reason`` a hand keeps (longer ones are cut, marked with "…").
_MAX_REASON_CHARS = 300


#: Characters of outward text (a hand's task and reasons) redacted on the event loop at most;
#: more go to a worker thread (about 1.5 ms of the policy's redaction).
_INLINE_REDACT_CHARS = 16 * 1024


def _literal_rule(text: str) -> str:
    """``text`` as a protected path rule that matches it alone: its ``*``, ``?`` and ``[`` are
    glob characters to the rules, so each is written as a one-character class."""
    return re.sub(r"([*?\[\]])", r"[\1]", text)


def _config_names(source: str) -> list[str]:
    """The file names a configuration file is reached by: its own, each symbolic link's on
    the way, and its real file's (``deck.toml -> conf/base.toml`` is changed through either)."""
    names: list[str] = []
    path = source
    for _ in range(40):  # the kernel's own limit of links followed
        names.append(os.path.basename(path))
        try:
            if not os.path.islink(path):
                break
            path = os.path.join(os.path.dirname(path), os.readlink(path))
        except OSError:
            break
    try:
        names.append(os.path.basename(os.path.realpath(source)))
    except (OSError, ValueError):
        pass
    return [n for n in dict.fromkeys(names) if n and n not in (".", "..")]


def _config_rules(source: str, rules: Sequence[str]) -> list[str]:
    """Rules protecting a configuration file by every name it is reached by (literally: a
    ``deck[prod].toml`` is not a pattern), except names the rules already cover."""
    current = normalise_rules(rules)
    return [
        _literal_rule(name)
        for name in _config_names(source)
        if protected_rule(name, current) is None
    ]


#: XDG folders that stand for a home folder's ``.config``, ``.local/share``, ``.local/state``
#: and ``.cache/tooldeck`` when set elsewhere.
_XDG_FOLDERS = {
    "XDG_CONFIG_HOME": "",
    "XDG_DATA_HOME": "",
    "XDG_STATE_HOME": "",
    "XDG_CACHE_HOME": "tooldeck/",
}


def _home_rules(workdir: str, defaults: Sequence[str]) -> list[str]:
    """The anchored (home-folder) rules of ``defaults`` again, anchored at the user's home
    folder when it lies below the top of ``workdir``, and the XDG folders set inside it.

    A workdir of ``/`` or ``/home`` holds a home folder without being one: ``/.ssh/`` matched
    at the top protects nothing there.
    """
    try:
        base = os.path.realpath(workdir)
    except (OSError, TypeError, ValueError):
        return []
    # $HOME, and the user database's home of this process's user.
    homes = [home] if (home := os.environ.get("HOME")) else []
    try:
        import pwd

        homes.append(pwd.getpwuid(os.getuid()).pw_dir)
    except (ImportError, KeyError, OSError):
        pass
    prefix = base.rstrip("/") + "/"
    anchored = [r for r in defaults if r.startswith("/")]
    rules: list[str] = []
    for home in homes:
        try:
            real = os.path.realpath(home)
        except (OSError, ValueError):
            continue
        if real.startswith(prefix):
            rel = _literal_rule(real[len(prefix):])
            rules.extend(f"/{rel}{rule}" for rule in anchored)
    for variable, below in _XDG_FOLDERS.items():
        value = os.environ.get(variable)
        if not value or not os.path.isabs(value):
            continue
        try:
            real = os.path.realpath(value)
        except (OSError, ValueError):
            continue
        if real.startswith(prefix):
            rules.append(f"/{_literal_rule(real[len(prefix):])}/{below}")
    return list(dict.fromkeys(rules))


def _trust_store_rules(workdir: str) -> list[str]:
    """Rules (anchored at ``workdir``) for the trust store, where it lies inside the workdir
    under a name the defaults do not cover (``TOOLDECK_TRUST_FILE=/app/state/trust.json``).

    The store says which found configuration files apply in full: a session that wrote the
    SHA-256 of the project's untrusted ``pyproject.toml`` into it would have the next deck
    started there apply that file's grants, MCP server commands and sandbox switches. Both
    the path as named and its real path (through symbolic links) are protected, whether or
    not the store exists yet (the first ``tooldeck config trust`` creates it).
    """
    try:
        base = os.path.realpath(workdir)
        store = os.path.abspath(trust_store_path())
        spellings = [store, os.path.realpath(store)]
    except (OSError, TypeError, ValueError):
        return []
    prefix = base.rstrip("/") + "/"
    return list(dict.fromkeys(
        f"/{_literal_rule(path[len(prefix):])}" for path in spellings if path.startswith(prefix)
    ))


def _whole(name: str, value: Any, minimum: int) -> int:
    """``value`` as an int of at least ``minimum`` (5.0 is 5); TypeError or ValueError else."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(f"{name} must be a number, not {type(value).__name__}")
    if isinstance(value, float) and not value.is_integer():
        raise ValueError(f"{name} must be a whole number, not {value!r}")
    if value < minimum:
        raise ValueError(f"{name} must be at least {minimum}, not {value!r}")
    return int(value)


#: Deeper than any schema the register stage admits (it refuses them by depth): below this,
#: a hostile schema's levels are shared rather than copied, so copying never recurses out.
_COPY_DEPTH = 200

#: The most of a name no tool has that a result's metadata and the call's events carry.
_SHOWN_NAME_CHARS = 256

#: A call id is shown as it came (in the result's metadata, events, logs, the tool's context and
#: pending approvals) when it is at most this long and printable ASCII without spaces: every
#: provider's ids are (``call_…``, ``toolu_…``, ``fc_…``, UUIDs).
_MAX_CALL_ID_CHARS = 128
_PLAIN_CALL_ID = re.compile(rf"[\x21-\x7e]{{0,{_MAX_CALL_ID_CHARS}}}\Z")
#: Characters of a call id's text that are hashed into its shown form (a 10 MB id is not).
_CALL_ID_HASHED_CHARS = 65_536


def _bounded_call_id(value: object) -> str:
    """A call id that is not plain (see :data:`_PLAIN_CALL_ID`) as the deck shows it: its first
    64 characters with anything but printable ASCII replaced by ``_``, then ``~`` and a hash of
    the whole, so that distinct ids stay distinct and the same id always reads the same.

    The id is the model's (or its server's) text: a 10 MB id was copied into every metadata,
    event, span and log line of the call, and one holding a newline or an escape sequence
    forged log lines. Provider messages still echo the original (``result_messages`` gets the
    parsed call, not this one): the provider matches results by it.
    """
    text = value if isinstance(value, str) else repr_safe(value)
    head = text[:_CALL_ID_HASHED_CHARS].encode("utf-8", "surrogatepass")
    digest = hashlib.sha256(head + b"\x00" + str(len(text)).encode()).hexdigest()[:16]
    shown = "".join(ch if "\x21" <= ch <= "\x7e" else "_" for ch in text[:64])
    return f"{shown}~{digest}"


#: How long a cancelled writing call may spend invalidating cached reads on its way out.
_CANCELLED_INVALIDATE_S = 5.0


def _json_copy(value: Any, depth: int = 0) -> Any:
    """A copy of the dicts and lists of a JSON-like value (scalars and other objects shared).

    Several times faster than ``copy.deepcopy`` on schemas, which matters for catalogs of
    thousands of tools."""
    if depth > _COPY_DEPTH:
        return value
    kind = type(value)
    if kind is dict or isinstance(value, dict):
        return {k: _json_copy(v, depth + 1) for k, v in value.items()}
    if kind is list or isinstance(value, list):
        return [_json_copy(v, depth + 1) for v in value]
    return value


def _only_parameter_problems(tool: ToolDefinition, found: Sequence[str]) -> bool:
    """Whether every problem line is about ``tool``'s parameter schema (the register stage's
    ``tool 'x' (plugin 'p'): parameters...: why`` lines)."""
    prefix = f"tool {tool.name!r} (plugin {tool.plugin or 'unknown'!r}): parameters"
    return all(isinstance(line, str) and line.startswith(prefix) for line in found)


def _schema_warning(
    tool: ToolDefinition,
    found: Sequence[str],
    fixed: Sequence[str],
    earlier: Sequence[RegistrationWarning],
) -> RegistrationWarning:
    """The warning of a schema lenient registration loosened until the register stage took it."""
    original = next((w.original for w in earlier if w.tool == tool.name), tool.name)
    why = found[0].split("): ", 1)[-1]
    shown = "; ".join(fixed[:8]) + (f"; and {len(fixed) - 8} more" if len(fixed) > 8 else "")
    return RegistrationWarning(
        kind="parameters_loosened",
        tool=tool.name,
        original=original,
        plugin=tool.plugin,
        message=(
            f"tool {tool.name!r} (plugin {tool.plugin or 'unknown'!r}): parameter schema "
            f"refused ({shorten(why, 200)}"
            + (f", and {len(found) - 1} more problem(s)" if len(found) > 1 else "")
            + f"); admitted with a looser one: {shown or 'unchanged'}"
        ),
    )


def _problem_lines(answer: Any) -> list[str]:
    """A validator's answer as problem lines: None or empty is none, one ``str`` is one (not
    one per character), any other item is written out."""
    if not answer:
        return []
    if isinstance(answer, str):
        return [answer]
    if isinstance(answer, Mapping) or not isinstance(answer, Iterable):
        return [f"validator answered {type(answer).__name__}: {shorten(repr_safe(answer), 200)}"]
    return [item if isinstance(item, str) else shorten(repr_safe(item), 200) for item in answer]


def _excluded(reasons: Sequence[Exclusion]) -> ToolResult:
    """The refusal of a call whose tool the rule filters exclude, quoting their reasons."""
    return ToolResult.fail(
        ErrorCode.PERMISSION_DENIED,
        "; ".join(f"{e.reason} (plugin {e.plugin})" for e in reasons),
        details={"exclusions": [attrs.asdict(e) for e in reasons]},
    )


def _usable_verdicts(
    plugin: str, verdicts: Sequence[Any], names: set[str]
) -> list[Exclusion | Preference]:
    """A filter hook's answer as the core uses it: exclusions and preferences of the
    candidates it was shown, each naming ``plugin``, with a text reason and, for a preference,
    a finite boost. Anything else is left out, and said in one log line naming the
    plugin: an item that is not a verdict (a name, a dict, None), a verdict whose name is not a
    string or whose boost is not a finite number (a ``"high"`` boost made ``select`` raise, a
    NaN one left the hand in an arbitrary order). A verdict on a tool that was not a candidate
    is left out silently: a rule that names its tools whatever the candidates is normal."""
    usable: list[Exclusion | Preference] = []
    odd: list[str] = []
    for verdict in verdicts:
        kind = type(verdict)
        if not isinstance(verdict, Exclusion | Preference):
            odd.append(kind.__name__)
            continue
        name = verdict.name
        if type(name) is not str:
            odd.append(f"{kind.__name__} named by a {type(name).__name__}")
            continue
        if name not in names:
            continue
        changes: dict[str, Any] = {}
        if isinstance(verdict, Preference):
            boost = verdict.boost
            if isinstance(boost, bool) or not isinstance(boost, int | float) or not (
                math.isfinite(boost)
            ):
                odd.append(f"Preference with the boost {shorten(repr_safe(boost), 40)}")
                continue
            if type(boost) is not float:
                changes["boost"] = float(boost)
        if type(verdict.reason) is not str:
            # Text, whole: the hand's texts are redacted next, and a reason cut short could
            # cut a secret in it past the point its pattern is recognised.
            try:
                changes["reason"] = str(verdict.reason)
            except Exception:
                changes["reason"] = f"<unprintable {type(verdict.reason).__name__}>"
        if not verdict.plugin or type(verdict.plugin) is not str:
            changes["plugin"] = plugin
        usable.append(attrs.evolve(verdict, **changes) if changes else verdict)
    if odd:
        log.warning("plugin %r: tooldeck_filter_tools answered %d unusable item(s), left out "
                    "(first: %s)", plugin, len(odd), odd[0])
    return usable


def _must_propagate(exc: BaseException) -> bool:
    """trio's own cancellation and a Ctrl-C belong to the caller; any other BaseException a tool
    or a plugin's hook raised (``SystemExit`` from a stray ``sys.exit()``, ``GeneratorExit``, a
    class of its own) is that tool's or plugin's failure, reported like an ``Exception``: it
    must not end the caller's ``select`` or ``call``, nor the host."""
    if isinstance(exc, trio.Cancelled | KeyboardInterrupt):
        return True
    if isinstance(exc, BaseExceptionGroup):
        return any(_must_propagate(e) for e in exc.exceptions)
    return False


# Result data of these exact types is plain JSON and small: _normalised has nothing to do.
_LEAF_RESULTS = frozenset({bool, type(None)})  # not float (NaN); ints within 64 bits: see _run


def _normalised(result: ToolResult, max_output_bytes: int) -> ToolResult:
    """A result whose data and error details are plain JSON (see :func:`json_safe`), and whose
    data is at most ``max_output_bytes`` (``execution.max_output_bytes``; the sandbox enforces the
    same cap on its side): a bigger one becomes ``OUTPUT_TRUNCATED`` before redaction, the cache
    or a client ever walk it."""
    data = result.data
    if data is not None:
        if type(data) is str:
            size = json_size(data, max_output_bytes)
        else:
            safe, size = json_safe_sized(data, max_output_bytes)
            if safe is not data:
                result = attrs.evolve(result, data=safe)
        if size > max_output_bytes:
            return ToolResult.fail(
                ErrorCode.OUTPUT_TRUNCATED,
                f"the tool's result is {size} bytes, more than its limit of {max_output_bytes} "
                "bytes; it was dropped",
                suggestion="Ask for less (a narrower query, a range, a smaller page).",
                details={"max_output_bytes": max_output_bytes, "size_bytes": size},
            ).with_metadata(**result.metadata)
    error = result.error
    if error is not None and error.details:
        details = json_safe(dict(error.details))
        if details != error.details:
            result = attrs.evolve(result, error=attrs.evolve(error, details=details))
    return result


#: Results with more items than this (counted over nested dicts and lists) are normalised in a
#: worker thread: ~1 ms of walking on the loop at most, a thread hop only for big results.
_INLINE_ITEMS = 50_000


def _bulky(value: Any, budget: int = _INLINE_ITEMS) -> bool:
    """Whether ``value`` is to be made plain JSON in a worker thread: it holds more than
    ``budget`` items in its dicts and lists (and sets and tuples), or an object of another
    type (the tool's own class, a dict or list subclass): turning that into JSON runs the
    tool's code (``__str__``, ``model_dump``, ``__iter__``), which on the event loop froze every
    session when it never returned. Stops as soon as it knows: never more than ``budget`` items
    visited."""
    if type(value) not in _CONTAINERS:
        return type(value) not in _PLAIN_LEAVES
    stack = [value]
    seen = 0
    while stack:
        item = stack.pop()
        kind = type(item)
        seen += len(item)
        if seen > budget:
            return True
        if kind is dict and any(type(key) not in _PLAIN_LEAVES for key in item):
            return True  # a key of the tool's own type is written by its __str__
        for child in item.values() if kind is dict else item:
            child_kind = type(child)
            if child_kind in _CONTAINERS:
                stack.append(child)
            elif child_kind not in _PLAIN_LEAVES:
                return True
    return False


_CONTAINERS = frozenset({dict, list, tuple, set, frozenset})
#: Values whose JSON form runs no code of the tool's.
_PLAIN_LEAVES = frozenset({str, int, float, bool, type(None), bytes, bytearray})


#: Arguments are refused with INVALID_ARGUMENTS beyond these totals, counted over every nested
#: dict and list (items: ``MAX_ARGUMENT_ITEMS``, 100,000) and over every string, keys included
#: (characters). Everything that runs before the tool (schema validation, the policy's guards,
#: the cache key and approval hashes) is linear in them, and no model writes that much in one
#: call: 16 MiB of text leaves room for the fs pack's 10 MiB ``file_write`` sent as base64.
MAX_ARGUMENT_CHARS = 16 * 1024 * 1024
#: Wider integers are refused: Python cannot write them as JSON (``str()`` stops at 4,300
#: digits by default), so the cache key, the approval hash and the sandbox's wire format would
#: fail on them, and no tool argument means such a number. 12,900 bits is ~3,880 digits.
MAX_ARGUMENT_INT_BITS = 12_900
#: Arguments beyond either budget are validated, authorized and hashed in a worker thread under
#: the call's deadline: the loop's share of a call stays ~1 ms whatever the model sends (a path
#: list costs the policy an lstat per item, a long string a format regex per character).
_INLINE_ARGUMENT_ITEMS = 256
_INLINE_ARGUMENT_CHARS = 64 * 1024

_ARGUMENT_LEAVES = frozenset({float, bool, type(None)})


def _argument_excess(value: Any, max_items: int, max_chars: int) -> str | None:
    """What makes ``value`` (a call's arguments) too big, or None: ``"depth"`` (nested deeper
    than ``MAX_ARGUMENT_DEPTH``, as :func:`too_deep` counts), ``"int"`` (an integer over
    ``MAX_ARGUMENT_INT_BITS``), ``"items"`` or ``"chars"`` (over ``max_items`` / ``max_chars``).

    Iterative, and it stops at the first excess: with the inline budgets it visits at most
    ~``max_items`` values, so it costs the loop a bounded time however big the arguments are.
    """
    if type(value) is dict and len(value) <= max_items:
        # The usual arguments: a flat dict of JSON scalars, in one pass by exact type.
        chars = 0
        for key, child in value.items():
            kind = type(child)
            if kind is str:
                chars += len(child)
            elif kind is int:
                if child.bit_length() > MAX_ARGUMENT_INT_BITS:
                    return "int"
            elif kind not in _ARGUMENT_LEAVES:
                break
            if type(key) is str:
                chars += len(key)
        else:
            return "chars" if chars > max_chars else None
    items = chars = 0
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        node, depth = stack.pop()
        if depth > MAX_ARGUMENT_DEPTH:
            return "depth"
        items += len(node)
        if items > max_items:
            return "items"
        if isinstance(node, Mapping):
            children: Iterable[Any] = node.values()
            for key in node:
                if isinstance(key, str):
                    chars += len(key)
        else:
            children = node
        for child in children:
            # Exact types first: JSON's own, the only ones a model's arguments hold.
            kind = type(child)
            if kind is str:
                chars += len(child)
            elif kind is dict or kind is list:
                stack.append((child, depth + 1))
            elif kind is int:
                if child.bit_length() > MAX_ARGUMENT_INT_BITS:
                    return "int"
            elif kind in _ARGUMENT_LEAVES:
                pass
            elif isinstance(child, str):
                chars += len(child)
            elif isinstance(child, int):
                if child.bit_length() > MAX_ARGUMENT_INT_BITS:
                    return "int"
            elif isinstance(child, Mapping | list | tuple):
                stack.append((child, depth + 1))
        if chars > max_chars:
            return "chars"
    return None


_EXCESS_MESSAGES = {
    "depth": f"arguments are nested deeper than {MAX_ARGUMENT_DEPTH} levels",
    "int": f"an integer argument is wider than {MAX_ARGUMENT_INT_BITS} bits (~3,880 digits)",
    "items": f"arguments hold more than {MAX_ARGUMENT_ITEMS:,} items in their lists and objects",
    "chars": f"arguments hold more than {MAX_ARGUMENT_CHARS:,} characters of text",
}


def _tool_identity(tool: ToolDefinition) -> dict[str, Any]:
    """The tool as the user saw it when approving: version, plugin, description, parameters and
    security. The same name registered again with any of them changed is another tool."""
    return {
        "tool": [tool.version, tool.plugin, tool.description, tool.parameters],
        "security": attrs.asdict(tool.security),
    }


def _tool_fingerprint(tool: ToolDefinition) -> str:
    """What an "always allow" is bound to: the tool's identity, not its arguments."""
    return hashlib.sha256(canonical_json(_tool_identity(tool)).encode("utf-8")).hexdigest()


def _approval_hash(call: ToolCall, tool: ToolDefinition, workdir: str) -> str:
    """What an approval is bound to besides the session and the tool's name: the exact
    arguments, the tool as the user saw it (:func:`_tool_identity`) and the working directory
    that relative paths resolve against. The same name registered again with another
    definition, or the same session id opened on another directory, needs a new approval."""
    seen = {"arguments": call.arguments, "workdir": workdir, **_tool_identity(tool)}
    # The digest of canonical_json(seen) as UTF-8, hashed piece by piece (megabytes of
    # arguments with a lone surrogate are written in pieces that let go of the GIL).
    return canonical_json_sha256(seen)


def _runtime_definition(tool: ToolDefinition | Callable[..., Any], plugin: str) -> ToolDefinition:
    """What ``add_tools`` admits: a definition as given, or one built from a function."""
    if isinstance(tool, ToolDefinition):
        return attrs.evolve(tool, plugin=tool.plugin or plugin)
    if callable(tool):
        return definition_from_function(tool, plugin=plugin, options=_app_options(tool))
    raise RegistrationError(
        [f"add_tools() takes ToolDefinition objects or functions, not {type(tool).__name__}"]
    )


def _app_options(function: Callable[..., Any]) -> dict[str, Any]:
    """An app's function without ``@tool(category=...)`` gets the category ``app``."""
    from tooldeck_hookspecs import TOOL_OPTIONS_ATTR

    return {} if getattr(function, TOOL_OPTIONS_ATTR, {}).get("category") else {"category": "app"}


def _refuse_functions(plugins: Sequence[object]) -> None:
    """A function passed as a plugin would register no hook at all: say what was meant."""
    import functools
    import inspect

    for plugin in plugins:
        if inspect.isroutine(plugin) or isinstance(plugin, functools.partial):
            name = getattr(plugin, "__name__", repr(plugin))
            raise TypeError(
                f"Deck.load(plugins=[...]): {name!r} is a function, not a plugin (a plugin is an "
                f"object or module with @hookimpl hooks). To register it as a tool, pass "
                f"Deck.load(tools=[{name}])"
            )


def _app_tools(tools: Sequence[ToolDefinition | Callable[..., Any]]) -> object:
    """The inline pack behind ``Deck.load(tools=...)``, named ``app``: the caller's own tools."""
    import types

    from tooldeck_hookspecs import hookimpl

    def tooldeck_register_tools(register: Callable[..., Any]) -> None:
        for tool in tools:
            if isinstance(tool, ToolDefinition):
                register(tool)
            else:
                register(tool, **_app_options(tool))

    return types.SimpleNamespace(
        __tooldeck_name__="app", tooldeck_register_tools=hookimpl(tooldeck_register_tools)
    )


class Deck:
    """A loaded set of plugins and tools; the factory of sessions.

    Build one with :meth:`Deck.load` (entry points and configuration) or
    :func:`tooldeck.testing.make_deck` (isolated, for tests). Use it as ``async with deck:`` so
    that executors and workers are released at the end.
    """

    def __init__(self, plugins: TooldeckPluginManager, config: Config) -> None:
        self.plugins = plugins
        self.config = config
        self.catalog = ToolCatalog()
        self._hand_settings = dict(config.section("hand"))
        try:
            #: Rules of paths no tool writes (defaults plus ``protected_paths``), handed to every
            #: tool in its context.
            rules = list(config.settings.get("protected_paths") or ())
            if config.source:
                # The file this deck was configured from, whatever its name (TOOLDECK_CONFIG,
                # --config, Deck.load(path)): a model that rewrites it configures the next
                # deck (grants, MCP servers to start). Its names (through any symbolic link)
                # are protected in every folder.
                rules.extend(_config_rules(config.source, rules))
            self.protected_paths = normalise_rules(rules)
        except ValueError as exc:
            raise ConfigError(f"{config.source or 'config'}: protected_paths: {exc}") from exc
        self._session_defaults = dict(config.section("session"))
        approvals = config.section("approvals")
        self._approval_ttl_s = float(approvals.get("ttl_s", 600))
        self._confirm_timeout_s = float(approvals.get("confirm_timeout_s", 120))
        self._retriever: Any = None
        self._retriever_plugin: str | None = None
        self._indexed = False
        self._index_lock = trio.Lock()
        self._admit_lock = trio.Lock()
        self._cache: Any = None
        self._limiter: Any = None
        self._cache_and_limit: Any = None
        # Tool name -> invalidations of its cached results so far (one key per tool that some
        # tool invalidates: bounded by the catalog). See Session._run.
        self._invalidations: dict[str, int] = {}
        # The trio run serving calls now, and how many: a deck's limiters, locks and executor
        # belong to one run at a time (Session.call refuses a second run meanwhile).
        self._calls_run: object = None
        self._calls_running = 0
        # Taken only to check and count: two runs racing must not both pass, nor lose a count.
        self._calls_lock = threading.Lock()
        self._executor: Any = None
        self._approvals: Any = None
        self.providers: dict[str, str | None] = {}
        self._impl_cache: dict[str, list[HookImpl]] = {}
        self._executor_cancels = False
        self._loggers: dict[str, logging.Logger] = {}
        self._observer_cache: dict[str, list[HookImpl]] = {}
        self._settings_cache: dict[str | None, Mapping[str, Any]] = {}
        self._may_stall: dict[str, bool] = {}
        self._impl_splits: dict[str, tuple[list[HookImpl], list[HookImpl]]] = {}
        self._events = EventPump()
        # Session objects per id that will announce their end when collected (see
        # _session_dropped). Several may share an id (an app that opens one per request with
        # the conversation's id): a dropped one must not end what a live one still uses.
        self._live_sessions: dict[str, int] = {}
        # Threads redacting big results (CPU-bound, bounded by their call's deadline): a pool of
        # their own for the same reason.
        self._result_threads = trio.CapacityLimiter(8)
        # Threads of redactors that may block (Deck.aredact) outside any session: their own, so
        # that a hung redactor cannot take the result pool's threads.
        self._redact_threads = trio.CapacityLimiter(8)
        #: Installed plugins left out at start-up, by name (see ``Deck.load(strict=...)``).
        self.failed_plugins: dict[str, FailedPlugin] = {}
        #: Warning-level configuration problems found at start-up, one line each.
        self.config_warnings: list[str] = []
        #: Every change lenient registration made to admit a tool (``register(tool,
        #: lenient=True)``, ``add_tools(..., lenient=True)``), each listed (and logged) once.
        self.registration_warnings: list[RegistrationWarning] = []
        self._warned: set[tuple[str, str, str]] = set()
        #: Set by :meth:`aclose`: from then on no call reaches a provider (see Session.call).
        self._closed = False

    # ------------------------------------------------------------------ loading

    @classmethod
    def load(
        cls,
        config: Config | Mapping[str, Any] | str | os.PathLike[str] | None = None,
        *,
        plugins: Iterable[object] = (),
        tools: Iterable[ToolDefinition | Callable[..., Any]] = (),
        entry_points: bool | Iterable[str] = True,
        strict: bool = False,
        plugin_manager: TooldeckPluginManager | None = None,
    ) -> Deck:
        """Load plugins, validate the configuration, register every tool, resolve the providers.

        :param config: a :class:`Config`, a settings mapping, the path of a configuration file
            (trusted: you named it), or None to read ``TOOLDECK_CONFIG`` or search for
            ``tooldeck.toml`` / ``[tool.tooldeck]`` (a found file applies in full only once
            trusted with ``tooldeck config trust``; see :mod:`tooldeck._config`). What applies
            is validated as a whole against the schemas of the core and of the plugins
            (``tooldeck_config_schema``); every problem is reported at once.
        :param plugins: extra plugin objects registered inline (after the entry points).
            A plain function is refused with a TypeError: tools go in ``tools``.
        :param tools: the application's own tools, without packaging: functions (sync or
            async; name, description and parameters come from the signature, type hints and
            docstring, options from ``@tool`` as in a pack; category ``app`` unless given) or
            :class:`ToolDefinition` objects. They are registered by an inline pack named
            ``app`` and, like inline plugins, fail loudly.
        :param entry_points: True loads every installed plugin of the ``tooldeck`` group, False
            none, or an iterable of entry-point names loads just those.
        :param strict: fail when any installed plugin fails. By default an entry-point plugin
            that fails to import, implements an unknown hook, raises in
            ``tooldeck_register_tools`` or registers invalid tools is left out (its valid tools
            stay), logged as a warning and listed in :attr:`failed_plugins`; the deck starts
            without it unless it is one of ``required_plugins`` (default: policy, runner,
            schema: without them the deck would run unchecked). Inline ``plugins`` are the
            caller's own code and always fail loudly.
        :param plugin_manager: a manager whose entry points are already loaded (the command
            line loads them once, to add the plugins' commands); used instead of a new scan.
        :raises ConfigValidationError: the configuration has problems (a :class:`ConfigError`
            whose ``problems`` lists each: file, table, key).
        :raises RegistrationError: a tool definition is invalid (every problem listed).
        :raises PluginLoadError: a plugin fails to import or implements an unknown hook (with
            ``strict``, or for inline and required plugins).
        :raises StageMissingError: no plugin provides the register or execute stage.
        """
        # Imported here to keep this module's import block untouched by this feature.
        from tooldeck_hookspecs import PluginLoadError

        from ._config_schema import DEFAULT_REQUIRED_PLUGINS, raise_for_errors, validate_config

        if config is None:
            config = load_config()
        elif isinstance(config, str | os.PathLike):
            config = load_config(config)
        elif not isinstance(config, Config):
            config = Config.from_mapping(config, validate=False)
        manager = TooldeckPluginManager() if plugin_manager is None else plugin_manager
        if entry_points is not False and plugin_manager is None:
            only = None if entry_points is True else list(entry_points)  # type: ignore[arg-type]
            manager.load_entry_points(
                config.allows, only=only, strict=strict,
                import_timeout_s=import_timeout(config.settings),
            )
        inline: list[str] = []
        given = list(plugins)
        _refuse_functions(given)
        app_tools = list(tools)
        if app_tools:
            given.append(_app_tools(app_tools))
        for index, plugin in enumerate(given):
            name = getattr(plugin, "__tooldeck_name__", None) or getattr(
                plugin, "__name__", f"inline-{index}"
            )
            inline.append(manager.register(plugin, name=str(name), source="inline"))
        manager.check_pending(strict=strict)
        # The whole configuration at once, now that the plugins (and their schemas) are known.
        schemas, schema_bugs = manager.config_schemas()
        for line in schema_bugs:
            log.warning("tooldeck: %s; its table is only checked for being a table", line)
        installed = manager.entry_point_names() | set(inline)
        problems = validate_config(
            config, schemas=schemas, plugin_tables=installed, installed=installed
        )
        raise_for_errors(problems)
        for problem in problems:
            log.warning("tooldeck: %s", problem)
        required = config.settings.get("required_plugins", DEFAULT_REQUIRED_PLUGINS)
        if getattr(manager, "scanned_all", False):
            # A full scan: a required plugin that is not installed at all is no smaller a
            # gap than one that failed (without the policy, moderate tools run ungranted and
            # nothing is redacted). A plugin the configuration disables was left out on
            # purpose; inline plugins count as installed.
            absent = sorted(
                name for name in set(required)
                if manager.pm.get_plugin(name) is None
                and name not in manager.failed
                and config.allows(name)
            )
            if absent:
                raise PluginLoadError(
                    "required plugin(s) not installed: "
                    + ", ".join(
                        f"{name!r} (pip install {BUILTIN_ENTRY_POINTS.get(name, '<the package>')})"
                        for name in absent
                    )
                    + ". Install them, or list the plugins you can do without in "
                    "required_plugins"
                )
        broken = sorted(set(manager.failed) & set(required))
        if broken:
            raise PluginLoadError(
                "required plugin(s) failed to load: "
                + "; ".join(manager.failed[name].error for name in broken)
                + ". Repair the installation, or list the plugins you can do without in "
                "required_plugins"
            )
        deck = cls(manager, config)
        #: Entry-point plugins the deck started without, by name (shared with the manager, so
        #: that failures found while registering appear too).
        deck.failed_plugins = manager.failed
        #: Warning-level configuration problems (the deck started anyway).
        deck.config_warnings = [str(p) for p in problems]
        deck._resolve_providers()
        deck._register_all(strict=strict)
        if set(manager.failed) & set(required):
            broken = sorted(set(manager.failed) & set(required))
            raise PluginLoadError(
                "required plugin(s) failed to register: "
                + "; ".join(manager.failed[name].error for name in broken)
            )
        return deck

    def _impls(self, hook: str) -> list[HookImpl]:
        cached = self._impl_cache.get(hook)
        if cached is None:
            cached = self._impl_cache[hook] = self.plugins.impls(hook)
        return cached

    def _observers(self, kind: str) -> list[HookImpl]:
        """The ``tooldeck_event`` implementations that want events of ``kind`` (``observes``)."""
        cached = self._observer_cache.get(kind)
        if cached is None:
            cached = self._observer_cache[kind] = [
                impl
                for impl in self._impls("tooldeck_event")
                if kind in getattr(impl.function, EVENT_KINDS_ATTR, (kind,))
            ]
        return cached

    def _observer_split(self, kind: str) -> tuple[list[HookImpl], list[HookImpl]]:
        """Observers of ``kind``: (``@nonblocking``: on the loop, the others: observer thread)."""
        return self._split_impls("event:" + kind, lambda: self._observers(kind))

    def redact(self, value: _V) -> _V:
        """``value`` as it may leave the deck: through the ``tooldeck_redact`` chain (the
        policy plugin's secret redaction).

        For what goes out without being a known tool's result, which the result processors
        see: a name no tool has, a hand, events, and what a server or command words itself
        (an approval question, a search answer). ``value`` is a ``str``, a JSON-like structure
        or a :class:`ToolResult`; the same object comes back when nothing changed (or no
        plugin redacts). Linear in its size and run where it is called: pass long texts from
        a worker thread. A redactor that raises or answers another kind of value withholds
        it (an empty or ``[withheld]`` value, a ``PLUGIN_ERROR`` result), never lets it out
        unredacted.
        """
        return self._redact_chain(value, self._impls("tooldeck_redact"))

    @staticmethod
    def _redact_chain(value: _V, impls: Sequence[HookImpl], running: list[str] | None = None) -> _V:
        """``value`` through ``impls`` in order (see :meth:`redact`); each plugin's name is
        appended to ``running`` as it starts (to blame the one still running at a deadline)."""
        for impl in impls:
            if running is not None:
                running.append(impl.plugin)
            try:
                changed = impl.call_in_order(value)
            except BaseException as exc:
                if _must_propagate(exc):
                    raise
                log.exception("plugin %r: tooldeck_redact raised; the value was withheld",
                              impl.plugin)
                return _withheld(value, impl.plugin)  # type: ignore[no-any-return]
            if changed is None or changed is value:
                continue
            if not _same_kind(value, changed):
                log.error("plugin %r: tooldeck_redact answered %s for %s; the value was "
                          "withheld", impl.plugin, type(changed).__name__, type(value).__name__)
                return _withheld(value, impl.plugin)  # type: ignore[no-any-return]
            value = changed
        return value

    async def aredact(
        self,
        value: _V,
        *,
        timeout_s: float | None = None,
        offload: bool = False,
        limiter: trio.CapacityLimiter | None = None,
    ) -> _V:
        """:meth:`redact` for async code on the deck's loop, which it never blocks: hooks
        marked ``@nonblocking`` run on the loop, every other one in a worker thread under
        ``timeout_s`` seconds (default :data:`REDACT_TIMEOUT_S`). A redactor that blocks or
        hangs withholds the value it was given once the deadline passes (``[withheld...]``,
        or a ``PLUGIN_ERROR`` result naming it); the deck's other calls and sessions go on
        meanwhile.

        :param offload: the whole chain in one worker thread, for long values (redaction is
            linear in their size).
        :param limiter: the worker threads to use (a session's own, so that one session's hung
            redactor does not take every thread); default the deck's.
        """
        impls = self._impls("tooldeck_redact")
        if not impls:
            return value
        inline, threaded = self._split_impls("tooldeck_redact")
        if not threaded and not offload:
            return self._redact_chain(value, impls)
        limiter = limiter if limiter is not None else self._redact_threads
        if timeout_s is None:
            timeout_s = REDACT_TIMEOUT_S
        if offload:
            return await self._redact_in_thread(value, impls, timeout_s, limiter)
        # One hook at a time, in the chain's order. A withheld value goes on down the chain:
        # nothing of the original is left in it.
        for impl in impls:
            if is_nonblocking(impl.function):
                value = self._redact_chain(value, (impl,))
            else:
                value = await self._redact_in_thread(value, (impl,), timeout_s, limiter)
        return value

    async def _redact_in_thread(
        self,
        value: _V,
        impls: Sequence[HookImpl],
        timeout_s: float,
        limiter: trio.CapacityLimiter,
    ) -> _V:
        """``impls`` over ``value`` in a worker thread; withheld past ``timeout_s`` (the
        thread is abandoned, its late answer dropped)."""
        running: list[str] = []
        answer: list[_V] = []
        with trio.move_on_after(timeout_s):
            answer.append(await trio.to_thread.run_sync(
                self._redact_chain, value, impls, running,
                abandon_on_cancel=True, limiter=limiter,
            ))
        if answer:
            return answer[0]
        plugin = running[-1] if running else impls[0].plugin
        why = (f"did not answer within {timeout_s:g} s" if running else
               f"could not start within {timeout_s:g} s (every redaction thread is busy)")
        log.error("plugin %r: tooldeck_redact %s; the value was withheld", plugin, why)
        return _withheld(value, plugin, why)  # type: ignore[no-any-return]

    def _outward_event(self, event: Event) -> Event:
        """``event`` as observers may see it: a tool name nobody registered and the data
        through :meth:`redact` (the same object when nothing changed, or nobody redacts)."""
        if not self._impls("tooldeck_redact"):
            return event
        changes: dict[str, Any] = {}
        name = event.tool
        if name is not None and (type(name) is not str or name not in self.catalog):
            shown = self.redact(name)
            if shown is not name:
                changes["tool"] = shown
        if event.data:
            data = self.redact(event.data)
            if data is not event.data:
                changes["data"] = data
        return attrs.evolve(event, **changes) if changes else event

    def _resolve_providers(self) -> None:
        settings = self.config.settings
        call = self.plugins.call_provider
        self._executor, self.providers["execute"] = call("tooldeck_executor", settings)
        if self._executor is None:
            hook, package = STAGE_PACKAGES["execute"]
            raise StageMissingError("execute", hook, package)
        self._executor_cancels = callable(getattr(self._executor, "cancel_session", None))
        self._retriever, self.providers["filter"] = call("tooldeck_retriever", settings)
        self._cache, self.providers["cache"] = call("tooldeck_cache", settings)
        self._limiter, self.providers["rate_limit"] = call("tooldeck_rate_limiter", settings)
        self._approvals, self.providers["approvals"] = call("tooldeck_approval_store", settings)
        if self._approvals is None:
            self._approvals, self.providers["approvals"] = InMemoryApprovalStore(), "tooldeck"
        # A provider method that can suspend (a network round trip: Redis) runs under the call's
        # deadline; one that never suspends (the in-memory ones) cannot stall, and skips the
        # cancel scope (~5 µs a call).
        self._may_stall = {
            name: not never_suspends(getattr(provider, method, None))
            for name, provider, method in (
                ("cache_get", self._cache, "get"),
                ("cache_put", self._cache, "put"),
                ("cache_invalidate", self._cache, "invalidate"),
                ("limiter", self._limiter, "hit"),
            )
            if provider is not None
        }
        # A cache that can probe and count the limit in one round trip (optional provider
        # methods ``combines_with(limiter)`` and ``get_and_hit(key, limiter, tool, session)``).
        combines = getattr(self._cache, "combines_with", None)
        self._cache_and_limit = (
            self._cache.get_and_hit
            if self._limiter is not None and callable(combines) and combines(self._limiter)
            else None
        )

    def _split_impls(
        self, hook: str, impls_of: Callable[[], list[HookImpl]] | None = None
    ) -> tuple[list[HookImpl], list[HookImpl]]:
        """A hook's implementations (or those ``impls_of`` gives, cached under ``hook``):
        (``@nonblocking``: run on the loop, the others: run in a worker thread)."""
        split = self._impl_splits.get(hook)
        if split is None:
            impls = impls_of() if impls_of is not None else self._impls(hook)
            split = self._impl_splits[hook] = (
                [i for i in impls if is_nonblocking(i.function)],
                [i for i in impls if not is_nonblocking(i.function)],
            )
        return split

    def _filter_impls(self) -> tuple[list[HookImpl], list[HookImpl]]:
        """The ``tooldeck_filter_tools`` implementations: (run on the loop, run in a thread)."""
        return self._split_impls("tooldeck_filter_tools")

    def _authorize_impls(self) -> tuple[list[HookImpl], list[HookImpl]]:
        """The ``tooldeck_authorize_call`` implementations: (run on the loop, run in a thread)."""
        return self._split_impls("tooldeck_authorize_call")

    def _register_all(self, strict: bool = False) -> None:
        from ._config_schema import raise_for_errors, unknown_tool_problems

        strict_problems: list[str] = []
        config_problems: list[str] = []
        source = self.config.source or "config"
        deadline = float(
            self.config.settings.get("register_timeout_s", DEFAULT_REGISTER_TIMEOUT_S)
        )
        for impl in self._registration_order():
            pending: list[ToolDefinition] = []
            # Installed packs are kept apart from each other: one broken pack must not stop
            # the deck. The caller's inline plugins (and strict=True) keep failing loudly.
            lenient = not strict and self.plugins.is_entry_point(impl.plugin)
            # ids of the definitions registered with register(tool, lenient=True)
            repair: set[int] = set()
            register = self._make_register(impl.plugin, pending, repair)
            refused: list[str] = []
            if lenient:
                # A definition register() cannot build (bad options, a function it cannot
                # describe) leaves out that tool only: the pack goes on with the others.
                def register(
                    tool: Any,
                    /,
                    _register: Callable[..., Any] = register,
                    _refused: list[str] = refused,
                    **options: Any,
                ) -> Any:
                    try:
                        return _register(tool, **options)
                    except RegistrationError as exc:
                        _refused.extend(exc.problems)
                        return tool

            try:
                if lenient:
                    # An installed pack is not the caller's code: one that hangs (a server
                    # that never answers, a lock) is left out after the deadline instead of
                    # hanging the deck's start-up.
                    finished = _register_with_deadline(
                        impl, register, self.config.settings, deadline
                    )
                else:
                    impl(register=register, settings=self.config.settings)
                    finished = True
            except (ConfigError, RegistrationError) as exc:
                if isinstance(exc, ConfigError):
                    # The user's configuration, not the pack, is wrong (e.g. a [policy] table
                    # that does not parse): never start without the plugin that applies it.
                    raise
                # Raised by the pack itself: it asks for start-up to stop (e.g. an MCP server
                # the configuration marks required did not start). Honoured, always.
                strict_problems.extend(exc.problems)
                continue
            except Exception as exc:
                line = (
                    f"plugin {impl.plugin!r}: tooldeck_register_tools raised "
                    f"{type(exc).__name__}: {' '.join(str(exc).split())[:300]}"
                )
                if not lenient:
                    strict_problems.append(line)
                    continue
                # A pack that raised midway is in an unknown state: none of its tools are kept.
                self.plugins.record_failure(impl.plugin, "register", line, [line])
                continue
            if not finished:
                # Its thread may still be running: what it registers later lands in a list
                # nobody reads, so none of its tools are kept, as for a pack that raised.
                line = (
                    f"plugin {impl.plugin!r}: tooldeck_register_tools did not return within "
                    f"{deadline:g} s (register_timeout_s); left out"
                )
                self.plugins.record_failure(impl.plugin, "register", line, [line])
                continue
            admissible = []
            for definition in pending:
                try:
                    apply_override(definition, self.config.tool_override(definition.name), source)
                except RegistrationError as exc:
                    # A bad [tools.NAME] override is the configuration's: always fatal.
                    config_problems.extend(exc.problems)
                    continue
                admissible.append(definition)
            problems = self._admit(admissible, repair=repair)
            if not problems and not refused:
                continue
            if not lenient:
                strict_problems.extend(problems)
                continue
            # Admit the pack's tools one by one so that only the invalid ones are left out.
            bad: list[str] = list(refused)
            if problems:
                for definition in admissible:
                    bad.extend(self._admit([definition], repair=repair))
            self.plugins.record_failure(
                impl.plugin,
                "tools",
                f"{len(bad)} problem(s) in its tool definitions, those tools left out; first: "
                f"{bad[0] if bad else problems[0]}",
                bad or problems,
            )
        if strict_problems or config_problems:
            raise RegistrationError(config_problems + strict_problems)
        loaded = self.plugins.healthy_names()
        complete = not self.plugins.failed and self.plugins.entry_point_names() <= loaded
        unknown = unknown_tool_problems(self.config, self.catalog.names(), complete=complete)
        raise_for_errors(unknown)
        warnings = getattr(self, "config_warnings", None)
        for problem in unknown:
            log.warning("tooldeck: %s", problem)
            if warnings is not None:
                warnings.append(str(problem))
        self._catalog_ready()

    def _registration_order(self) -> list[HookImpl]:
        """The register hooks in the order whose tools are kept when two register one name:
        tooldeck's own packs first, then other installed packs by name, then the caller's
        inline plugins (in the order given). Pluggy's own order (the last registered first)
        let a pack named ``zzz`` take ``file_read`` from tooldeck-tools-fs, with fs reported
        as the failed pack."""
        plugins = self.plugins

        def rank(item: tuple[int, HookImpl]) -> tuple[int, int]:
            index, impl = item
            if plugins.is_entry_point(impl.plugin):
                return (0 if impl.plugin in BUILTIN_ENTRY_POINTS else 1, index)
            return (2, index)

        ordered = list(enumerate(reversed(self._impls("tooldeck_register_tools"))))
        return [impl for _, impl in sorted(ordered, key=rank)]

    def _make_register(
        self, plugin: str, pending: list[ToolDefinition], repair: set[int] | None = None
    ) -> Callable[..., Any]:
        def register(tool: Any, /, *, lenient: bool = False, **options: Any) -> Any:
            """Register a ToolDefinition, or a function with options; returns it unchanged.

            ``lenient=True`` admits a definition strict registration refuses for a repairable
            reason (see :func:`tooldeck._catalog.repair_definition`), with a warning per change.
            """
            if isinstance(tool, ToolDefinition):
                definition = attrs.evolve(tool, plugin=plugin, **options)
            elif callable(tool):
                definition = definition_from_function(tool, plugin=plugin, options=options)
            else:
                raise RegistrationError(
                    [
                        f"plugin {plugin!r}: register() takes a ToolDefinition or a function, "
                        f"not {type(tool).__name__}"
                    ]
                )
            pending.append(definition)
            if lenient and repair is not None:
                repair.add(id(definition))
            return tool

        return register

    def _admit(
        self,
        tools: Sequence[ToolDefinition],
        *,
        repair: bool | set[int] = False,
        admitted: list[ToolDefinition] | None = None,
    ) -> list[str]:
        """Validate and add tools; return the problems (and add nothing when there are any).

        ``repair`` (True, or the ids of the definitions it applies to) admits them leniently:
        :func:`repair_definition` first, its changes recorded in ``registration_warnings`` once
        the batch is in. ``admitted`` receives the definitions as registered, in input order.
        """
        problems, accepted, changes = self._stage(tools, repair=repair)
        if not problems:
            self._commit(accepted, changes, admitted)
        return problems

    def _stage(
        self, tools: Sequence[ToolDefinition], *, repair: bool | set[int] = False
    ) -> tuple[
        list[str], list[tuple[ToolDefinition, ArgumentValidator | None]],
        list[RegistrationWarning],
    ]:
        """The checking half of :meth:`_admit` (every plugin hook it calls), on a copy of the
        catalog: ``(problems, accepted, changes)``; changes nothing, so that it may run in a
        worker thread (:meth:`add_tools`)."""
        validate_impls = self._impls("tooldeck_validate_tool")
        if not validate_impls or not self._impls("tooldeck_argument_validator"):
            hook, package = STAGE_PACKAGES["register"]
            raise StageMissingError("register", hook, package)
        problems: list[str] = []
        staged = ToolCatalog()
        staged_view = CatalogView(staged)
        for name in self.catalog.names():
            staged.add(self.catalog.get(name), self.catalog.validator(name))  # type: ignore[arg-type]
        accepted: list[tuple[ToolDefinition, ArgumentValidator | None]] = []
        changes: list[RegistrationWarning] = []
        for tool in tools:
            repairing = repair is True or bool(repair and id(tool) in repair)
            if repairing:
                tool, changed = repair_definition(tool, lambda n: staged.get(n) is not None)
                changes.extend(changed)
            try:
                tool = apply_override(
                    tool, self.config.tool_override(tool.name), self.config.source or "config"
                )
            except RegistrationError as exc:
                problems.extend(exc.problems)
                continue
            # The deck's own copy: a pack that edits its schema dict after registering would
            # otherwise export one schema while calls are validated by another. Read-only:
            # every hook gets this very object, and one that edited it in place changed the
            # schema of every later session and export (see tooldeck._frozen).
            tool = attrs.evolve(tool, parameters=freeze_schema(tool.parameters))
            found = self._admission_problems(tool, validate_impls, staged_view)
            if found and repairing and _only_parameter_problems(tool, found):
                # A real catalog's schema the first repair left refused ("minimum": "0", a
                # JavaScript-only pattern, properties as a list): looser schemas, step by
                # step, rather than refusing the tool (and aborting a whole catalog's load).
                for step in (sanitize_parameters, flatten_parameters):
                    parameters, fixed = step(tool.parameters)
                    candidate = attrs.evolve(tool, parameters=freeze_schema(parameters))
                    if self._admission_problems(candidate, validate_impls, staged_view):
                        continue
                    changes.append(_schema_warning(candidate, found, fixed, changes))
                    tool, found = candidate, []
                    break
            if found:
                problems.extend(found)
                continue
            try:
                validator = self._compile_validator(tool)
            except BaseException as exc:
                if _must_propagate(exc):
                    raise
                problems.append(
                    f"tool {tool.name!r} (plugin {tool.plugin!r}): parameters: cannot compile a "
                    f"validator: {type(exc).__name__}: {exc}"
                )
                continue
            staged.add(tool, validator)
            accepted.append((tool, validator))
        return problems, accepted, changes

    def _commit(
        self,
        accepted: Sequence[tuple[ToolDefinition, ArgumentValidator | None]],
        changes: Sequence[RegistrationWarning],
        admitted: list[ToolDefinition] | None,
    ) -> None:
        """The changing half of :meth:`_admit`: the staged tools into the catalog."""
        originals: dict[str, list[str]] = {}
        for change in changes:
            originals.setdefault(change.tool, []).append(change.original)
        for tool, validator in accepted:
            self.catalog.add(tool, validator, aliases=originals.get(tool.name, ()))
        if admitted is not None:
            admitted.extend(tool for tool, _ in accepted)
        self._record_warnings(changes)

    def _admission_problems(
        self, tool: ToolDefinition, validate_impls: Sequence[HookImpl], catalog: CatalogView
    ) -> list[str]:
        """Every ``tooldeck_validate_tool`` implementation's problems with ``tool``."""
        found: list[str] = []
        for impl in validate_impls:
            try:
                found.extend(_problem_lines(impl(tool=tool, catalog=catalog)))
            except BaseException as exc:
                if _must_propagate(exc):
                    raise
                found.append(
                    f"tool {tool.name!r} (plugin {tool.plugin!r}): validator plugin "
                    f"{impl.plugin!r} raised {type(exc).__name__}: {exc}"
                )
        return found

    def _record_warnings(self, changes: Sequence[RegistrationWarning]) -> None:
        """List and log each change once; a big catalog logs the first 20 and a count."""
        fresh = []
        for change in changes:
            key = (change.kind, change.tool, change.original)
            if key not in self._warned:
                self._warned.add(key)
                fresh.append(change)
        self.registration_warnings.extend(fresh)
        for change in fresh[:20]:
            log.warning("tooldeck: lenient registration: %s", change.message)
        if len(fresh) > 20:
            log.warning(
                "tooldeck: lenient registration: %d more change(s); deck.registration_warnings "
                "lists them all",
                len(fresh) - 20,
            )

    def _compile_validator(self, tool: ToolDefinition) -> ArgumentValidator | None:
        for impl in self._impls("tooldeck_argument_validator"):
            validator = impl(tool=tool)
            if validator is not None:
                if not callable(validator):
                    # Said now, naming the plugin: else every call of the tool failed with
                    # "'int' object is not callable" from an unnamed "argument validator".
                    raise TypeError(
                        f"plugin {impl.plugin!r}: tooldeck_argument_validator returned "
                        f"{type(validator).__name__}, not a callable validator"
                    )
                return validator  # type: ignore[no-any-return]
        return None

    def _catalog_ready(self) -> None:
        # A read-only view: hooks read the catalog, only the deck changes it.
        view = CatalogView(self.catalog)
        for impl in self._impls("tooldeck_catalog_ready"):
            try:
                impl(catalog=view)
            except BaseException as exc:
                if _must_propagate(exc):
                    raise
                log.exception("plugin %r: tooldeck_catalog_ready raised", impl.plugin)

    # ------------------------------------------------------------------ runtime changes

    async def add_tools(
        self,
        tools: Iterable[ToolDefinition | Callable[..., Any]],
        *,
        plugin: str = "runtime",
        lenient: bool = False,
    ) -> list[ToolDefinition]:
        """Register tools at run time; the retriever's index is updated without a rebuild.

        :param tools: :class:`ToolDefinition` objects, or functions described as ``@tool``
            functions are (signature, type hints, docstring, ``@tool`` options; category
            ``app`` unless given).
        :param lenient: admit real-world catalogs: an empty description is derived, a name
            that is not snake_case, over 64 characters or taken gets a provider-safe alias
            (calls by the original name still resolve), a malformed parameter schema is
            repaired where it has one reading; each change is logged once and listed in
            :attr:`registration_warnings`. What cannot be repaired still raises.
        :returns: the definitions as registered (renamed ones under their alias), in order.
        :raises RegistrationError: when any of them is invalid (then none is added).
        """
        definitions = [_runtime_definition(t, plugin) for t in tools]
        admitted: list[ToolDefinition] = []
        # The plugins' hooks (validators, schema compilers, catalog observers) run in a worker
        # thread: one that blocks must not stall every session on the loop. Under a lock, so
        # that two batches staged at once cannot both take one name.
        async with self._admit_lock:
            problems, accepted, changes = await self._hooks_off_loop(
                "checking the tools", self._stage, definitions, repair=lenient
            )
            if problems:
                raise RegistrationError(problems)
            self._commit(accepted, changes, admitted)
        if self._retriever is not None and self._indexed:
            await self._retriever.add(admitted)
        await self._catalog_ready_off_loop()
        return admitted

    async def remove_tools(self, names: Iterable[str]) -> list[str]:
        """Remove tools at run time; return the names that were registered."""
        removed = [n for n in names if self.catalog.remove(n) is not None]
        if removed and self._retriever is not None and self._indexed:
            await self._retriever.remove(removed)
        await self._catalog_ready_off_loop()
        return removed

    async def _catalog_ready_off_loop(self) -> None:
        """:meth:`_catalog_ready` in a worker thread: observers' failures, a hung one's too
        (past ``register_timeout_s``), are logged; the catalog changed all the same."""
        try:
            await self._hooks_off_loop("tooldeck_catalog_ready", self._catalog_ready)
        except RegistrationError:
            pass  # logged by _hooks_off_loop

    async def _hooks_off_loop(self, what: str, function: Callable[..., _V], *args: Any,
                              **kwargs: Any) -> _V:
        """``function(*args, **kwargs)`` (plugin hooks that may block) in a worker thread,
        within ``register_timeout_s``; past it the thread is abandoned and
        :class:`RegistrationError` says so (for ``add_tools``, before anything was added)."""
        timeout = float(
            self.config.settings.get("register_timeout_s", DEFAULT_REGISTER_TIMEOUT_S)
        )
        done: list[_V] = []
        with trio.move_on_after(timeout):
            done.append(await trio.to_thread.run_sync(
                lambda: function(*args, **kwargs), abandon_on_cancel=True
            ))
        if not done:
            log.error("%s did not finish within %g s (register_timeout_s)", what, timeout)
            raise RegistrationError([
                f"{what}: a plugin's hook did not finish within {timeout:g} s "
                "(register_timeout_s); see the log"
            ])
        return done[0]

    def _deliver(self, event: Event, *, outward: bool = False) -> None:
        """Deliver ``event`` to its observers (see :meth:`Session._observe`)."""
        if not outward:
            event = self._outward_event(event)
        inline, threaded = self._observer_split(event.kind)
        for impl in inline:
            try:
                impl(event=event)
            except BaseException as exc:
                if _must_propagate(exc):
                    raise
                log.exception("plugin %r: tooldeck_event raised", impl.plugin)
        if threaded:
            # Observers that may block (I/O) get the event on the deck's observer thread.
            self._events.post(threaded, event)

    def _session_object_ended(self, session_id: str) -> bool:
        """One Session object of ``session_id`` that counted in ``_live_sessions`` ended
        (closed or collected); True when it was the last one of that id."""
        left = self._live_sessions.pop(session_id, 1) - 1
        if left > 0:
            self._live_sessions[session_id] = left
        return left <= 0

    # ------------------------------------------------------------------ lifecycle

    async def __aenter__(self) -> Deck:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Release the providers' resources (executor workers, retriever, ...); deliver the
        events still queued for observers (a few seconds at most).

        From then on the deck's sessions run nothing and ask no provider: a call, ``resume``,
        ``approve`` or ``deny`` is refused at once (``CANCELLED``, or False), so that a closed
        deck neither uses up an approval or a rate-limit slot in a shared store (Redis) for a
        call it can no longer run, nor opens new connections to it.
        """
        # First: calls still in the pipeline stop before their next provider round trip.
        self._closed = True
        await self._events.aclose()
        providers = (self._executor, self._retriever, self._cache, self._limiter, self._approvals)
        for provider in providers:
            closer = getattr(provider, "aclose", None)
            if closer is not None:
                try:
                    await closer()
                except Exception:
                    log.exception("closing %r failed", provider)

    # ------------------------------------------------------------------ queries

    def plugin_infos(self) -> list[PluginInfo]:
        """Loaded plugins with distribution, version and hooks."""
        return self.plugins.plugin_infos()

    def _logger(self, tool_name: str) -> logging.Logger:
        logger = self._loggers.get(tool_name)
        if logger is None:
            logger = self._loggers[tool_name] = logging.getLogger(f"tooldeck.tool.{tool_name}")
        return logger

    def plugin_settings(self, plugin: str | None) -> Mapping[str, Any]:
        """The configuration table named after a plugin (``[tool.tooldeck.fs]`` for ``fs``)."""
        cached = self._settings_cache.get(plugin)
        if cached is None:
            table = self.config.settings.get(plugin, {}) if plugin else {}
            cached = self._settings_cache[plugin] = table if isinstance(table, Mapping) else {}
        return cached

    @property
    def executor(self) -> Any:
        """The execute stage's provider object."""
        return self._executor

    @property
    def cache(self) -> Any:
        """The cache stage's provider object, or None."""
        return self._cache

    @property
    def retriever(self) -> Any:
        """The filter stage's retriever, or None when no plugin provides one."""
        return self._retriever

    async def ensure_index(self) -> float:
        """Index the catalog in the retriever if not done yet; return the seconds it took."""
        if self._retriever is None:
            hook, package = STAGE_PACKAGES["filter"]
            raise StageMissingError("filter", hook, package)
        async with self._index_lock:
            if self._indexed:
                return 0.0
            started = time.perf_counter()
            await self._retriever.index(list(self.catalog))
            self._indexed = True
            return time.perf_counter() - started

    def session(
        self,
        *,
        session_id: str | None = None,
        workdir: str | os.PathLike[str] | None = None,
        grants: Iterable[str] | None = None,
        excluded_categories: Iterable[str] | None = None,
        max_level: SecurityLevel | str | None = None,
        confirm: ConfirmCallback | None = None,
        pinned: Iterable[str] | None = None,
        attributes: Mapping[str, Any] | None = None,
        environment: Mapping[str, str] | None = None,
    ) -> Session:
        """Open a session: one agent conversation with its grants, hand and pending approvals.

        Unset arguments come from the ``[session]`` table of the configuration.
        """
        defaults = self._session_defaults
        return Session(
            self,
            session_id=session_id or "ses_" + uuid.uuid4().hex[:12],
            workdir=str(Path(workdir or defaults.get("workdir") or os.getcwd()).resolve()),
            grants=set(grants if grants is not None else defaults.get("grants", ())),
            excluded_categories=set(
                excluded_categories
                if excluded_categories is not None
                else defaults.get("excluded_categories", ())
            ),
            max_level=SecurityLevel(max_level or defaults.get("max_level", "dangerous")),
            confirm=confirm,
            pinned=list(pinned if pinned is not None else self._hand_settings.get("pinned", ())),
            attributes=dict(attributes or defaults.get("attributes", {})),
            environment=dict(environment or {}),
        )

    def closest_names(self, name: str, n: int = 5) -> list[str]:
        """Registered names closest to a misspelled or invented one.

        Two views, best first: shared words (``read_file`` finds ``file_read``, ``readFile``
        finds both) and spelling (``file_raed``).
        """
        names = self.catalog.names()
        # Matching cost grows with the name; a real tool name is short.
        name = name[:128]
        normal = re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", name).replace("-", "_").lower()
        words = {w for w in normal.split("_") if w}
        scores: dict[str, float] = {}
        if words:
            for candidate in names:
                theirs = set(candidate.split("_"))
                shared = len(words & theirs)
                if shared:
                    scores[candidate] = shared / len(words | theirs)
        import difflib  # only for a name that is not a tool

        for candidate in difflib.get_close_matches(normal, names, n=n, cutoff=0.5):
            ratio = difflib.SequenceMatcher(None, normal, candidate).ratio()
            scores[candidate] = max(scores.get(candidate, 0.0), ratio)
        return sorted(scores, key=lambda c: (-scores[c], c))[:n]


# The progress listener of the call being run (Session.call(on_progress=...)), read where the
# tool's context is made: a context variable, so that no internal signature carries it.
_PROGRESS: contextvars.ContextVar[Callable[[Mapping[str, Any]], None] | None] = (
    contextvars.ContextVar("tooldeck_progress", default=None)
)

# Set by Session.resume around the call it runs: the approval check records there that the
# store gave no answer (it raised, timed out or answered nonsense), so that resume keeps the
# pending call for a retry. Per task, so concurrent calls with the same id do not mix.
_STORE_FAILED: contextvars.ContextVar[list[str] | None] = contextvars.ContextVar(
    "tooldeck_approval_store_failed", default=None
)
# Set by Session.resume too: the approval check records there that the store let the call use
# its approval. A resumed call that ran (or was refused) without it leaves the approval given
# in the store, where a later call with its id could run the same call a second time.
_APPROVAL_USED: contextvars.ContextVar[list[str] | None] = contextvars.ContextVar(
    "tooldeck_approval_used", default=None
)


def _emitter(
    listener: Callable[[Mapping[str, Any]], None],
    call_id: str,
    processed: Callable[[str], str | None] | None = None,
) -> Callable[[Mapping[str, Any]], None]:
    """``ToolContext.emit`` for one call: normalises each event and hands it to ``listener``
    on the deck's trio thread, from whatever thread the tool runs in.

    ``processed`` takes each event's message through the result processors (redaction) first:
    a progress message is output the caller (and an MCP client) sees, as the result is. None
    from it drops the message.
    """
    token = trio.lowlevel.current_trio_token()
    loop_thread = threading.get_ident()

    def deliver(event: Mapping[str, Any]) -> None:
        if processed is not None and isinstance(event.get("message"), str):
            message = processed(event["message"])
            event = {k: v for k, v in event.items() if k != "message"}
            if message is not None:
                event["message"] = message
        try:
            listener(event)
        except BaseException as exc:
            if _must_propagate(exc):
                raise
            log.exception("progress listener of call %s raised", call_id)

    def emit(event: Mapping[str, Any]) -> None:
        clean = clean_progress(event)
        clean["call_id"] = call_id
        if threading.get_ident() == loop_thread:
            deliver(clean)
        else:
            try:
                token.run_sync_soon(deliver, clean)
            except trio.RunFinishedError:
                pass  # the deck is gone: nobody is listening any more

    return emit


@attrs.frozen
class _Withheld:
    """A result processor gave up (deadline, cancellation): ``result`` replaces the tool's."""

    result: ToolResult


def _session_dropped(
    deck: weakref.ReferenceType[Deck], session_id: str, token: trio.lowlevel.TrioToken
) -> None:
    """A session was garbage-collected without ``aclose()``: announce it on the deck's loop.

    Runs wherever the collector runs (any thread, inside any code), so it only queues:
    ``run_sync_soon`` is safe there, and the observers run later on the deck's loop.
    """
    try:
        token.run_sync_soon(_announce_dropped, deck, session_id)
    except trio.RunFinishedError:
        pass  # the deck's loop has ended, and its providers with it


def _announce_dropped(deck_ref: weakref.ReferenceType[Deck], session_id: str) -> None:
    deck = deck_ref()
    if deck is None:
        return
    if not deck._session_object_ended(session_id):
        return  # another Session object with this id is still open
    try:
        deck._deliver(
            Event(kind="session.closed", session_id=session_id, data={"dropped": True}),
            outward=True,  # the core's own data: nothing to redact on the loop
        )
    except Exception:  # a run_sync_soon callback that raises would crash the deck's loop
        log.exception("announcing the end of dropped session %s failed", session_id)


class Session:
    """One conversation: grants, the current hand, sticky tools, approvals, in-flight calls.

    Create with :meth:`Deck.session`. All methods are safe to call concurrently from one trio
    run; results never raise for a failure a model can cause. A deck serves one trio run at a
    time: :meth:`call` from another run (another thread) while calls are in flight raises
    ``RuntimeError``; other threads go through :mod:`tooldeck.portal`.
    """

    #: Bumped by every change of what the session allows (grants, level, always-allow, any
    #: snapshot field): a call compares it before its tool starts. A class default, because
    #: __setattr__ reads it while __init__ assigns the snapshot fields.
    _authority: int = 0

    def __init__(
        self,
        deck: Deck,
        *,
        session_id: str,
        workdir: str,
        grants: set[str],
        excluded_categories: set[str],
        max_level: SecurityLevel,
        confirm: ConfirmCallback | None,
        pinned: list[str],
        attributes: dict[str, Any],
        environment: dict[str, str],
    ) -> None:
        self.deck = deck
        self.id = session_id
        self.workdir = workdir
        self.grants = grants
        self.excluded_categories = excluded_categories
        self.max_level = max_level
        self.confirm = confirm
        self.pinned = pinned
        self.attributes = attributes
        self.environment = environment
        self.always_allowed: set[str] = set()
        self._shadowing: tuple[str, tuple[str, ...]] | None = None
        # Tool name -> (definition, fingerprint) an "always allow" was given for: a name
        # registered again with another definition asks again.
        self._always_bound: dict[str, tuple[ToolDefinition, str]] = {}
        self.hand: Hand | None = None
        self._offered: set[str] = set()
        # Name -> (the session's _authority, the definition) the rule filters passed a dealt
        # tool under: a session that changed since (a category excluded, a grant revoked, the
        # attributes a tenant filter reads), or another definition registered under the name,
        # has the tool judged again at its next call.
        self._offered_judged: dict[str, tuple[int, ToolDefinition]] = {}
        self._turn = 0
        self._last_used: dict[str, int] = {}
        # Approval id -> (call, monotonic expiry): pruned when expired, so a flood of unanswered
        # requests does not grow the session without bound.
        self._pending: dict[str, tuple[ToolCall, float]] = {}
        # Approval id -> monotonic expiry: approvals this session denied. Refused here even when
        # the store could not record the denial (it raised), as long as the approval may live.
        self._revoked: dict[str, float] = {}
        self._scopes: set[trio.CancelScope] = set()
        # Threads of policy hooks that may block: a pool per session, apart from the threads
        # sync tools use. An abandoned thread (its hook outlived the deadline) keeps its slot
        # until the hook returns: shared by the deck, one session's hung hooks (a hook that
        # hangs on that user's arguments) locked every session out of every call.
        self._policy_threads = trio.CapacityLimiter(_POLICY_THREADS_PER_SESSION)
        # cancel() bumps the generation: a call that entered before it (even one still at its
        # first checkpoint) sees the change before it starts and answers CANCELLED.
        self._generation = 0
        self._closed = False
        self._info: SessionInfo | None = None
        self._admitted: dict[str, SessionInfo] = {}
        self._context_parts: dict[
            str,
            tuple[
                ToolDefinition, tuple[str, ...], Mapping[str, Any], logging.Logger,
                Mapping[str, Any],
            ],
        ] = {}
        settings = deck._hand_settings
        self.limit = int(settings.get("limit", 15))
        self.recall = int(settings.get("recall", 20))
        self.fallback_recall = int(settings.get("fallback_recall", 40))
        self.sticky_turns = int(settings.get("sticky_turns", 3))
        #: How much of a task selection reads (``hand.max_task_chars``; see :func:`_bounded_task`).
        self.max_task_chars = int(settings.get("max_task_chars", DEFAULT_MAX_TASK_CHARS))
        #: The schema-token budget of a hand (``hand.max_tokens``); None: only ``limit`` counts.
        self.max_tokens: int | None = (
            int(settings["max_tokens"]) if settings.get("max_tokens") is not None else None
        )
        # A session its owner drops without aclose() still ends: observers see
        # session.closed when it is garbage-collected, so the runner's zygotes and the
        # browser's context for it do not wait for eviction. Only for sessions made on the
        # deck's loop (the finalizer needs its token); never at interpreter exit.
        self._dropped: weakref.finalize[Any, Any] | None = None
        try:
            token = trio.lowlevel.current_trio_token()
        except RuntimeError:
            token = None
        if token is not None:
            self._dropped = weakref.finalize(
                self, _session_dropped, weakref.ref(deck), session_id, token
            )
            self._dropped.atexit = False
            deck._live_sessions[session_id] = deck._live_sessions.get(session_id, 0) + 1

    # ------------------------------------------------------------------ state

    def info(self) -> SessionInfo:
        """A snapshot of this session for policy and filter hooks (rebuilt only after changes)."""
        if self._info is None:
            recent = sorted(self._last_used, key=self._last_used.__getitem__, reverse=True)
            self._info = SessionInfo(
                session_id=self.id,
                workdir=self.workdir,
                grants=self.grants,
                excluded_categories=self.excluded_categories,
                max_level=self.max_level,
                always_allow=self.always_allowed,
                recent_tools=tuple(recent),
                # Read-only deep copies: a snapshot, which a plugin writing into it cannot turn
                # into a change of the session (and so into calls judged again), nor into what
                # the hooks after it judge by (``url_allow`` widened for the policy's guard).
                environment=freeze_schema(self.environment),
                attributes=freeze_schema(self.attributes),
            )
        return self._info

    def _changed(self) -> None:
        self._info = None
        # What the session allows changed (a grant, a revoke, an always-allow): calls that
        # were authorized before and have not started yet are judged again (see _run).
        self._authority += 1

    def __setattr__(self, name: str, value: Any) -> None:
        # Policy judges calls by the snapshot info() caches: an application that assigns a
        # stricter max_level or other grants mid-conversation must be obeyed from the next
        # call on, not after the snapshot happens to be rebuilt.
        if name == "max_level":
            value = SecurityLevel(value)  # a plain string would break level comparisons
        elif name in _WATCHED_SETS:
            value = _WatchedSet(value, self._changed)
        elif name in _WATCHED_DICTS:
            value = _WatchedDict(value, self._changed)
        object.__setattr__(self, name, value)
        if name in _SNAPSHOT_FIELDS:
            object.__setattr__(self, "_info", None)
            object.__setattr__(self, "_authority", self._authority + 1)

    def fork(self, session_id: str) -> Session:
        """A new session of the same deck with this one's settings as they are now (workdir,
        grants, excluded categories, maximum level, confirm callback, pinned tools, attributes,
        environment) and none of its state: its own hand, approvals, "always allow" answers
        and calls.

        For frameworks that serve many conversations through one configured session: each
        conversation's calls are judged against the hand dealt to it, not another's.
        """
        return Session(
            self.deck,
            session_id=session_id,
            workdir=self.workdir,
            grants=set(self.grants),
            excluded_categories=set(self.excluded_categories),
            max_level=self.max_level,
            confirm=self.confirm,
            pinned=list(self.pinned),
            attributes=dict(self.attributes),
            environment=dict(self.environment),
        )

    def grant(self, *categories: str) -> None:
        """Let ``moderate`` tools of these categories run."""
        self.grants.update(categories)
        self._changed()

    def revoke(self, *categories: str) -> None:
        """Take grants back."""
        self.grants.difference_update(categories)
        self._changed()

    def always_allow(self, tool_name: str, *, shown: ToolDefinition | None = None) -> None:
        """The user said: never ask again for this tool in this session.

        Bound to the tool as registered now (version, plugin, description, parameters and
        security, as an approval is), not to arguments: when the name is registered again with
        another definition (another plugin, a reloaded MCP server, :meth:`Deck.add_tools`), the
        session asks again and the name leaves :attr:`always_allowed`. A name not registered
        yet, or put in :attr:`always_allowed` directly, is bound to the first definition it runs
        as.

        :param shown: the definition the user was shown when they answered, when the answer
            took a while (an approval prompt): the allowance is bound to it, so that one
            registered under the name meanwhile is asked about again.
        """
        if shown is not None:
            if shown.name != tool_name:
                raise ValueError(f"shown is {shown.name!r}, not {tool_name!r}")
            self._allow_always(shown)
            return
        tool = self.deck.catalog.get(tool_name)
        if tool is not None:
            self._allow_always(tool)
            return
        self._always_bound.pop(tool_name, None)
        self.always_allowed.add(tool_name)
        self._changed()

    def _allow_always(self, tool: ToolDefinition) -> None:
        """Always allow ``tool.name``, bound to this very definition (see :meth:`always_allow`)."""
        self._always_bound[tool.name] = (tool, _tool_fingerprint(tool))
        self.always_allowed.add(tool.name)
        self._changed()

    def is_always_allowed(self, tool_name: str) -> bool:
        """Whether the user always-allowed ``tool_name`` as it is registered now (False for a
        tool not registered, or registered again differently since)."""
        tool = self.deck.catalog.get(tool_name)
        if tool is None or tool_name not in self.always_allowed:
            return False
        bound = self._always_bound.get(tool_name)
        return bound is None or bound[0] is tool or bound[1] == _tool_fingerprint(tool)

    def _always_allows(self, tool: ToolDefinition) -> bool:
        """Whether the always-allow of ``tool.name`` covers this very definition. One that no
        longer does (the name was registered again differently) is dropped: asked again."""
        bound = self._always_bound.get(tool.name)
        if bound is not None and bound[0] is tool:
            return True
        fingerprint = _tool_fingerprint(tool)
        if bound is None or bound[1] == fingerprint:
            self._always_bound[tool.name] = (tool, fingerprint)
            return True
        del self._always_bound[tool.name]
        self.always_allowed.discard(tool.name)
        self._changed()
        log.warning(
            "session %s: %r was registered again with another definition; its always-allow "
            "no longer applies",
            self.id,
            tool.name,
        )
        return False

    def cancel(self) -> None:
        """Cancel every queued and running call of this session; each returns ``CANCELLED``.

        Calls already inside :meth:`call` that have not started their tool yet (at a
        checkpoint, in policy, waiting for a ``confirm`` answer) do not start either.
        """
        self._generation += 1
        for scope in list(self._scopes):
            scope.cancel()
        if self.deck._executor_cancels:
            self.deck._executor.cancel_session(self.id)

    async def __aenter__(self) -> Session:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """End the session: cancel its calls and tell observers (``session.closed``), so that
        tool packs can release per-session resources such as browser pages."""
        self._closed = True
        if self._dropped is not None and self._dropped.detach() is not None:
            # Ended here: no second session.closed when collected.
            self.deck._session_object_ended(self.id)
        self.cancel()
        self._pending.clear()
        self._revoked.clear()
        # The core's own data only: nothing to redact (a redactor must not hold up aclose).
        self._observe(Event(kind="session.closed", session_id=self.id), outward=True)

    # ------------------------------------------------------------------ the hand

    async def select(
        self, task: str, *, limit: int | None = None, max_tokens: int | None = None
    ) -> Hand:
        """Deal the tools that matter for ``task``: recall, rule filters, pinned and sticky tools.

        :param limit: at most this many tools (default ``hand.limit``).
        :param max_tokens: at most this many schema tokens in all (default ``hand.max_tokens``,
            none): tools are dealt best first, pinned and sticky ones first of all, and a tool
            whose schema does not fit what is left is skipped (listed in ``over_budget``),
            never cut. Schema tokens are :func:`tooldeck._catalog.schema_tokens` estimates.
        :raises StageMissingError: when no plugin provides a retriever.
        :raises TypeError: when ``task`` is not a string, or ``limit`` / ``max_tokens`` not a
            number.
        :raises ValueError: when ``limit`` is not a whole number of at least 1, or
            ``max_tokens`` not a whole number of at least 0.

        A task longer than ``hand.max_task_chars`` is read by its beginning and its end; the
        hand's ``problems`` say so.
        """
        if not isinstance(task, str):
            raise TypeError(f"task must be a string, not {type(task).__name__}")
        if limit is not None:
            # More than the catalog holds deals the whole catalog: a limit past the machine's
            # integers (`--limit 10**20`) must not reach the retriever's slicing.
            limit = min(_whole("limit", limit, 1), max(len(self.deck.catalog), 1))
        if max_tokens is not None:
            max_tokens = _whole("max_tokens", max_tokens, 0)
        deck = self.deck
        started = time.perf_counter()
        task, shortened = _bounded_task(task, self.max_task_chars)
        index_problems: list[str] = []
        try:
            await deck.ensure_index()
        except StageMissingError:
            raise
        except Exception as exc:
            # Not indexed: the next selection tries again. No deadline here: a first index of
            # a big catalog legitimately takes minutes.
            log.exception("plugin %r: indexing the catalog failed",
                          deck.providers.get("filter"))
            index_problems.append(f"retriever {deck.providers.get('filter')!r} could not index "
                                  f"the catalog ({type(exc).__name__}; see the log)")
        limit = self.limit if limit is None else limit
        budget = self.max_tokens if max_tokens is None else max_tokens
        self._turn += 1
        candidates: list[ScoredTool] = []
        if index_problems:
            problems = index_problems
        else:
            candidates, problems, _ = await self._recall(task, max(self.recall, limit))
        if shortened:
            problems = [shortened, *problems]
        scores = {c.name: c.score for c in candidates}
        reasons: dict[str, list[str]] = {
            c.name: ["retrieved", c.reason] if c.reason else ["retrieved"] for c in candidates
        }
        sticky = [
            name
            for name, turn in self._last_used.items()
            if self._turn - turn <= self.sticky_turns and name in deck.catalog
        ]
        extra = [n for n in (*self.pinned, *sticky) if n not in scores and n in deck.catalog]
        tools = [t for t in (deck.catalog.get(c.name) for c in candidates) if t is not None]
        tools += [deck.catalog.get(n) for n in extra]  # type: ignore[misc]
        # The state of the session the rules judge the hand by (see _offered_judged).
        judged_at = self._authority
        excluded, boosts = await self._apply_filters(task, tools, reasons)
        for name, boost in boosts.items():
            scores[name] = scores.get(name, 0.0) + boost
        for name in self.pinned:
            reasons.setdefault(name, []).append("pinned")
        for name in sticky:
            reasons.setdefault(name, []).append("sticky")
        forced = [n for n in dict.fromkeys([*self.pinned, *sticky]) if n in deck.catalog]
        ranked = sorted(
            (t for t in tools if t.name not in excluded and t.name not in forced),
            key=lambda t: scores.get(t.name, 0.0),
            reverse=True,
        )
        chosen = [deck.catalog.get(n) for n in forced if n not in excluded]
        over_budget: list[str] = []
        used = 0
        if budget is None:
            room = max(0, limit - len(chosen))
            chosen += ranked[:room]
            used = sum(deck.catalog.schema_tokens(t.name) for t in chosen if t is not None)
        else:
            fitting: list[ToolDefinition | None] = []
            for tool in [*chosen, *ranked]:
                if tool is None or len(fitting) >= limit:
                    continue
                cost = deck.catalog.schema_tokens(tool.name)
                if used + cost > budget:
                    over_budget.append(tool.name)
                    continue
                used += cost
                fitting.append(tool)
            chosen = fitting
        hand = Hand(
            query=task,
            tools=tuple(t for t in chosen if t is not None),
            scores={t.name: round(scores.get(t.name, 0.0), 6) for t in chosen if t is not None},
            reasons={k: tuple(v) for k, v in reasons.items() if k in {t.name for t in chosen if t}},
            exclusions=tuple(e for es in excluded.values() for e in es),
            candidates=len(candidates),
            tokens=used,
            max_tokens=budget,
            over_budget=tuple(over_budget),
            problems=tuple(problems),
        )
        hand = await self._outward_hand(hand)
        self.hand = hand
        self._offered = set(hand.names)
        self._offered_judged = {
            t.name: (judged_at, t) for t in tools if t is not None and t.name in self._offered
        }
        if deck._observers("select"):
            self._observe(
                Event(
                    kind="select",
                    session_id=self.id,
                    data={
                        "query": hand.query,
                        "tools": hand.names,
                        "excluded": sorted({e.name for e in hand.exclusions}),
                        "candidates": len(candidates),
                        "duration_s": time.perf_counter() - started,
                    },
                ),
                outward=True,  # the hand's texts were just redacted; names are registered
            )
        return hand

    async def _outward_hand(self, hand: Hand) -> Hand:
        """``hand`` with its texts (the task, the reasons, the exclusions' reasons and the
        problems) through the deck's outward redaction: a hand is printed (``tooldeck
        select``), answered over MCP (``search_tools``), recorded in the selection history
        and observed. Texts longer than :data:`_INLINE_REDACT_CHARS` in all are redacted in
        a worker thread (redaction is linear in their size)."""
        deck = self.deck
        if not deck._impls("tooldeck_redact"):
            return hand
        names = list(hand.reasons)
        texts = [hand.query, *(r for n in names for r in hand.reasons[n]),
                 *(e.reason for e in hand.exclusions), *hand.problems]
        # Long texts in a worker thread whole; hooks that may block in one whatever the size.
        # Under a deadline either way: a hung redactor withholds the texts, never hangs select.
        shown = await deck.aredact(
            texts, offload=sum(map(len, texts)) > _INLINE_REDACT_CHARS,
            limiter=self._policy_threads,
        )
        if shown is texts:
            return hand
        if len(shown) != len(texts) or not all(isinstance(t, str) for t in shown):
            shown = [WITHHELD_TEXT] * len(texts)  # a redactor answered another shape
        parts = iter(shown)
        query = next(parts)
        reasons = {n: tuple(next(parts) for _ in hand.reasons[n]) for n in names}
        exclusions = tuple(attrs.evolve(e, reason=next(parts)) for e in hand.exclusions)
        return attrs.evolve(hand, query=query, reasons=reasons, exclusions=exclusions,
                            problems=tuple(parts))

    async def _recall(
        self, task: str, k: int, timeout: float | None = None
    ) -> tuple[list[ScoredTool], list[str], Literal["error", "timeout"] | None]:
        """The retriever's candidates for ``task``, checked: a retriever that raises, does not
        answer within :data:`_RECALL_TIMEOUT_S` or answers something that is not a sequence of
        scored tools yields no candidates (logged, and said in ``Hand.problems``), never an
        exception out of ``select``; entries that are not scored tools, repeated names and
        scores that are not finite numbers are dropped or zeroed, so the hand never deals a
        tool twice (providers refuse duplicate function names)."""
        deck = self.deck
        plugin = deck.providers.get("filter") or "retriever"
        answer: Any = None
        timeout = _RECALL_TIMEOUT_S if timeout is None else timeout
        with trio.move_on_after(timeout) as late:
            try:
                answer = await deck._retriever.search(task, k)  # type: ignore[union-attr]
            except Exception as exc:
                log.exception("plugin %r: retriever search raised", plugin)
                # The type only: a message may hold a credential (a DSN), and a hand is not
                # redacted; the log record is, and holds the rest.
                why = type(exc).__name__
                return [], [f"retriever {plugin!r} failed ({why}; see the log)"], "error"
        if late.cancelled_caught:
            log.error("plugin %r: retriever search took longer than %g s", plugin, timeout)
            return [], [f"retriever {plugin!r} did not answer within {timeout:g} s"], "timeout"
        if isinstance(answer, str | bytes) or not isinstance(answer, Iterable):
            log.error("plugin %r: retriever search returned %s", plugin, type(answer).__name__)
            return [], [f"retriever {plugin!r} answered {type(answer).__name__}, not a list of "
                        "scored tools"], "error"
        candidates: list[ScoredTool] = []
        seen: set[str] = set()
        dropped = repeated = 0
        # Read on the event loop, so bounded: an endless iterator hung every session of the
        # deck, and a million entries stalled them. Room for repeats and unusable entries.
        most = 4 * k + 64
        entries = list(itertools.islice(answer, most + 1))
        problems = []
        if len(entries) > most:
            entries.pop()
            problems.append(f"retriever {plugin!r} answered more than {most} entries for "
                            f"{k} wanted; the rest were not read")
            log.warning("plugin %r: %s", plugin, problems[-1])
        for hit in entries:
            name, score = getattr(hit, "name", None), getattr(hit, "score", None)
            if not isinstance(name, str) or isinstance(score, bool) or not isinstance(
                score, int | float
            ):
                dropped += 1
                continue
            if name in seen:
                repeated += 1
                continue
            seen.add(name)
            reason = getattr(hit, "reason", "") or ""
            if (type(hit) is not ScoredTool or not math.isfinite(score)
                    or len(str(reason)) > _MAX_REASON_CHARS):
                reason = str(reason)
                hit = ScoredTool(
                    name=name,
                    score=float(score) if math.isfinite(score) else 0.0,
                    signals=dict(getattr(hit, "signals", None) or {}),
                    # A reason is a short phrase for people, printed in every hand.
                    reason=reason if len(reason) <= _MAX_REASON_CHARS
                    else reason[: _MAX_REASON_CHARS - 1] + "…",
                )
            candidates.append(hit)
        if dropped or repeated:
            problems.append(f"retriever {plugin!r}: {dropped} unusable and {repeated} repeated "
                            "entries dropped")
            log.warning("plugin %r: %s", plugin, problems[-1])
        return candidates, problems, None

    async def _apply_filters(
        self, task: str, tools: Sequence[ToolDefinition], reasons: dict[str, list[str]]
    ) -> tuple[dict[str, list[Exclusion]], dict[str, float]]:
        """The rule filters' verdicts on ``tools``. Hooks marked ``@nonblocking`` run on the
        loop; the others (a filter may read files or ask a service) in a worker thread of the
        session's policy pool under :data:`_FILTER_TIMEOUT_S`, so a slow or hung one never
        stalls the other sessions. A filter that raises or does not answer in time is logged
        and left out, as a raising one always was (filters shape the hand; authorization is
        the boundary)."""
        excluded: dict[str, list[Exclusion]] = {}
        boosts: dict[str, float] = {}
        info = self.info()
        inline, threaded = self.deck._filter_impls()
        # Each hook gets the same immutable sequence: one that cleared or extended a shared
        # list emptied the hand, or dealt a tool no retriever recalled (even one not in the
        # catalog) past every filter that ran before it. Now it raises, and is left out.
        candidates = tuple(tools)
        names = {t.name for t in candidates}
        answers: list[tuple[HookImpl, Any]] = []
        for impl in inline:
            answers.append((impl, self._filter_verdicts(impl, task, candidates, info)))
        if threaded:
            answers += await self._filters_in_thread(threaded, task, candidates, info)
        for impl, verdicts in answers:
            for verdict in _usable_verdicts(impl.plugin, verdicts, names):
                if isinstance(verdict, Exclusion):
                    kept = excluded.setdefault(verdict.name, [])
                    if verdict not in kept:  # the same verdict twice says nothing more
                        kept.append(verdict)
                else:
                    boosts[verdict.name] = boosts.get(verdict.name, 0.0) + verdict.boost
                    reasons.setdefault(verdict.name, []).append(verdict.reason)
        return excluded, boosts

    @staticmethod
    def _filter_verdicts(
        impl: HookImpl, task: str, tools: Sequence[ToolDefinition], info: SessionInfo
    ) -> Sequence[Any]:
        try:
            verdicts = impl(query=task, candidates=tools, session=info) or []
            if isinstance(verdicts, Exclusion | Preference):
                verdicts = [verdicts]  # one verdict, not in a list: meant as one
            elif isinstance(verdicts, str | bytes | Mapping) or not isinstance(
                verdicts, Iterable
            ):
                # Iterated, a text or a dict yields characters or keys, not verdicts.
                log.error("plugin %r: tooldeck_filter_tools answered %s, not a list of "
                          "verdicts; left out", impl.plugin, type(verdicts).__name__)
                return []
            # A verdict per candidate, at most: an endless iterator hung the loop (a
            # @nonblocking filter) or filled memory from an abandoned thread.
            most = 4 * len(tools) + 64
            read = list(itertools.islice(verdicts, most + 1))
            if len(read) > most:
                log.warning("plugin %r: tooldeck_filter_tools answered more than %d verdicts "
                            "for %d candidates; the rest were not read",
                            impl.plugin, most, len(tools))
                del read[most:]
            return read
        except BaseException as exc:
            if _must_propagate(exc):
                raise
            log.exception("plugin %r: tooldeck_filter_tools raised", impl.plugin)
            return []

    async def _filters_in_thread(
        self,
        impls: Sequence[HookImpl],
        task: str,
        tools: Sequence[ToolDefinition],
        info: SessionInfo,
    ) -> list[tuple[HookImpl, Any]]:
        answered: list[tuple[HookImpl, Any]] = []
        running: list[str] = []

        def run() -> None:
            for impl in impls:
                running.append(impl.plugin)
                answered.append((impl, self._filter_verdicts(impl, task, tools, info)))

        with trio.move_on_after(_FILTER_TIMEOUT_S) as late:
            await trio.to_thread.run_sync(
                run, abandon_on_cancel=True, limiter=self._policy_threads
            )
        if late.cancelled_caught:
            # The hung hook's thread is abandoned; what it answers later is dropped.
            done = list(answered)
            hung = running[len(done)] if len(running) > len(done) else None
            if hung is None:
                log.error("session %s: no filter hook could start within %g s (the session's "
                          "policy threads are busy)", self.id, _FILTER_TIMEOUT_S)
            else:
                log.error("plugin %r: tooldeck_filter_tools did not answer within %g s; its "
                          "verdicts were left out", hung, _FILTER_TIMEOUT_S)
            return done
        return answered

    # ------------------------------------------------------------------ calls

    async def call(
        self,
        name: str | ToolCall,
        arguments: Mapping[str, Any] | None = None,
        *,
        approval_id: str | None = None,
        call_id: str | None = None,
        on_progress: Callable[[Mapping[str, Any]], None] | None = None,
    ) -> ToolResult:
        """Run one tool call through the whole pipeline; always returns a ToolResult.

        :param on_progress: receives what the tool reports through ``ToolContext.emit``
            (``{"progress": n, "total": t, "message": ...}``), always on the deck's trio
            thread, in order; it must not block. A callback that raises is logged and skipped.
        """
        if isinstance(name, ToolCall):
            call = await self._outward_id(name)
        else:
            call = ToolCall(
                name=name,
                arguments=arguments if arguments is not None else {},
                id=call_id or f"call_{_CALL_PREFIX}{next(_call_counter):x}",
            )
            if call_id:  # an id of the deck's own needs no look
                call = await self._outward_id(call)
        if self._closed or self.deck._closed:
            closed = self._closed_refusal(call)
            return closed if self._registered(call) else await self._redact(closed)
        generation = self._generation
        started = time.perf_counter()
        # Each call is a cancellation point, and every 16th call yields to the scheduler: a
        # call of a cached result or of a tool that never suspends gives trio no scheduling
        # point, and a loop of them must still let other tasks run. Yielding on every call
        # would cost more than the rest of such a call (a trio checkpoint is ~3 µs).
        if next(_checkpoints) & 15:
            await trio.lowlevel.checkpoint_if_cancelled()
        else:
            await trio.lowlevel.checkpoint()
        deck = self.deck
        run = trio.lowlevel.current_trio_token()
        with deck._calls_lock:
            if deck._calls_running and deck._calls_run is not run:
                # Another thread's trio run: trio's limiters, locks and events cannot be shared
                # across runs, and sharing them corrupts the executor's queues for both runs.
                raise RuntimeError(
                    "this deck is serving calls in another trio run (another thread): a Deck "
                    "and its sessions belong to one trio run at a time; from other threads, "
                    "use tooldeck.portal (a thread-safe facade)"
                )
            deck._calls_run = run
            deck._calls_running += 1
        token = _PROGRESS.set(on_progress) if on_progress is not None else None
        try:
            result = await self._run(call, approval_id, generation)
            if not isinstance(result, ToolResult):
                raise TypeError(f"the pipeline produced {type(result).__name__}, not a ToolResult")
        except BaseException as exc:
            if _must_propagate(exc):
                raise
            # The stages are plugins: one that returns something unexpected (a limiter's None,
            # an executor's dict, a filter's 42) fails this call, never session.call itself.
            # %r and shortened: a name no tool has is the model's text (newlines, 5 MB).
            log.exception("call %s %r: a plugin broke the pipeline", call.id,
                          shorten(call.name, _SHOWN_NAME_CHARS) if type(call.name) is str
                          else type(call.name).__name__)
            result = self._plugin_error("a stage of the pipeline", exc)
        finally:
            with deck._calls_lock:
                deck._calls_running -= 1
            if token is not None:
                _PROGRESS.reset(token)
        shown = call.name
        if not self._registered(call):
            # A name no tool has is the model's own text (an "AKIA..." it made up): it goes
            # out in TOOL_NOT_FOUND, the metadata and the events, so all of them pass the
            # deck's outward redaction. Registered names are the developer's: nothing to do.
            # One deadline for both: a hung redactor withholds them within REDACT_TIMEOUT_S.
            deadline = trio.current_time() + REDACT_TIMEOUT_S
            result = await self._redact(result)
            # Bounded too: a 5 MB invented name became a 5 MB metadata field and span attribute.
            shown = await self._redact(
                shorten(call.name, _SHOWN_NAME_CHARS) if type(call.name) is str else call.name,
                max(0.0, deadline - trio.current_time()),
            )
        elif result.error is not None and result.error.code is ErrorCode.PLUGIN_ERROR:
            # A plugin's failure quotes its exception (a Redis URL, a validator's message):
            # output like any other, so it passes the result processors (redaction) too. Some
            # paths processed it already; redaction is idempotent.
            tool = self.deck.catalog.get(call.name)
            if tool is not None:
                result = await self._finish(call, tool, result)
        if "cached" in result.metadata:
            result = result.with_metadata(
                duration_s=round(time.perf_counter() - started, 6), call_id=call.id, tool=shown
            )
        else:
            result = result.with_metadata(
                duration_s=round(time.perf_counter() - started, 6),
                call_id=call.id,
                tool=shown,
                cached=False,
            )
        if log.isEnabledFor(logging.DEBUG):
            log.debug(
                "call %s %r -> %s", call.id, shown, result.error.code if result.error else "ok"
            )
        if self.deck._observers("call.end"):
            self._event("call.end", call, result, shown)
        return result

    def _closed_refusal(self, call: ToolCall) -> ToolResult:
        """The answer to a call of a closed session, or of any session of a closed deck."""
        if self._closed:
            return ToolResult.fail(
                ErrorCode.CANCELLED,
                f"session {self.id!r} is closed; the call of {shorten(call.name, 80)!r} did "
                "not run",
                suggestion="Open a new session.",
            )
        return ToolResult.fail(
            ErrorCode.CANCELLED,
            f"the deck of session {self.id!r} is closed; the call of "
            f"{shorten(call.name, 80)!r} did not run",
            suggestion="Open a new deck and session; an approval given for this call stays "
            "in a shared approval store, usable there with the same arguments and session id.",
        )

    async def _redact(self, value: _V, timeout_s: float | None = None) -> _V:
        """``value`` through the deck's outward redaction from this session's calls: the hooks
        that may block in this session's own worker threads, under ``timeout_s``
        (:meth:`Deck.aredact`)."""
        return await self.deck.aredact(value, timeout_s=timeout_s, limiter=self._policy_threads)

    async def _outward_id(self, call: ToolCall) -> ToolCall:
        """``call`` with its id as it may be shown: bounded and printable
        (:func:`_bounded_call_id`) and through the deck's outward redaction, since it goes
        out in the metadata, the events and the logs like a name no tool has (a model's
        server may let it write the id, and a secret with it)."""
        ident = call.id
        shown: Any = ident
        if type(ident) is not str or not _PLAIN_CALL_ID.match(ident):
            shown = _bounded_call_id(ident)
        if shown and self.deck._impls("tooldeck_redact"):
            shown = await self._redact(shown)
        if shown is ident:
            return call
        if type(call) is ToolCall:
            return ToolCall(name=call.name, arguments=call.arguments, id=shown)
        return attrs.evolve(call, id=shown)

    def _registered(self, call: ToolCall) -> bool:
        """Whether ``call`` names a registered tool (a dict probe: the hot path's case)."""
        return type(call.name) is str and call.name in self.deck.catalog

    async def call_many(self, calls: Sequence[ToolCall]) -> list[ToolResult]:
        """Run several calls concurrently (a model's parallel tool calls); results in call order."""
        results: list[ToolResult | None] = [None] * len(calls)

        async def one(index: int, call: ToolCall) -> None:
            results[index] = await self.call(call)

        async with trio.open_nursery() as nursery:
            for index, call in enumerate(calls):
                nursery.start_soon(one, index, call)
        return [r for r in results if r is not None]

    async def run_tool_calls(self, format: str, response: Any) -> list[dict[str, Any]]:
        """One agent round trip: execute every tool call in a provider response, concurrently,
        and return the provider's tool-result messages to append to the conversation.

        :param format: ``openai`` (chat completions), ``openai-responses`` or ``anthropic``.
        :param response: the SDK response object (or its dict form, or just the message/output).
        """
        from .adapters import parse_tool_calls, result_messages

        # In a worker thread: the response's size is the model's (megabytes of argument JSON
        # to parse, an SDK object to dump), and one session's response must not stall the
        # loop. The argument texts are bounded before they are parsed (see _parse_arguments).
        parsed = await trio.to_thread.run_sync(parse_tool_calls, format, response)
        runnable = [p.call for p in parsed if p.error is None]
        ran = iter(await self.call_many(runnable))
        pairs = []
        for p in parsed:
            # A call that could not be parsed quotes the model's name for it: outward text.
            pairs.append((p.call, await self._redact(ToolResult(success=False, error=p.error))
                          if p.error is not None else next(ran)))
        return result_messages(format, pairs)

    def _event(self, kind: str, call: ToolCall, result: ToolResult, tool_name: Any) -> None:
        """A call's event. ``tool_name`` is the name as it went out (redacted when no tool has
        it); the data is the core's own (an ErrorCode, flags, numbers, a registered tool's
        category), so the event skips a second redaction on every call's path."""
        category = self.deck.catalog.get(call.name) if self._registered(call) else None
        self._observe(
            Event(
                kind=kind,
                session_id=self.id,
                call_id=call.id,
                tool=tool_name,
                data={
                    "success": result.success,
                    "code": str(result.error.code) if result.error else None,
                    "cached": result.metadata.get("cached", False),
                    "duration_s": result.metadata.get("duration_s"),
                    "category": getattr(category, "category", None),
                },
            ),
            outward=True,
        )

    def _observe(self, event: Event, *, outward: bool = False) -> None:
        """Deliver ``event`` to its observers, through the deck's outward redaction first
        (:meth:`Deck._outward_event`) unless the caller built it from outward values only
        (``outward``: a hand's redacted query, a call's redacted name and the core's own data,
        which are not scanned twice)."""
        self.deck._deliver(event, outward=outward)

    @staticmethod
    def _tool_changed(tool: ToolDefinition, removed: bool) -> ToolResult:
        if removed:
            return ToolResult.fail(
                ErrorCode.TOOL_NOT_FOUND,
                f"tool {tool.name!r} was removed while this call waited; it did not run",
                suggestion="Choose another tool.",
            )
        return ToolResult.fail(
            ErrorCode.PERMISSION_DENIED,
            f"tool {tool.name!r} was registered again with another definition while this call "
            "waited; it did not run",
            suggestion="Call the tool again (it may need a new approval).",
        )

    def _cancelled_before_start(self, call: ToolCall) -> ToolResult:
        return ToolResult.fail(
            ErrorCode.CANCELLED,
            f"the call of {shorten(call.name, 80)!r} was cancelled by the session before it "
            "started; it did not run",
        )

    async def _run(self, call: ToolCall, approval_id: str | None, generation: int) -> ToolResult:
        deck = self.deck
        if self._generation != generation:
            return self._cancelled_before_start(call)
        authority = self._authority
        tool = deck.catalog.get(call.name) if type(call.name) is str else None
        if tool is None and type(call.name) is str:
            # A name lenient registration replaced (the catalog's original spelling): the
            # call goes on under the registered name.
            tool = deck.catalog.resolve(call.name)
            if tool is not None:
                call = attrs.evolve(call, name=tool.name)
        if tool is None:
            close = (await self._usable_names(deck.closest_names(str(call.name), n=20)))[:5]
            return ToolResult.fail(
                ErrorCode.TOOL_NOT_FOUND,
                f"no tool named {shorten(call.name, 120)!r} is registered",
                suggestion=(
                    f"Did you mean {', '.join(repr(n) for n in close)}?" if close else None
                ),
                details={"candidates": close},
            )
        metadata: dict[str, Any] = {}
        if call.name not in self._offered:
            # Without a hand, the rule verdict on a tool only changes with the session's state
            # (filters are pure): remember it until the session changes.
            current = self.info()
            if self.hand is not None or self._admitted.get(tool.name) is not current:
                refusal, metadata = await self._admit_unoffered(tool)
                if refusal is not None:
                    # Quotes filter plugins' reasons: output, so it passes the processors.
                    return await self._finish(call, tool, refusal)
                if self.hand is None:
                    self._admitted[tool.name] = current
        elif self._offered_judged.get(tool.name) != (authority, tool):
            refusal = await self._rejudge_offered(tool, authority)
            if refusal is not None:
                return await self._finish(call, tool, refusal)
        if type(call.arguments) is not dict and not isinstance(call.arguments, Mapping):
            return await self._finish(
                call,
                tool,
                self._invalid(
                    [ArgumentProblem(path="$", message="arguments must be a JSON object")]
                ),
            )
        # A bounded look (~256 values at most): deep nesting and unprintable integers are
        # refused here; arguments over the inline budget are checked in a worker thread.
        excess = _argument_excess(
            call.arguments, _INLINE_ARGUMENT_ITEMS, _INLINE_ARGUMENT_CHARS
        )
        if excess == "depth" or excess == "int":
            return await self._finish(call, tool, self._excess(excess))
        key: str | None = None
        if excess is not None:
            checked = await self._check_big_arguments(call, tool, generation)
            if checked is None:
                return self._cancelled_before_start(call)
            if isinstance(checked, ToolResult):
                return await self._refused_arguments(call, tool, checked)
            info, decisions, key = checked
            security = tool.security
        else:
            invalid = self._validated(tool, call.arguments)
            if invalid is not None:
                return await self._refused_arguments(call, tool, invalid)
            info = self._call_info(tool)
            security = tool.security
            policy = await self._policy_decisions(call, tool, info, generation, offload=False)
            if policy is None:
                return self._cancelled_before_start(call)
            decisions = policy
        if decisions or security.level is not SecurityLevel.SAFE or security.require_confirm:
            refusal = await self._combine(call, tool, info, decisions, approval_id)
        else:
            refusal = None  # nobody objects, and _combine's baseline has nothing to add
        if refusal is not None:
            return await self._finish(call, tool, refusal)
        if self._generation != generation:
            # cancel() came while policy or the user's confirmation was being asked.
            return self._cancelled_before_start(call)
        # Asks that a confirmation or an approval satisfied: not asked again if judged again.
        confirmed = bool(decisions) and any(d.action == "ask" for d in decisions)
        offload = excess is not None
        if self._authority != authority:
            # A revoke, a lower max_level... while policy, the user or the store was asked.
            judged = await self._judge_again(
                call, tool, approval_id, generation, confirmed, offload
            )
            if isinstance(judged, ToolResult):
                return judged
            info, authority, confirmed = judged
        if deck._closed:  # closed while policy or the user was asked: no store round trip
            return self._closed_refusal(call)
        outcome = None
        limited = deck._limiter is not None and tool.security.rate_limit is not None
        if deck._cache is not None and tool.execution.cacheable:
            if key is None:
                key = cache_key(tool, call.arguments, info)
            if limited and deck._cache_and_limit is not None:
                # The cache probe and, on a miss, the limit in one round trip (a cache that
                # shares the limiter's store, e.g. tooldeck-redis): under the deadline, and
                # failing closed as the limiter alone would.
                pair = None
                try:
                    with trio.move_on_after(tool.execution.timeout_s):
                        pair = await deck._cache_and_limit(key, deck._limiter, tool, info)
                except BaseException as exc:
                    if _must_propagate(exc):
                        raise
                    return self._plugin_error("rate limiter", exc)
                if pair is None:
                    return self._provider_timeout("rate limiter", tool)
                hit, outcome = pair
            else:
                try:
                    if deck._may_stall.get("cache_get"):
                        hit = None
                        with trio.move_on_after(tool.execution.timeout_s):
                            hit = await deck._cache.get(key)
                    else:
                        hit = await deck._cache.get(key)
                except BaseException as exc:
                    if _must_propagate(exc):
                        raise
                    log.exception("cache get failed")
                    hit = None
            if isinstance(hit, ToolResult):
                if self._authority != authority:  # the session changed during the probe
                    judged = await self._judge_again(
                        call, tool, approval_id, generation, confirmed, offload
                    )
                    if isinstance(judged, ToolResult):
                        return judged
                self._used(tool.name)
                # A stored result was processed with the secrets known when it was stored (by
                # this process, or another one sharing the cache with other settings): it is
                # output again, so it passes the processors again (redaction is idempotent, and
                # a clean small result costs it a set lookup).
                hit = await self._finish(call, tool, hit)
                return hit.with_metadata(cached=True, **metadata)
        if limited:
            if outcome is None:
                try:
                    if deck._may_stall.get("limiter"):
                        with trio.move_on_after(tool.execution.timeout_s):
                            outcome = await deck._limiter.hit(tool, info)
                        if outcome is None:
                            return self._provider_timeout("rate limiter", tool)
                    else:
                        outcome = await deck._limiter.hit(tool, info)
                except BaseException as exc:
                    if _must_propagate(exc):
                        raise
                    return self._plugin_error("rate limiter", exc)
            if not outcome.allowed:
                return await self._finish(
                    call,
                    tool,
                    ToolResult.fail(
                        ErrorCode.RATE_LIMIT_EXCEEDED,
                        f"rate limit of {tool.name!r} reached"
                        + (f" ({outcome.limit})" if outcome.limit else ""),
                        retry_after_s=round(outcome.retry_after_s, 3),
                        suggestion=(
                            f"Wait {outcome.retry_after_s:.1f} s before calling {tool.name} again."
                        ),
                    ),
                )
        if self._generation != generation:
            return self._cancelled_before_start(call)
        if deck._closed:
            return self._closed_refusal(call)
        if self._authority != authority:  # the session changed during the cache or limiter
            judged = await self._judge_again(
                call, tool, approval_id, generation, confirmed, offload
            )
            if isinstance(judged, ToolResult):
                return judged
        registered = deck.catalog.get(tool.name)
        if registered is not tool and (
            registered is None or _tool_fingerprint(registered) != _tool_fingerprint(tool)
        ):
            # Removed or registered again differently (remove_tools + add_tools, a reloaded
            # MCP server) while the call waited for policy or the user: what was judged and
            # approved is no longer the deck's tool, and a removed tool must not run.
            return await self._finish(call, tool, self._tool_changed(tool, registered is None))
        # What this call's result may be cached against: a write that invalidates this tool
        # while it runs (it read the old state) makes its result stale before it is stored.
        invalidations = deck._invalidations.get(tool.name, 0) if key is not None else 0
        invalidated = self._invalidated_by(tool) if deck._cache is not None else ()
        writes = bool(invalidated)
        if writes:
            # A write starts: reads running now must not store what they read before it,
            # whatever this call's outcome (a write that fails or times out may have landed).
            self._count_invalidations(invalidated)
        executor_failed: ToolResult | None = None
        try:
            if deck._executor_cancels:
                # The executor keeps a cancel scope per call already (Session.cancel asks it
                # to cancel this session's calls): a second scope here would only cost time.
                # Nothing awaits between the generation check above and the executor
                # registering the call, so a cancel() cannot fall in between.
                try:
                    result = await deck._executor.run(tool, call, self._context(call, tool))
                except Exception as exc:
                    result = executor_failed = self._plugin_error("executor", exc)
                except BaseException as exc:
                    if _must_propagate(exc):
                        raise
                    # Quotes the tool's exception: output, so it goes on to the result
                    # processors (redaction) below like any other result, never straight out.
                    result = self._tool_base_exception(tool, exc)
            else:
                result = await self._execute_scoped(call, tool)
        except BaseException:
            if writes:
                # Cancelled mid-write: what it changed may be on disk; cached reads of the
                # old state go all the same (shielded, bounded: the cancel still wins).
                await self._invalidate_after_write(
                    tool, min(tool.execution.timeout_s, _CANCELLED_INVALIDATE_S), shield=True
                )
            raise
        if executor_failed is not None:
            if writes:  # it may have started the tool before failing
                await self._invalidate_after_write(tool, tool.execution.timeout_s)
            return executor_failed
        self._used(tool.name)
        data = result.data
        if result.error is not None or not (type(data) in _LEAF_RESULTS or (
            type(data) is str and len(data) * 4 <= tool.execution.max_output_bytes
        ) or (type(data) is int and data.bit_length() < 64)):
            # A successful bool/None, 64-bit int or short text is plain JSON within the cap.
            if _bulky(data) or (result.error is not None and _bulky(result.error.details)):
                result = await self._normalised_in_thread(tool, result)
            else:
                result = _normalised(result, tool.execution.max_output_bytes)
        result = await self._finish(call, tool, result)
        if key is not None and deck._invalidations.get(tool.name, 0) != invalidations:
            key = None  # invalidated while it ran: storing it would serve the old state
        if not result.success:
            key = None  # only successes are stored; a failed write still invalidates
        if deck._cache is not None and (key is not None or writes):
            try:
                stalls = deck._may_stall
                if stalls.get("cache_put") or stalls.get("cache_invalidate"):
                    with trio.move_on_after(tool.execution.timeout_s) as late:
                        await self._cache_update(tool, key, result)
                    if late.cancelled_caught:
                        log.warning("cache update of %r skipped: no answer in time", tool.name)
                else:
                    await self._cache_update(tool, key, result)
            except BaseException as exc:
                if _must_propagate(exc):
                    raise
                log.exception("cache update failed")
        return result.with_metadata(**metadata) if metadata else result

    async def _policy_decisions(
        self,
        call: ToolCall,
        tool: ToolDefinition,
        info: SessionInfo,
        generation: int,
        *,
        offload: bool,
    ) -> list[Decision] | None:
        """Every policy hook's decision on ``call``: ``@nonblocking`` hooks on the loop, the
        others in the session's policy threads; all of them in threads when ``offload`` (big
        arguments: their cost grows with them) or when the tool has URL parameters (guards
        resolve host names, and DNS must not stall every other call on the loop). None when
        the session cancelled the call meanwhile."""
        inline, threaded = self.deck._authorize_impls()
        if offload or tool.security.url_params:
            inline, threaded = [], [*inline, *threaded]
        decisions = self._decisions(call, tool, info, inline) if inline else []
        if threaded:
            more = await self._decisions_in_thread(call, tool, info, threaded, generation)
            if more is None:
                return None
            decisions += more
        return decisions

    async def _judge_again(
        self,
        call: ToolCall,
        tool: ToolDefinition,
        approval_id: str | None,
        generation: int,
        confirmed: bool,
        offload: bool,
    ) -> ToolResult | tuple[SessionInfo, int, bool]:
        """Authorize an authorized call again: the session changed (a revoke, a lower
        ``max_level``, an always-allow taken back) while the call waited for policy, the user
        or a store, and its tool has not started. A refusal now refuses it; a confirmation or
        approval it already got stands (``confirmed``: the user is not asked twice). Repeated
        until the session holds still; ``(info, authority, confirmed)`` when the call may go
        on."""
        for _ in range(_JUDGE_AGAIN_ROUNDS):
            authority = self._authority
            info = self._call_info(tool)
            policy = await self._policy_decisions(call, tool, info, generation, offload=offload)
            if policy is None:
                return self._cancelled_before_start(call)
            decisions = policy
            refusal = await self._combine(
                call, tool, info, decisions, approval_id, confirmed=confirmed
            )
            if refusal is not None:
                return await self._finish(call, tool, refusal)
            confirmed = confirmed or any(d.action == "ask" for d in decisions)
            if self._generation != generation:
                return self._cancelled_before_start(call)
            if self._authority == authority:
                return info, authority, confirmed
        return await self._finish(
            call,
            tool,
            ToolResult.fail(
                ErrorCode.PERMISSION_DENIED,
                f"the session's permissions kept changing while this call of {tool.name!r} "
                "waited; it did not run",
                suggestion="Call the tool again.",
            ),
        )

    async def _cache_update(
        self, tool: ToolDefinition, key: str | None, result: ToolResult | None
    ) -> None:
        cache = self.deck._cache
        if key is not None and result is not None:
            await cache.put(key, result, tool.execution.cache_ttl_s)
        invalidated = self._invalidated_by(tool)
        if invalidated:
            # Counted again before the cache is asked (a remote invalidate takes round trips):
            # a call of these tools that started during the write does not store what it read.
            self._count_invalidations(invalidated)
            await cache.invalidate(invalidated)

    async def _invalidate_after_write(
        self, tool: ToolDefinition, seconds: float, *, shield: bool = False
    ) -> None:
        """Invalidate what a call of ``tool`` that did not succeed may have made stale (it may
        have written before it failed or was cancelled), within ``seconds``; ``shield``: also
        on the way out of a cancelled scope."""
        with trio.CancelScope(shield=shield), trio.move_on_after(seconds):
            try:
                await self._cache_update(tool, None, None)
            except BaseException as exc:
                if _must_propagate(exc):
                    raise
                log.exception("cache invalidation after an unfinished write of %r failed",
                              tool.name)

    def _invalidated_by(self, tool: ToolDefinition) -> tuple[str, ...]:
        """The cached tools a call of ``tool`` makes stale: its ``invalidates``, and for a tool
        that writes the workdir every cacheable tool keyed by the workdir (a pack that forgot
        to list ``file_read``, a screenshot saved over a file read before, a shell command)."""
        declared = tool.execution.invalidates
        if not tool.security.writes_workdir:
            return declared
        readers = self.deck.catalog.workdir_readers()
        if not readers:
            return declared
        return tuple(dict.fromkeys((*declared, *readers)))

    def _count_invalidations(self, names: Sequence[str]) -> None:
        counts = self.deck._invalidations
        for name in names:
            counts[name] = counts.get(name, 0) + 1

    def _used(self, name: str) -> None:
        if self._last_used.get(name) != self._turn:
            self._last_used[name] = self._turn
            # Only the snapshot's recent tools changed, not what the session allows: calls in
            # flight need not be judged again (every parallel call would re-run policy).
            self._info = None
            if self.hand is not None and name in self._offered:
                # Learning from use: a retriever that keeps history lifts this tool for
                # similar tasks later. Keyed by the task of the hand it was dealt in.
                recorder = getattr(self.deck._retriever, "record_use", None)
                if recorder is not None:
                    try:
                        recorder(self.hand.query, name)
                    except BaseException as exc:
                        if _must_propagate(exc):
                            raise
                        log.exception("retriever.record_use failed")

    def _invalid(self, problems: Sequence[ArgumentProblem]) -> ToolResult:
        listed = "; ".join(f"{p.path}: {p.message}" for p in problems[:10])
        more = f" (and {len(problems) - 10} more)" if len(problems) > 10 else ""
        return ToolResult.fail(
            ErrorCode.INVALID_ARGUMENTS,
            f"{len(problems)} invalid argument(s): {listed}{more}",
            suggestion=f"Fix these fields and call again: {listed}{more}",
            details={"errors": [attrs.asdict(p) for p in problems[:_MAX_LISTED_PROBLEMS]],
                     **({"errors_total": len(problems)}
                        if len(problems) > _MAX_LISTED_PROBLEMS else {})},
        )

    @staticmethod
    def _provider_timeout(what: str, tool: ToolDefinition) -> ToolResult:
        log.error("%s did not answer within %g s", what, tool.execution.timeout_s)
        return ToolResult.fail(
            ErrorCode.TIMEOUT,
            f"the {what} did not answer within the call's {tool.execution.timeout_s:g} s "
            f"deadline; {tool.name!r} did not run",
            retryable=True,
            suggestion="Try again in a moment.",
        )

    @staticmethod
    def _tool_base_exception(tool: ToolDefinition, exc: BaseException) -> ToolResult:
        # asyncio.CancelledError leaking from asyncio code, SystemExit from sys.exit() in a
        # tool, a custom BaseException: the tool's failure, never the host's.
        log.error("tool %r raised %s", tool.name, type(exc).__name__)
        return ToolResult.fail(
            ErrorCode.EXECUTION_ERROR,
            f"tool {tool.name!r} raised {type(exc).__name__}: {shorten(exc, 300)}",
            suggestion="The tool failed; report it to the user or try another approach.",
        )

    @staticmethod
    def _plugin_error(what: str, exc: BaseException) -> ToolResult:
        log.error("%s failed: %s: %s", what, type(exc).__name__, exc)
        return ToolResult.fail(
            ErrorCode.PLUGIN_ERROR, f"{what} failed: {type(exc).__name__}: {exc}"
        )

    async def _usable_names(self, names: list[str]) -> list[str]:
        """Of ``names``, those the session's rules admit: a suggestion must never point the
        model at a tool this session may not use (an excluded category, a level above its
        maximum), which would also reveal that the tool exists."""
        tools = [t for t in (self.deck.catalog.get(n) for n in names) if t is not None]
        if not tools:
            return []
        excluded, _ = await self._apply_filters(self.hand.query if self.hand else "", tools, {})
        return [t.name for t in tools if t.name not in excluded]

    async def _admit_unoffered(
        self, tool: ToolDefinition
    ) -> tuple[ToolResult | None, dict[str, Any]]:
        """A registered tool outside this turn's hand: widen retrieval, then apply the rules."""
        metadata: dict[str, Any] = {}
        judged_at = self._authority
        hand = self.hand
        if hand is not None and self.deck._retriever is not None:
            # The retriever is a plugin: raising, hanging or answering garbage, it must cost
            # this call a refusal within its deadline, never an exception or a hang.
            wider, problems, failed = await self._recall(
                hand.query, self.fallback_recall, tool.execution.timeout_s
            )
            if failed == "timeout":
                return self._provider_timeout("retriever (widened search)", tool), metadata
            if failed == "error":
                return ToolResult.fail(
                    ErrorCode.PLUGIN_ERROR, f"widened search failed: {problems[0]}"
                ), metadata
            ranks = {c.name: i + 1 for i, c in enumerate(wider)}
            # A task with no words in it ("", "   ", control characters) has no ranking: the
            # retriever answers nothing, which says nothing about this tool. The rules below
            # still judge it, as they do for a session without a hand.
            unranked = not wider and not any(ch.isalnum() for ch in hand.query)
            if tool.name not in ranks and tool.name not in self.pinned and not unranked:
                offered = ", ".join(hand.names)
                return (
                    ToolResult.fail(
                        ErrorCode.PERMISSION_DENIED,
                        f"tool {tool.name!r} was not offered for this task and is not among the "
                        f"{self.fallback_recall} tools most related to it",
                        suggestion=(f"Use one of the offered tools: {offered}." if offered else
                                    "Ask for a new selection of tools for this task."),
                        details={"offered": hand.names},
                    ),
                    metadata,
                )
            metadata["fallback"] = {
                "widened_to": self.fallback_recall,
                "rank": ranks.get(tool.name),
            }
        excluded, _ = await self._apply_filters(hand.query if hand else "", [tool], {})
        if tool.name in excluded:
            return _excluded(excluded[tool.name]), metadata
        if hand is not None:
            self._offered.add(tool.name)
            self._offered_judged[tool.name] = (judged_at, tool)
        return None, metadata

    async def _rejudge_offered(self, tool: ToolDefinition, authority: int) -> ToolResult | None:
        """A dealt tool whose verdict is stale: the rule filters again, for the hand's task.
        None when they still pass it (remembered until the session or the tool changes)."""
        excluded, _ = await self._apply_filters(self.hand.query if self.hand else "", [tool], {})
        if tool.name in excluded:
            return _excluded(excluded[tool.name])
        self._offered_judged[tool.name] = (authority, tool)
        return None

    def _call_info(self, tool: ToolDefinition) -> SessionInfo:
        """The session as policy judges a call of ``tool``."""
        info = self.info()
        if tool.name in info.always_allow and not self._always_allows(tool):
            # The user allowed the tool they saw, not whatever is registered under its name now:
            # policy (and the baseline below) judge without it.
            info = self.info()
        return info

    def _validated(self, tool: ToolDefinition, arguments: Any) -> ToolResult | None:
        """None when ``arguments`` satisfy ``tool``'s schema; else INVALID_ARGUMENTS, or
        PLUGIN_ERROR when the validator itself raised."""
        validator = self.deck.catalog.validator(tool.name)
        if validator is None:
            return None
        try:
            problems = validator(arguments)
        except BaseException as exc:
            if _must_propagate(exc):
                raise
            return self._plugin_error("argument validator", exc)
        return self._invalid(problems) if problems else None

    async def _refused_arguments(
        self, call: ToolCall, tool: ToolDefinition, refused: ToolResult
    ) -> ToolResult:
        """The answer to a call whose arguments were refused before policy: the model's mistake
        goes through :meth:`_finish` (events, redaction); a failing plugin's answer as it is."""
        if refused.error is not None and refused.error.code is ErrorCode.PLUGIN_ERROR:
            return refused
        return await self._finish(call, tool, refused)

    def _excess(self, excess: str) -> ToolResult:
        """INVALID_ARGUMENTS for arguments :func:`_argument_excess` found too big."""
        return self._invalid([ArgumentProblem(path="$", message=_EXCESS_MESSAGES[excess])])

    async def _check_big_arguments(
        self, call: ToolCall, tool: ToolDefinition, generation: int
    ) -> tuple[SessionInfo, list[Decision], str | None] | ToolResult | None:
        """Everything before the tool whose cost grows with the arguments, for arguments over
        the inline budget: the size caps, validation, every policy hook and the cache key, in
        a worker thread under the call's deadline (one model's megabytes never stall the other
        sessions' calls). ``(info, decisions, cache key or None)``; a ToolResult when the
        arguments are refused; None when the session cancelled the call meanwhile."""
        deck = self.deck
        info = self._call_info(tool)  # on the loop: it may update the session
        inline, threaded = deck._authorize_impls()
        impls = [*inline, *threaded]
        keyed = deck._cache is not None and tool.execution.cacheable
        running: list[str] = []

        def check() -> tuple[SessionInfo, list[Decision], str | None] | ToolResult:
            excess = _argument_excess(call.arguments, MAX_ARGUMENT_ITEMS, MAX_ARGUMENT_CHARS)
            if excess is not None:
                return self._excess(excess)
            invalid = self._validated(tool, call.arguments)
            if invalid is not None:
                return invalid
            decisions = self._decisions(call, tool, info, impls, running) if impls else []
            key = cache_key(tool, call.arguments, info) if keyed else None
            return info, decisions, key

        timeout = tool.execution.timeout_s
        checked, _ = await self._in_policy_thread(timeout, check)
        if checked is not None:
            return checked
        if self._generation != generation:
            return None
        if running:
            # As _decisions_in_thread: the hook still running is the one to blame; fail closed.
            plugin = running[-1]
            log.error(
                "plugin %r: tooldeck_authorize_call did not answer within %g s", plugin, timeout
            )
            return ToolResult.fail(
                ErrorCode.PLUGIN_ERROR,
                f"policy plugin {plugin!r} did not answer within the call's {timeout:g} s "
                "deadline; the call was refused",
                suggestion="Try again later; if it persists, tell the user.",
            )
        return ToolResult.fail(
            ErrorCode.INVALID_ARGUMENTS,
            f"checking the arguments took longer than the call's {timeout:g} s deadline "
            "(or no worker thread was free); the call did not run",
            suggestion="Send smaller arguments.",
        )

    async def _in_policy_thread(
        self, timeout: float, function: Callable[..., _V], *args: Any
    ) -> tuple[_V | None, trio.CancelScope]:
        """``function(*args)`` in one of the session's policy threads, under a deadline of
        ``timeout`` s that :meth:`cancel` and :meth:`aclose` end too. The answer, or None when
        it did not come (the returned scope says whether the deadline passed: its thread is
        abandoned, not killed)."""
        scope = trio.CancelScope(deadline=trio.current_time() + timeout)
        self._scopes.add(scope)
        answer: _V | None = None
        try:
            with scope:
                answer = await trio.to_thread.run_sync(
                    function, *args, abandon_on_cancel=True, limiter=self._policy_threads
                )
        finally:
            self._scopes.discard(scope)
        return answer, scope

    async def _decisions_in_thread(
        self,
        call: ToolCall,
        tool: ToolDefinition,
        info: SessionInfo,
        impls: list[HookImpl],
        generation: int,
    ) -> list[Decision] | None:
        """Policy hooks that may block, in a worker thread under the call's deadline; None when
        the session cancelled the call meanwhile."""
        running: list[str] = []
        timeout = tool.execution.timeout_s
        decisions, _ = await self._in_policy_thread(
            timeout, self._decisions, call, tool, info, impls, running
        )
        if decisions is not None:
            return decisions
        if self._generation != generation:
            return None
        # The deadline passed: the hook still running is the one to blame (its thread is
        # abandoned; its late answer is dropped). Fail closed.
        if not running:  # no hook started: every thread of the session's pool is stuck
            stuck = self._policy_threads.borrowed_tokens
            log.error("session %s: %d policy hook threads still running past their deadline",
                      self.id, stuck)
            return [
                Decision.deny(
                    f"no policy check could start within the call's {timeout:g} s deadline: "
                    f"this session's {stuck} policy hook threads are still busy with earlier "
                    "calls; the call was refused",
                    code=ErrorCode.PLUGIN_ERROR,
                    plugin=impls[0].plugin,
                    suggestion="Try again later; if it persists, tell the user.",
                )
            ]
        plugin = running[-1]
        log.error("plugin %r: tooldeck_authorize_call did not answer within %g s", plugin, timeout)
        return [
            Decision.deny(
                f"policy plugin {plugin!r} did not answer within the call's {timeout:g} s "
                "deadline; the call was refused",
                code=ErrorCode.PLUGIN_ERROR,
                plugin=plugin,
                suggestion="Try again later; if it persists, tell the user.",
            )
        ]

    def _decisions(
        self,
        call: ToolCall,
        tool: ToolDefinition,
        info: SessionInfo,
        impls: Sequence[HookImpl],
        running: list[str] | None = None,
    ) -> list[Decision]:
        decisions: list[Decision] = []
        for impl in impls:
            if running is not None:
                running.append(impl.plugin)
            try:
                # Each hook judges its own copy of the arguments: one that rewrites them (a
                # path, a command) after the guards judged theirs would otherwise send the
                # executor arguments nobody checked, and the next hook would judge the rewrite.
                copied = _json_copy(call.arguments)
                seen = (
                    ToolCall(name=call.name, arguments=copied, id=call.id)
                    if type(call) is ToolCall
                    else attrs.evolve(call, arguments=copied)
                )
                decision = impl.call_in_order(seen, tool, info)
            except BaseException as exc:
                if _must_propagate(exc):
                    raise
                log.exception("plugin %r: tooldeck_authorize_call raised", impl.plugin)
                decision = Decision.deny(
                    f"policy plugin {impl.plugin!r} failed: {type(exc).__name__}: {exc}",
                    code=ErrorCode.PLUGIN_ERROR,
                )
            if decision is not None:
                if type(decision) is not Decision or decision.action not in _ACTIONS:
                    decision = _malformed_decision(impl.plugin, decision)
                elif decision.plugin is None:
                    decision = attrs.evolve(decision, plugin=impl.plugin)
                decisions.append(decision)
        return decisions

    async def _combine(
        self,
        call: ToolCall,
        tool: ToolDefinition,
        info: SessionInfo,
        decisions: list[Decision],
        approval_id: str | None,
        *,
        confirmed: bool = False,
    ) -> ToolResult | None:
        """None when the call may run; its refusal, or the confirmation it needs, otherwise.
        ``confirmed``: the call was judged before and its asks were answered (only a denial
        counts now)."""
        # Baseline when no policy plugin has an opinion: a level above the session's is refused
        # and a tool that asks for confirmation gets it, so disabling the policy plugin never
        # opens everything up.
        if LEVEL_ORDER[tool.security.level] > LEVEL_ORDER[info.max_level]:
            decisions.append(
                Decision.deny(
                    f"tool {tool.name!r} is {tool.security.level}; this session allows at most "
                    f"{info.max_level}",
                    plugin="tooldeck",
                )
            )
        if (
            tool.security.require_confirm or tool.security.level is SecurityLevel.DANGEROUS
        ) and tool.name not in info.always_allow and not confirmed:
            if not any(d.action == "ask" for d in decisions):
                decisions.append(
                    Decision.ask(f"tool {tool.name!r} needs confirmation", plugin="tooldeck")
                )
        denials = [d for d in decisions if d.action == "deny"]
        if denials:
            first = denials[0]
            return ToolResult(
                success=False,
                error=ToolError.of(
                    first.code or ErrorCode.PERMISSION_DENIED,
                    first.reason or "denied by policy",
                    suggestion=first.suggestion,
                    plugin=first.plugin,
                    details={
                        **first.details,
                        "denials": [
                            {"plugin": d.plugin, "code": str(d.code), "reason": d.reason}
                            for d in denials
                        ],
                    },
                ),
            )
        asks = [d for d in decisions if d.action == "ask"]
        if not asks or confirmed:
            return None
        return await self._confirm(call, tool, asks, approval_id)

    async def _confirm(
        self,
        call: ToolCall,
        tool: ToolDefinition,
        asks: Sequence[Decision],
        approval_id: str | None,
    ) -> ToolResult | None:
        store = self.deck._approvals
        reasons = tuple(f"{d.reason} (plugin {d.plugin})" for d in asks)
        if approval_id is not None:
            if self._is_revoked(approval_id):
                return ToolResult.fail(
                    ErrorCode.PERMISSION_DENIED,
                    f"the user denied approval {approval_id!r}",
                    suggestion="Do not retry this call; ask the user how to proceed.",
                )
            arguments_hash = await self._approval_hash_of(call, tool)
            if isinstance(arguments_hash, ToolResult):
                return arguments_hash
            if self.deck._closed:
                # Closed while this call was judged: its tool can no longer run, so the
                # approval is left in the store, not used up for nothing.
                return self._closed_refusal(call)
            failed = _STORE_FAILED.get()
            try:
                valid = None
                with trio.move_on_after(tool.execution.timeout_s) as late:
                    valid = await store.consume(
                        approval_id=approval_id,
                        session_id=self.id,
                        tool=tool.name,
                        arguments_hash=arguments_hash,
                    )
                if late.cancelled_caught:
                    if failed is not None:
                        failed.append(approval_id)
                    return self._provider_timeout("approval store", tool)
                if type(valid) is not bool:
                    # Only True lets the call run: a store answering "no", 1 or a dict is
                    # broken, and a broken store fails closed.
                    raise TypeError(
                        f"consume() answered {shorten(repr_safe(valid), 80)}, not a bool"
                    )
            except Exception as exc:  # fail closed: no store, no approval
                if failed is not None:
                    failed.append(approval_id)
                return self._plugin_error("approval store", exc)
            if valid:
                self._pending.pop(approval_id, None)
                used = _APPROVAL_USED.get()
                if used is not None:
                    used.append(approval_id)
                return None
            return ToolResult.fail(
                ErrorCode.PERMISSION_DENIED,
                f"approval {approval_id!r} is unknown, expired, not approved, already used, or "
                "for a different call",
                suggestion="Ask for a new approval of this exact call.",
            )
        if self.confirm is not None:
            request = ConfirmRequest(session_id=self.id, tool=tool, call=call, reasons=reasons)
            answer: bool | str = False
            # cancel() and aclose() end the wait for the user: a call waiting here must not
            # run after its session was cancelled.
            scope = trio.CancelScope(deadline=trio.current_time() + self._confirm_timeout())
            self._scopes.add(scope)
            try:
                with scope:
                    answer = await self.confirm(request)
            except Exception:
                log.exception("confirm callback raised; treating as deny")
                answer = False
            finally:
                self._scopes.discard(scope)
            if scope.cancelled_caught and scope.deadline > trio.current_time():
                return self._cancelled_before_start(call)
            if scope.deadline <= trio.current_time():
                # The deadline passed: an answer that still came (a callback that shields
                # itself, or waits where a cancellation cannot reach) is too late to count.
                return ToolResult.fail(
                    ErrorCode.PERMISSION_DENIED,
                    f"the user did not answer within {self._confirm_timeout():g} s; this call "
                    f"of {tool.name!r} did not run",
                    suggestion="Do not retry this call; ask the user how to proceed.",
                    details={"reasons": list(reasons)},
                )
            if answer == "always":
                # Bound to the definition the user was shown, not to what the name means later.
                self._allow_always(tool)
                return None
            if answer is True:
                return None
            return ToolResult.fail(
                ErrorCode.PERMISSION_DENIED,
                f"the user did not approve this call of {tool.name!r}",
                suggestion="Do not retry this call; ask the user how to proceed.",
                details={"reasons": list(reasons)},
            )
        arguments_hash = await self._approval_hash_of(call, tool)
        if isinstance(arguments_hash, ToolResult):
            return arguments_hash
        if self.deck._closed:
            return self._closed_refusal(call)
        try:
            new_id = None
            with trio.move_on_after(tool.execution.timeout_s) as late:
                new_id = await store.create(
                    session_id=self.id,
                    tool=tool.name,
                    arguments_hash=arguments_hash,
                    ttl_s=self.deck._approval_ttl_s,
                )
            if late.cancelled_caught:
                return self._provider_timeout("approval store", tool)
            if type(new_id) is not str or not new_id:
                # An id the application can neither keep nor send back: nothing was asked.
                raise TypeError(
                    f"create() answered {shorten(repr_safe(new_id), 80)}, not an approval id"
                )
        except Exception as exc:  # fail closed: the call neither runs nor waits
            return self._plugin_error("approval store", exc)
        # Entries share one TTL and are kept in insertion order: expired ones are at the front,
        # so dropping them as each new one comes keeps the map bounded by expiry at O(1) a call.
        now = time.monotonic()
        pending = self._pending
        while pending and next(iter(pending.values()))[1] <= now:
            del pending[next(iter(pending))]
        while len(pending) >= _MAX_PENDING:  # oldest first, as the store does
            del pending[next(iter(pending))]
        self._pending[new_id] = (call, time.monotonic() + self.deck._approval_ttl_s)
        return ToolResult.fail(
            ErrorCode.CONFIRMATION_REQUIRED,
            f"calling {tool.name!r} with these arguments needs the user's approval: "
            + "; ".join(reasons),
            details={
                "approval_id": new_id,
                "expires_in_s": self.deck._approval_ttl_s,
                "reasons": list(reasons),
            },
        )

    async def _approval_hash_of(self, call: ToolCall, tool: ToolDefinition) -> str | ToolResult:
        """:func:`_approval_hash` of ``call``: on the loop for arguments within the inline
        budget, else in a worker thread under the call's deadline, as their other checks are
        (16 MiB of text takes ~0.1 s to hash, lone surrogates written through ``json`` ~0.6 s:
        on the loop, every other session would wait that long, twice per approved call). The
        refusal when the session cancelled the call or the deadline passed meanwhile."""
        if _argument_excess(
            call.arguments, _INLINE_ARGUMENT_ITEMS, _INLINE_ARGUMENT_CHARS
        ) is None:
            return _approval_hash(call, tool, self.workdir)
        timeout = tool.execution.timeout_s
        digest, scope = await self._in_policy_thread(
            timeout, _approval_hash, call, tool, self.workdir
        )
        if digest is not None:
            return digest
        if scope.deadline > trio.current_time():
            return self._cancelled_before_start(call)
        return ToolResult.fail(
            ErrorCode.INVALID_ARGUMENTS,
            f"hashing the arguments for their approval took longer than the call's "
            f"{timeout:g} s deadline (or no worker thread was free); the call did not run",
            suggestion="Send smaller arguments.",
        )

    def _confirm_timeout(self) -> float:
        return self.deck._confirm_timeout_s

    def pending_approvals(self) -> dict[str, ToolCall]:
        """Calls waiting for approval (not yet expired), by approval id."""
        self._prune_pending()
        return {key: call for key, (call, _) in self._pending.items()}

    def _prune_pending(self) -> None:
        now = time.monotonic()
        for key in [k for k, (_, expires) in self._pending.items() if expires <= now]:
            del self._pending[key]

    async def approve(self, approval_id: str) -> bool:
        """Approve a pending call (it can then run once, with exactly its arguments).

        Returns False for an unknown, expired or already decided approval, for another
        session's approval (an approval id is a capability of the session that asked), and on
        a closed deck (the store is not asked); an error of the approval store (e.g. Redis
        down) propagates to the application.
        """
        return await self._resolve(approval_id, True)

    async def deny(self, approval_id: str) -> bool:
        """Deny a pending call, or take back an approval given but not used yet: a call with
        it is then refused (``PERMISSION_DENIED``), here and in any process sharing the store.

        Returns False for an unknown, expired or already used approval (too late: it ran), for
        another session's, and on a closed deck (the store is not asked: a pending approval
        there stays pending, and runs nothing unless approved). An error of the approval store
        propagates to the application; this session refuses the approval all the same.
        """
        # Recorded before the store is asked: a call of this session that reaches its approval
        # check meanwhile (a resume in flight) is refused whatever the store answers.
        now = time.monotonic()
        revoked = self._revoked
        for key in [k for k, expires in revoked.items() if expires <= now]:
            del revoked[key]
        while len(revoked) >= _MAX_PENDING:
            del revoked[next(iter(revoked))]
        revoked.pop(approval_id, None)
        revoked[approval_id] = now + self.deck._approval_ttl_s
        try:
            # Asked while the pending call is still known: a store without session_id checks
            # the session against it.
            return await self._resolve(approval_id, False)
        finally:
            self._pending.pop(approval_id, None)

    def _is_revoked(self, approval_id: str) -> bool:
        expires = self._revoked.get(approval_id)
        if expires is None:
            return False
        if expires <= time.monotonic():
            del self._revoked[approval_id]
            return False
        return True

    async def _resolve(self, approval_id: str, approved: bool) -> bool:
        if self.deck._closed:
            # A closed deck asks no provider (its store's connection is closed): nothing is
            # approved or denied in the store, where the approval stays for a deck sharing it.
            log.warning("approval %s not %s: the deck is closed", approval_id,
                        "approved" if approved else "denied")
            return False
        store = self.deck._approvals
        try:
            return bool(await store.resolve(approval_id, approved, session_id=self.id))
        except TypeError as exc:
            if "session_id" not in str(exc):
                raise
        # A third-party store written before resolve() took session_id: check the session here
        # (only approvals this session object asked for), then let the store decide.
        if approval_id not in self._pending:
            return False
        return bool(await store.resolve(approval_id, approved))

    async def resume(self, approval_id: str, *, approved: bool = True) -> ToolResult:
        """Answer a ``CONFIRMATION_REQUIRED`` and, if approved, run that exact call once.

        The pending call is used up once the approval store answered (the call ran, or was
        refused), and so is its approval, even when the call did not need it (its tool became
        always-allowed meanwhile): the store takes it back. When the store failed instead (it
        raised or did not answer in time: ``PLUGIN_ERROR`` or ``TIMEOUT``), the call did not
        run and stays pending: resume again.
        """
        self._prune_pending()
        entry = self._pending.get(approval_id)
        call = entry[0] if entry is not None else None
        if call is not None and self.deck._closed:
            return self._closed_refusal(call)
        if call is None:
            return ToolResult.fail(
                ErrorCode.PERMISSION_DENIED,
                f"no pending approval {approval_id!r} in this session",
                suggestion="Call the tool again to get a new approval request.",
            )
        if not approved:
            try:
                await self.deny(approval_id)
            except Exception:
                log.exception("approval store failed while denying %s", approval_id)
            return ToolResult.fail(
                ErrorCode.PERMISSION_DENIED,
                f"the user denied this call of {call.name!r}",
                suggestion="Do not retry this call; ask the user how to proceed.",
            )
        tool = self.deck.catalog.get(call.name)
        try:
            # Bounded like the store's other answers on a call's path: a hung store must not
            # hang the resume (the entry stays pending: the call did not run).
            with trio.move_on_after(
                tool.execution.timeout_s if tool is not None else _RESUME_STORE_TIMEOUT_S
            ) as late:
                await self.approve(approval_id)
        except Exception as exc:
            # The store's own words (a URL with its password, a key): redacted like any
            # answer that leaves the deck.
            return await self._redact(self._plugin_error("approval store", exc))
        if late.cancelled_caught:
            if tool is None:
                return ToolResult.fail(
                    ErrorCode.TIMEOUT,
                    f"the approval store did not answer within {_RESUME_STORE_TIMEOUT_S:g} s",
                    retryable=True,
                )
            return self._provider_timeout("approval store", tool)
        # One resume runs the call: the store's single use does not cover a call that no
        # longer needs the approval (the tool became always-allowed meanwhile), so a second
        # or concurrent resume of the same id must find the entry gone.
        entry = self._pending.pop(approval_id, None)
        if entry is None:
            return ToolResult.fail(
                ErrorCode.PERMISSION_DENIED,
                f"approval {approval_id!r} was already resumed",
                suggestion="Call the tool again to get a new approval request.",
            )
        failed: list[str] = []
        used: list[str] = []
        token = _STORE_FAILED.set(failed)
        used_token = _APPROVAL_USED.set(used)
        try:
            result = await self.call(call, approval_id=approval_id)
        finally:
            _APPROVAL_USED.reset(used_token)
            _STORE_FAILED.reset(token)
        if failed:
            if (
                not self._closed
                and not self._is_revoked(approval_id)
                and entry[1] > time.monotonic()
            ):
                # The store gave no answer: the approval was neither used nor refused and the
                # call did not run. A transient failure must not cost the user their approval.
                self._pending.setdefault(approval_id, entry)
        elif not used:
            # The call ran without the approval (its tool became always-allowed meanwhile), or
            # was refused before it got there: the approval, given in the store, must not run
            # the same call again later (a call with its id, here or in another process).
            await self._retire(approval_id, tool)
        return result

    async def _retire(self, approval_id: str, tool: ToolDefinition | None) -> None:
        """Take back an approval the store still holds as given, as :meth:`deny` does
        (locally too), bounded like resume's other store answers; a failure is logged."""
        try:
            with trio.move_on_after(
                tool.execution.timeout_s if tool is not None else _RESUME_STORE_TIMEOUT_S
            ):
                await self.deny(approval_id)
        except Exception:
            log.exception("approval store failed while retiring %s", approval_id)

    def _context(self, call: ToolCall, tool: ToolDefinition) -> ToolContext:
        # What the context takes from the tool is the same on every call: looked up once per
        # tool definition (a tool registered again under its name is looked up again).
        parts = self._context_parts.get(tool.name)
        if parts is None or parts[0] is not tool:
            allowed = tuple(self._expand(p) for p in tool.security.allowed_paths)
            parts = self._context_parts[tool.name] = (
                tool,
                allowed,
                self.deck.plugin_settings(tool.plugin),
                self.deck._logger(tool.name),
                {
                    "memory_mb": tool.execution.memory_mb,
                    "max_output_bytes": tool.execution.max_output_bytes,
                    # The call's time as configured (a deployment's [tools.NAME.execution]
                    # timeout_s included): a tool whose own default differs can follow it.
                    "timeout_s": tool.execution.timeout_s,
                },
            )
        context = ToolContext(
            session_id=self.id,
            workdir=self.workdir,
            call_id=call.id,
            tool_name=tool.name,
            allowed_paths=parts[1],
            attributes=self.attributes,
            settings=parts[2],
            protected_paths=self._protected_paths(),
            logger=parts[3],
            limits=parts[4],
        )
        listener = _PROGRESS.get()
        if listener is not None:  # Session.call(on_progress=...): emit reaches the caller
            context.emit = _emitter(listener, call.id, self._progress_processor(call, tool))
        return context

    def _protected_paths(self) -> tuple[str, ...]:
        """The deck's protected path rules, plus the module names a planted file would shadow
        (:func:`tooldeck._imports.shadow_rules`), the home-folder rules again where a home
        folder lies below the workdir's top (:func:`_home_rules`) and the trust store where it
        lies in the workdir (:func:`_trust_store_rules`). Worked out once per workdir (an
        application may move the session)."""
        workdir = self.workdir
        known = self._shadowing
        if known is not None and known[0] == workdir:
            return known[1]
        extra: tuple[str, ...] = ()
        if isinstance(workdir, str):
            extra = (
                *shadow_rules(workdir),
                *_home_rules(workdir, self.deck.protected_paths),
                *_trust_store_rules(workdir),
            )
        rules = (
            normalise_rules((*self.deck.protected_paths, *extra))
            if extra
            else self.deck.protected_paths
        )
        self._shadowing = (workdir, rules)
        return rules

    def _progress_processor(
        self, call: ToolCall, tool: ToolDefinition
    ) -> Callable[[str], str | None]:
        """The ``tooldeck_process_result`` chain over one progress message (at most
        ``PROGRESS_MESSAGE_MAX`` characters, so inline on the loop), as the data of a result:
        the policy's redaction reaches progress as it reaches results. A processor that fails
        or turns the message into anything but text withholds it (None)."""

        def process(message: str) -> str | None:
            result = ToolResult.ok(message)
            for impl in self.deck._impls("tooldeck_process_result"):
                try:
                    changed = impl.call_in_order(call, tool, result)
                except BaseException as exc:
                    if _must_propagate(exc):
                        raise
                    log.exception("plugin %r: tooldeck_process_result raised on progress",
                                  impl.plugin)
                    return None
                if changed is not None:
                    result = changed
            if not isinstance(result, ToolResult) or not result.success:
                return None
            return result.data if isinstance(result.data, str) else None

        return process

    async def _execute_scoped(self, call: ToolCall, tool: ToolDefinition) -> ToolResult:
        """Run the call with a cancel scope of the session's, for executors without their own
        per-call cancellation (``cancel_session``)."""
        executor = self.deck._executor
        context = self._context(call, tool)
        scope = trio.CancelScope()
        self._scopes.add(scope)
        result: ToolResult | None = None
        try:
            with scope:
                result = await executor.run(tool, call, context)
        except Exception as exc:
            return self._plugin_error("executor", exc)
        except BaseException as exc:
            if _must_propagate(exc):
                raise
            return self._tool_base_exception(tool, exc)
        finally:
            self._scopes.discard(scope)
        if result is None or scope.cancelled_caught:
            return ToolResult.fail(
                ErrorCode.CANCELLED, f"the call of {tool.name!r} was cancelled by the session"
            )
        return result

    def _expand(self, template: str) -> str:
        expanded = template.format(
            workdir=self.workdir, home=os.path.expanduser("~"), tmp=os.environ.get("TMPDIR", "/tmp")
        )
        return os.path.realpath(expanded)

    async def _finish(
        self, call: ToolCall, tool: ToolDefinition, result: ToolResult
    ) -> ToolResult:
        """Run the ``tooldeck_process_result`` chain (redaction) over any result of a known tool.

        A hook whose function carries a ``tooldeck_offload`` predicate that holds for the result
        (the policy's redaction, for big results) runs in a worker thread under the call's
        deadline, so one huge output never stalls the other sessions on the event loop. A hook
        with neither that predicate nor ``@nonblocking`` (a custom processor may call a service)
        always runs in a worker thread under the deadline; a ``@nonblocking`` one on the loop.
        """
        for impl in self.deck._impls("tooldeck_process_result"):
            try:
                offload = getattr(impl.function, "tooldeck_offload", None)
                # Asked for every result: a failure's data is None, but its message, details
                # and metadata can be megabytes (the predicate is cheap on small results).
                if offload is not None:
                    threaded = offload(result)
                else:
                    threaded = not is_nonblocking(impl.function)
                if threaded:
                    changed = await self._process_in_thread(impl, call, tool, result)
                    if isinstance(changed, _Withheld):
                        return changed.result
                else:
                    changed = impl.call_in_order(call, tool, result)
            except BaseException as exc:
                if _must_propagate(exc):
                    raise
                log.exception("plugin %r: tooldeck_process_result raised", impl.plugin)
                return ToolResult.fail(
                    ErrorCode.PLUGIN_ERROR,
                    f"result processing by plugin {impl.plugin!r} failed "
                    f"({type(exc).__name__}); the result was withheld",
                )
            if changed is not None:
                if not isinstance(changed, ToolResult):
                    # A str, a dict, a coroutine: what the processor meant is unknown, and the
                    # result it was given may not go out unprocessed either.
                    log.error("plugin %r: tooldeck_process_result answered %s, not a "
                              "ToolResult; the result was withheld", impl.plugin,
                              type(changed).__name__)
                    if inspect.iscoroutine(changed):
                        changed.close()
                    return ToolResult.fail(
                        ErrorCode.PLUGIN_ERROR,
                        f"result processing by plugin {impl.plugin!r} answered "
                        f"{type(changed).__name__}, not a ToolResult; the result was withheld",
                    )
                result = changed
        return result

    async def _in_result_thread(
        self, tool: ToolDefinition, function: Callable[..., Any], *args: Any
    ) -> tuple[Literal["done", "cancelled", "late"], Any]:
        """``function(*args)`` in a worker thread of the result pool, under the tool's timeout
        (``call_deadline()`` is set inside): ``("done", value)``; ``("cancelled", None)`` when
        the session cancelled the call meanwhile; ``("late", None)`` past the deadline, the
        thread abandoned."""
        timeout = tool.execution.timeout_s
        scope = trio.CancelScope(deadline=trio.current_time() + timeout)
        self._scopes.add(scope)
        token = CALL_DEADLINE.set(time.monotonic() + timeout)
        try:
            with scope:
                return "done", await trio.to_thread.run_sync(
                    function, *args, abandon_on_cancel=True, limiter=self.deck._result_threads
                )
        finally:
            CALL_DEADLINE.reset(token)
            self._scopes.discard(scope)
        return ("cancelled" if scope.deadline > trio.current_time() else "late"), None

    async def _normalised_in_thread(self, tool: ToolDefinition, result: ToolResult) -> ToolResult:
        """:func:`_normalised` of a result with very many items, in a worker thread under the
        tool's timeout: walking millions of items (a second or more) on the event loop would
        stall every other session. Past the deadline the walk is abandoned and the call fails
        with TIMEOUT (nothing unchecked goes out)."""
        state, checked = await self._in_result_thread(
            tool, _normalised, result, tool.execution.max_output_bytes
        )
        if state == "done":
            return checked  # type: ignore[no-any-return]
        if state == "cancelled":
            return ToolResult.fail(
                ErrorCode.CANCELLED,
                f"the call of {tool.name!r} was cancelled by the session while its result was "
                "being checked; the result was withheld",
            )
        return ToolResult.fail(
            ErrorCode.TIMEOUT,
            f"checking the result of {tool.name!r} (plain JSON within its size limit) took "
            f"longer than the call's {tool.execution.timeout_s:g} s timeout; the result was "
            "withheld",
            suggestion="Ask for less output (a narrower query, a page) and try again.",
        )

    async def _process_in_thread(
        self, impl: HookImpl, call: ToolCall, tool: ToolDefinition, result: ToolResult
    ) -> ToolResult | None | _Withheld:
        """One ``tooldeck_process_result`` hook in a worker thread, under the tool's timeout.

        Past the deadline the thread is abandoned (the hook sees ``call_deadline()`` and stops
        on its own) and the result is withheld: an unredacted result never goes out.
        """
        state, changed = await self._in_result_thread(
            tool, impl.call_in_order, call, tool, result
        )
        if state == "done":
            return changed  # type: ignore[no-any-return]
        if state == "cancelled":
            return _Withheld(
                ToolResult.fail(
                    ErrorCode.CANCELLED,
                    f"the call of {tool.name!r} was cancelled by the session while its result "
                    "was being processed; the result was withheld",
                )
            )
        timeout = tool.execution.timeout_s
        log.error(
            "plugin %r: tooldeck_process_result took longer than %g s", impl.plugin, timeout
        )
        return _Withheld(
            ToolResult.fail(
                ErrorCode.TIMEOUT,
                f"processing the result of {tool.name!r} (plugin {impl.plugin!r}) "
                f"took longer than the call's {timeout:g} s timeout; the result was withheld",
                suggestion="Ask for less output (a smaller file, a narrower command) and try "
                "again.",
            )
        )


def _register_with_deadline(
    impl: HookImpl, register: Callable[..., Any], settings: Mapping[str, Any], deadline: float
) -> bool:
    """Call a register hook on a daemon thread; whether it returned within ``deadline`` seconds.

    What the hook raised is raised here. A hook still running at the deadline is abandoned:
    the thread is a daemon, so it cannot keep the process from exiting either.
    """
    outcome: list[BaseException | None] = []
    context = contextvars.copy_context()

    def run() -> None:
        try:
            context.run(impl, register=register, settings=settings)
        except BaseException as exc:  # handed to the loading thread, which decides
            outcome.append(exc)
        else:
            outcome.append(None)

    thread = threading.Thread(target=run, name=f"tooldeck-register-{impl.plugin}", daemon=True)
    thread.start()
    thread.join(deadline)
    if not outcome:
        return False
    if outcome[0] is not None:
        raise outcome[0]
    return True
