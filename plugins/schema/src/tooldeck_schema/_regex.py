"""Time-safe regular expressions for JSON Schema ``pattern`` and ``patternProperties``.

A tool's schema may come from outside the code base (a remote MCP server, ``Deck.add_tools``),
and the strings it is matched against come from the model: a backtracking engine (Python's
``re``, which fastjsonschema uses) lets ``^(a+)+$`` against ``"a" * 30 + "!"`` stall the event
loop for minutes. Every pattern therefore runs on RE2 (``google-re2``), whose matching time is
linear in the input whatever the pattern.

RE2 has no backreferences and no lookaround. A pattern that needs them keeps Python's ``re``
(the constraint is still enforced, never silently dropped) only when it has no backtracking
hazard: no quantified group that itself contains a quantifier or an alternation (``(a+)+``,
``(a|aa)+``, ``(.*a){20}``, ``(\\w+\\s?)*``). Such a pattern is refused with
:class:`UnsafePatternError` (the register stage reports it as a problem of the tool), and the
values checked by the ``re`` fallback are bounded to :data:`FALLBACK_MAX_LENGTH` characters, which
bounds the polynomial blow-ups the structural check does not catch.
"""

from __future__ import annotations

import functools
import re
from typing import Any

try:  # the Python wrapper's match path costs ~4 µs; the extension's own Match ~0.5 µs
    import re2 as _re2_public  # type: ignore[import-untyped]
    from re2 import _re2  # type: ignore[import-untyped]
except ImportError:  # pragma: no cover - google-re2 is a dependency of this distribution
    _re2_public = None
    _re2 = None

__all__ = [
    "FALLBACK_MAX_LENGTH",
    "SafeRegex",
    "UnsafePatternError",
    "safe_regex",
]

#: Longest string a pattern RE2 cannot run is matched against (longer ones do not match).
FALLBACK_MAX_LENGTH = 4096


class UnsafePatternError(ValueError):
    """A pattern RE2 cannot run and whose structure could backtrack catastrophically."""


def _re2_options() -> Any:
    assert _re2_public is not None
    options = _re2_public.Options()
    options.log_errors = False  # RE2 would print every refused pattern to stderr
    options.never_capture = True  # only "does it match" is asked: no spans to compute
    return options


class SafeRegex:
    """A compiled pattern with the ``search(text)`` that fastjsonschema's generated code calls.

    ``engine`` is ``"re2"`` (linear time) or ``"re"`` (the bounded fallback, see the module).
    ``search`` returns a bool, which is all the generated code and the explanations need.
    """

    __slots__ = ("pattern", "engine", "_regexp", "_anchor", "_python")

    def __init__(self, pattern: str) -> None:
        self.pattern = pattern
        self._regexp: Any = None
        self._python: re.Pattern[str] | None = None
        self._anchor: Any = None
        if _re2 is not None:
            regexp = _re2.RE2(pattern.encode("utf-8", "surrogatepass"), _re2_options())
            if regexp.ok():
                self.engine = "re2"
                self._regexp = regexp
                self._anchor = _re2.RE2.Anchor.UNANCHORED
                return
            reason = regexp.error()
            reason = reason.decode() if isinstance(reason, bytes) else str(reason)
        else:  # pragma: no cover
            reason = "google-re2 is not installed"
        hazard = backtracking_hazard(pattern)
        if hazard is not None:
            raise UnsafePatternError(
                f"pattern {pattern!r} needs Python's backtracking regex engine (RE2: {reason}) "
                f"and {hazard}, which can take exponential time on a crafted value; rewrite it "
                "without backreferences/lookaround, or without nested quantifiers"
            )
        # JSON Schema's `$` is the end of the string; Python's also matches before a final "\n".
        self.engine = "re"
        self._python = re.compile(_dollar_to_end(pattern))

    def search(self, text: str) -> bool:
        """Whether the pattern matches somewhere in ``text`` (JSON Schema semantics)."""
        if self._regexp is not None:
            data = text.encode("utf-8", "surrogatepass")
            return bool(self._regexp.Match(self._anchor, data, 0, len(data))[0][0] >= 0)
        assert self._python is not None
        if len(text) > FALLBACK_MAX_LENGTH:
            return False
        return self._python.search(text) is not None

    def __repr__(self) -> str:
        return f"SafeRegex({self.pattern!r}, engine={self.engine!r})"


@functools.lru_cache(maxsize=4096)
def safe_regex(pattern: str) -> SafeRegex:
    """The :class:`SafeRegex` of ``pattern`` (cached).

    :raises UnsafePatternError: RE2 cannot run it and it could backtrack catastrophically.
    :raises re.error: it is not a regular expression at all.
    """
    return SafeRegex(pattern)


def _dollar_to_end(pattern: str) -> str:
    # The rewrite fastjsonschema applies before handing a pattern to `re`.
    return re.sub(r"(?<!\\)\$", r"\\Z", pattern)


def backtracking_hazard(pattern: str) -> str | None:
    """Why ``pattern`` could backtrack exponentially in Python's ``re``, or None.

    The hazard is the shape behind every classic ReDoS: a repeated sub-pattern (``+``, ``*``,
    ``{n,}``, ``{n,m}`` with m > 1) that can itself match in several ways, because it contains
    another repeat or an alternation. Unparsable patterns are reported as hazards too.
    """
    try:
        from re import _parser as sre_parse  # type: ignore[attr-defined]
    except ImportError:  # pragma: no cover - Python < 3.11
        import sre_parse  # type: ignore[no-redef]
    try:
        tree = sre_parse.parse(pattern)
    except Exception as exc:  # not a Python regex either
        return f"cannot be parsed ({exc})"
    constants = sre_parse

    def repeats(items: Any, inside_repeat: bool) -> str | None:
        for op, arg in items:
            if op in (constants.MAX_REPEAT, constants.MIN_REPEAT, getattr(
                constants, "POSSESSIVE_REPEAT", object()
            )):
                low, high, body = arg
                repeated = high is constants.MAXREPEAT or high > 1
                if inside_repeat and repeated:
                    return "has a quantifier inside a quantified group"
                found = repeats(body, inside_repeat or repeated)
                if found:
                    return found
            elif op is constants.BRANCH:
                if inside_repeat:
                    return "has an alternation inside a quantified group"
                for branch in arg[1]:
                    found = repeats(branch, inside_repeat)
                    if found:
                        return found
            elif op is constants.SUBPATTERN:
                found = repeats(arg[-1], inside_repeat)
                if found:
                    return found
            elif op in (constants.ASSERT, constants.ASSERT_NOT):
                found = repeats(arg[1], inside_repeat)
                if found:
                    return found
            elif op is constants.GROUPREF_EXISTS:
                for branch in arg[1:]:
                    if branch is not None:
                        found = repeats(branch, inside_repeat)
                        if found:
                            return found
            elif op is getattr(constants, "ATOMIC_GROUP", None):
                found = repeats(arg, inside_repeat)
                if found:
                    return found
        return None

    return repeats(tree, False)
