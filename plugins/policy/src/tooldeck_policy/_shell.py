"""The shell guard: one plain command with its arguments, nothing the shell would run besides it.

The guard is a **heuristic in front of the sandbox**, not a boundary: it refuses what it can see
is more than one plain command and asks about what it can see is destructive, so that the user's
approval and the model's retries are about the command really run. What a program does once it
runs (a Makefile, a script, a test suite) is bounded by the sandbox, not by this module.

**Fail closed.** A command line is read by a small POSIX-shell tokenizer written for this guard
(no third-party parser): quotes, backslash escapes, line continuations, ``$NAME`` expansions,
globs, tilde and brace expansion are modelled exactly for ``sh`` (dash) and bash. Everything a
plain command does not need is recognised and refused (``injection``) with a reason: operators
(``;`` ``&&`` ``||`` ``&`` ``|`` unless pipes are allowed, newlines), redirections and
here-documents, ``$(...)``, backticks, ``${...}``, ``$((...))``, ``$'...'`` and ``$"..."`` (read
differently by dash and bash), comments, subshells, groups, compound commands, function
definitions, unbalanced quotes, a trailing backslash, brace expansion (bash expands it, dash does
not), an unquoted ``$IFS`` (it splits the word it is in), control characters (NUL, CR, ...),
invisible Unicode and look-alike quotes or operators. When
the tokenizer and a shell could disagree, the command is refused rather than guessed at.

**Program position.** A glob (``*``, ``?``, ``[...]``), a tilde or a ``$VAR`` in the place of a
program is refused: what would run is decided by the file system or the environment, not by the
text. Program names given by path (``/bin/rm``, ``/usr/bin/../bin/rm``, ``./rm``) are judged by
their basename.

**Wrappers.** Programs that run another program (``env``, ``sudo``, ``timeout``, ``nice``,
``xargs``, ``flock``, ``unshare``, ``chroot``, ``find -exec``, ``git`` subcommands, ...) are looked
through with a table that knows which of their options take values, recursively up to
:data:`MAX_DEPTH`; so are profilers and launchers (``perf stat``, ``runcon``, ``bwrap``,
``setarch``, ``npx``, ``npm exec``, ``pnpm exec``, ``bunx``, ...: :data:`_RUNNERS`). A wrapper
that starts a shell when given no command (``sudo -s``, ``chroot DIR``, ``unshare``) is refused:
the shell reads the tool's standard input. Programs that run a *string* (``sh -c``,
``script -c``, ``flock -c``, ``su -c``, ``watch``, ``env -S``, ``git rebase --exec``,
``npx -c``, ``man -P``, ``split --filter``) are refused as nested shells, and the string is
analysed too; options that run a program (``sort --compress-program``, ``tar -I``, ``rsync -e``,
``apt-get -o ...Pre-Invoke``) are refused.
Interpreters' inline code (``python -c``, ``perl -e``, ``awk 'BEGIN{...}'``, ``node -e``) can run
anything: inline code that names a way to start a program (``system``, ``exec``, ``popen``,
backticks, ``subprocess``, ``child_process``, ``| getline``) or to hide one (``eval``,
``__import__``), and an interpreter reading its code from stdin, are ``destructive``: the user must
confirm that very call even for an always-allowed tool, and command strings found in the code
(``system("rm -rf /")``) are analysed too. A script or program file that is the standard input
(``-``, ``/dev/stdin``, ``/dev/fd/N``, ``/proc/self/fd/N``, anything under ``/dev`` or ``/proc``)
counts as code read from stdin. Other inline code (``python -c 'print(1)'``) is left to the tool's
tier and the sandbox. A sed script with the ``e`` command or flag, and a shell reading its script
from stdin, are refused. Assignments of variables that decide which code runs (``LD_PRELOAD``,
``BASH_ENV``, ``ENV``, ``PROMPT_COMMAND``, ``GIT_CONFIG_*``, ...) are refused wherever the guard
finds them: before a command, through ``env``/``sudo``, after ``export``, as ``make`` arguments.
A ``$VAR`` that starts a word where options or code are read (``python3 "$X"``, ``sh $X``,
``awk "$X"``, ``git -c "$X"``, ``tar "$X"``, anywhere for GNU sed, inside inline code) may be
``-c CODE`` or a configuration: ``destructive``. So are the words ``xargs`` appends from its
input (``xargs python3 -c`` is code read from stdin, ``xargs rm`` a hidden deletion).
``git -c`` keys and ``git config`` keys that run programs (``core.fsmonitor``, ``core.sshCommand``,
``alias.*``, ``protocol.*.allow``, ...) and ``git --config-env`` are refused.
:func:`code_bearing_env_name` tells a tool that sets variables itself which names to refuse. Long
options are matched by their unambiguous prefixes too (``rm --rec``), as GNU getopt_long does.

**Destructive meaning** (``destructive``: run only once the user confirmed this call): recursive
``rm`` (or ``find -delete`` / ``find -exec rm``) of the root, a top-level or system directory, a
home (``~``, ``$HOME``) or a tree in one (``~/.ssh``, ``/home/ada/src``) outside the working
directory, everything here (``*``, ``.``, or the working directory by its absolute
path when the caller passes ``workdir``), or outside the working directory (``..``), with paths
normalised (``//``, ``/.``, ``/usr/..``) and globs read as what they may match; ``mv`` of everything
here out of the working directory; ``rm``, ``chmod`` or ``find`` with a word taken from a variable
(it may split into ``-rf /`` or ``-delete``); git commands that lose work no commit holds or
rewrite a remote (``clean -f``, ``reset --hard``, ``checkout -- PATHS``, ``restore``, ``stash
drop``, ``branch -D``, ``push --force``, ``reflog expire``, ``gc --prune=now``); writes
to disk devices (``dd of=``, ``cp``/``tee``/``mv`` onto ``/dev/sd*``, ``/dev/nvme*``, ...,
redirections), ``mkfs*``, ``wipefs``, partitioners, ``shred``, ``truncate`` or copies onto system
files, ``chmod``/``chown -R`` of the system, fork bombs, shutdown, ``kill -9 -1``, downloads piped
into a shell, ``nc -e``.

An argv list (``subprocess.run(argv)``, no shell) is not tokenized: its elements are literal bytes.
The wrapper, interpreter and destructive checks apply to it all the same.
"""

from __future__ import annotations

import contextvars
import fnmatch
import functools
import os
import re
import unicodedata
from collections.abc import Callable, Iterable, Sequence

import attrs

__all__ = [
    "MAX_COMMAND_CHARS",
    "MAX_DEPTH",
    "CommandVerdict",
    "analyze_command",
    "code_bearing_env_name",
]

#: Longer command lines are refused unread (keep the guard cheap and bounded).
MAX_COMMAND_CHARS = 16_384
#: An argv list run without a shell is judged word by word (linear): refused unread past these.
#: Above any real program's argument list, and above the shell pack's own limits (4,096 items,
#: 512 KiB), which then answer TOO_LARGE themselves.
MAX_ARGV_ITEMS = 16_384
MAX_ARGV_CHARS = 1024 * 1024
#: Wrappers and nested scripts are followed this deep; deeper nesting is refused.
MAX_DEPTH = 6


def _reasons(values: Iterable[str]) -> tuple[str, ...]:
    return tuple(values)


@attrs.frozen
class CommandVerdict:
    """What the shell guard found in a command.

    ``injection``: reasons the command does more than run one program (refuse it).
    ``destructive``: reasons it may destroy the system or data (run it only when confirmed).
    """

    injection: tuple[str, ...] = attrs.field(default=(), converter=_reasons)
    destructive: tuple[str, ...] = attrs.field(default=(), converter=_reasons)

    @property
    def clean(self) -> bool:
        """True when nothing was found."""
        return not self.injection and not self.destructive


class _Findings:
    """Reasons collected over one analysis; ``sub`` gives a view that prefixes its reasons."""

    __slots__ = ("destructive", "injection", "prefix")

    def __init__(self) -> None:
        self.injection: list[str] = []
        self.destructive: list[str] = []
        self.prefix = ""

    def sub(self, prefix: str) -> _Findings:
        child = _Findings.__new__(_Findings)
        child.injection, child.destructive = self.injection, self.destructive
        child.prefix = self.prefix + prefix
        return child

    def inject(self, reason: str) -> None:
        reason = self.prefix + reason
        if reason not in self.injection:
            self.injection.append(reason)

    def destroy(self, reason: str) -> None:
        reason = self.prefix + reason
        if reason not in self.destructive:
            self.destructive.append(reason)

    def verdict(self) -> CommandVerdict:
        return CommandVerdict(self.injection, self.destructive)


# -------------------------------------------------------------------------
# entry point
# -------------------------------------------------------------------------


def analyze_command(
    command: str | Sequence[str],
    allow_pipes: bool = False,
    *,
    through_shell: bool = False,
    workdir: str | None = None,
) -> CommandVerdict:
    """Find shell injection and destructive intent in ``command``.

    ``command`` is a command line (read as ``sh -c`` would read it) or an argv list. An argv list
    is taken to be executed directly, without a shell (``subprocess.run(argv)``): its elements are
    never re-parsed, so ``;`` or ``|`` inside one is a literal character and not flagged. The list
    is still checked for NUL bytes, for programs that run a string as code (``bash -c SCRIPT``:
    nesting is flagged and the script is analysed as a command line), for wrappers, interpreters'
    inline code and destructive commands. Pass ``through_shell=True`` for a tool that joins the
    list with spaces into a shell command line: the joined line is then analysed as a string.

    ``allow_pipes`` lets ``|`` through (other chaining stays refused). ``workdir`` is the
    absolute working directory the command runs in: with it, absolute paths are judged like the
    relative ones they name (``rm -r /work/proj/*`` deletes everything here, ``rm -r /work/proj``
    or ``/work`` the working directory itself), and moving everything here out of it is
    destructive. Never raises.
    """
    parts = tuple(_components(workdir)[1]) if workdir and workdir.startswith("/") else None
    token = _WORKDIR.set(parts)
    try:
        return _analyze(command, allow_pipes, through_shell, parts)
    finally:
        _WORKDIR.reset(token)


def _analyze(
    command: str | Sequence[str],
    allow_pipes: bool,
    through_shell: bool,
    workdir: tuple[str, ...] | None,
) -> CommandVerdict:
    if isinstance(command, str):
        if len(command) > MAX_COMMAND_CHARS and len(command.rstrip(" \t\n")) > MAX_COMMAND_CHARS:
            # Refused unread, and before the cache: its 2,048 entries would otherwise keep up
            # to 2,048 such lines alive (gigabytes, one model's megabyte at a time).
            return _too_long()
        return _analyze_string(command, allow_pipes, workdir)
    findings = _Findings()
    try:
        argv = list(command)
    except TypeError:
        findings.inject("a command must be a string or a list of strings")
        return findings.verdict()
    # Bounded before any per-element work (a list of a million words was walked in full, and
    # passed). Through a shell the words are one command line, bounded as one; run directly
    # they are arguments, which may be long (a commit message, a JSON body) without being a
    # shell's to parse, so their bounds are larger: still refused unread past them.
    if len(argv) > (MAX_COMMAND_CHARS if through_shell else MAX_ARGV_ITEMS):
        return _too_long(argv=not through_shell)
    if not all(isinstance(a, str) for a in argv):
        findings.inject("every argument of an argv list must be a string")
        return findings.verdict()
    chars = sum(map(len, argv)) + len(argv) - 1
    if through_shell:
        if chars > MAX_COMMAND_CHARS:
            return _too_long()
        return _analyze_string(" ".join(argv), allow_pipes, workdir)
    if chars > MAX_ARGV_CHARS:
        return _too_long(argv=True)
    if any("\x00" in a for a in argv):
        findings.inject("an argument contains a NUL byte")
    _check_command([_Word.literal(a) for a in argv], findings, allow_pipes, 0)
    return findings.verdict()


def _too_long(*, argv: bool = False) -> CommandVerdict:
    """The verdict on a command over the guard's bounds: refused unread."""
    if argv:
        return CommandVerdict(injection=(
            f"the argument list holds more than {MAX_ARGV_ITEMS} items or "
            f"{MAX_ARGV_CHARS} characters",
        ))
    return CommandVerdict(injection=(f"the command is longer than {MAX_COMMAND_CHARS} characters",))


@functools.lru_cache(maxsize=2048)
def _analyze_string(
    command: str, allow_pipes: bool, workdir: tuple[str, ...] | None
) -> CommandVerdict:
    # Cached: agents repeat commands (tests, builds), and the tokenizer is pure Python. The
    # working directory is part of the key (it changes what an absolute path means); the
    # analysis reads it from _WORKDIR, set by analyze_command.
    findings = _Findings()
    # A trailing line break ends the one command; it does not start another.
    _analyze_line(command.rstrip(" \t\n"), allow_pipes, findings, 0)
    return findings.verdict()


# -------------------------------------------------------------------------
# characters the tokenizer will not guess about
# -------------------------------------------------------------------------

_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")
_SHELL_META = frozenset(";&|<>()$`\\\"' \t\n*?[]{}~#=%!")
# Quotes a reader (or a model) takes for shell quotes; the shell sees plain characters.
_LOOKALIKE_QUOTES = frozenset(
    "\u2018\u2019\u201a\u201b\u201c\u201d\u201e\u201f\u2032\u2033\u2035\u2036\u00b4\u02b9"
    "\u02ba\u02bb\u02bc\u02bd\u02c8\u02ca\u02cb\u2039\u203a\u00ab\u00bb\u300c\u300d\u301d"
    "\u301e\u301f\uff02\uff07\uff40"
)


def _scan_chars(line: str, findings: _Findings) -> None:
    for match in _CONTROL.finditer(line):
        char = match.group()
        if char == "\x00":
            findings.inject("the command contains a NUL byte")
        elif char == "\r":
            findings.inject("a carriage return can hide part of the command or end a line")
        else:
            findings.inject(f"the control character U+{ord(char):04X} has no place in a command")
    if line.isascii():
        return
    for char in set(line):
        if char.isascii():
            continue
        category = unicodedata.category(char)
        if category in ("Cc", "Cf", "Cs", "Co", "Cn", "Zs", "Zl", "Zp"):
            findings.inject(
                f"the invisible or unusual character U+{ord(char):04X} "
                f"({unicodedata.name(char, category)}) can make the command read differently "
                "than it runs"
            )
        elif char in _LOOKALIKE_QUOTES or (
            any(c in _SHELL_META for c in unicodedata.normalize("NFKC", char))
        ):
            findings.inject(
                f"{char!r} (U+{ord(char):04X}) looks like a shell quote or operator, but the shell "
                "treats it as a plain character; use ASCII quotes"
            )


# -------------------------------------------------------------------------
# words and the tokenizer
# -------------------------------------------------------------------------

_GLOB = frozenset("*?[")
# Quoted glob characters are literal: in the path form of a word they become this placeholder.
_QUOTED_GLOB = str.maketrans({"*": "\x02", "?": "\x02", "[": "\x02"})
_UNKNOWN = "\x01"  # a variable's value, unknown to the guard
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*\+?=")
_PLAIN_RUN = re.compile(r"[^ \t\n;&|<>()\\'\"$`*?\[~{}]+")
_DQ_RUN = re.compile(r'[^"\\$`]+')
_BRACE_SHAPE = str.maketrans({c: "x" for c in map(chr, range(128)) if c not in "{},."})


@attrs.define(slots=True)
class _Word:
    """One word as the shell sees it after quote removal.

    ``value``: the text after quote removal (``$NAME`` kept as written); ``path``: the same for
    path checks, with unquoted glob characters kept, quoted ones neutralised, ``$HOME`` and tilde
    as ``~`` and other variables as an unknown marker; ``glob``: an unquoted ``*``, ``?`` or
    ``[``; ``expansion``: the first expansion (``$X``, ``~``) or ""; ``quoted``: some part was
    quoted or escaped; ``shell``: the word came from a command line (not an argv list).
    """

    value: str
    path: str
    glob: bool = False
    expansion: str = ""
    quoted: bool = False
    shell: bool = False
    brace: bool = False

    @classmethod
    def literal(cls, text: str) -> _Word:
        return cls(text, text.translate(_QUOTED_GLOB))


class _Builder:
    __slots__ = ("bracket", "expansion", "glob", "path", "quoted", "shape", "value")

    def __init__(self) -> None:
        self.value: list[str] = []
        self.path: list[str] = []
        self.shape: list[str] = []
        self.glob = False
        self.bracket = False  # an unquoted '[' seen: a later ']' makes the word a glob
        self.quoted = False
        self.expansion = ""

    def plain(self, text: str) -> None:
        self.value.append(text)
        self.path.append(text)
        self.shape.append(text.translate(_BRACE_SHAPE))
        if not self.glob and ("*" in text or "?" in text):
            self.glob = True
        if "[" in text:
            self.bracket = True
            if "]" in text[text.index("[") :]:
                self.glob = True
        elif self.bracket and "]" in text:
            self.glob = True

    def quote(self, text: str) -> None:
        self.quoted = True
        self.value.append(text)
        self.path.append(text.translate(_QUOTED_GLOB))
        self.shape.append("x")

    def param(self, name: str, shown: str) -> None:
        self.value.append(shown)
        self.path.append("~" if name == "HOME" else _UNKNOWN)
        self.shape.append("x")
        self.expansion = self.expansion or shown

    def build(self) -> _Word:
        shape = "".join(self.shape)
        return _Word(
            "".join(self.value),
            "".join(self.path),
            glob=self.glob,
            expansion=self.expansion,
            quoted=self.quoted,
            shell=True,
            brace="{" in shape and _has_brace_expansion(shape),
        )


def _has_brace_expansion(shape: str) -> bool:
    """``{a,b}`` or ``{1..3}`` with unquoted braces: bash expands it, dash does not.

    One pass: each open brace remembers whether a ',' or '..' appeared at its own level.
    """
    stack: list[bool] = []
    for i, c in enumerate(shape):
        if c == "{":
            stack.append(False)
        elif not stack:
            continue
        elif c == "}":
            if stack.pop():
                return True
        elif c == "," or (c == "." and shape.startswith("..", i)):
            stack[-1] = True
    return False


_OPERATORS = sorted(
    [";;&", ";;", ";&", ";", "&&", "&>>", "&>", "&", "||", "|&", "|", "<<<", "<<-", "<<", "<>",
     "<&", "<(", "<", ">>", ">&", ">|", ">(", ">", "(", ")"],
    key=len,
    reverse=True,
)
_OPERATOR_START = frozenset(";&|<>()")
_REDIRECTS = frozenset(
    {"<", ">", ">>", ">|", "<>", "<&", ">&", "&>", "&>>", "<<", "<<-", "<<<"}
)
_WRITE_REDIRECTS = frozenset({">", ">>", ">|", "<>", "&>", "&>>", ">&"})
_SEPARATORS = {
    ";": "';' runs a second command",
    "&&": "'&&' chains a second command",
    "||": "'||' chains a second command",
    "&": "'&' runs a command in the background and starts another",
    "\n": "a newline separates a second command",
    ";;": "';;' belongs to a case statement",
    ";&": "';&' belongs to a case statement",
    ";;&": "';;&' belongs to a case statement",
    "|&": "'|&' pipes output and errors into a second command (bash only)",
}


class _Op(str):
    """An operator token (a str subclass, so words and operators tell apart by type)."""


class _Lexer:
    """Splits one command line into words and operators; reports what is not a plain word."""

    def __init__(self, line: str, findings: _Findings) -> None:
        self.line = line
        self.n = len(line)
        self.f = findings
        self.bodies: list[str] = []  # bodies of substitutions, analysed for destructive intent
        self.broken = False

    def tokens(self) -> list[_Word | _Op]:
        line, n = self.line, self.n
        out: list[_Word | _Op] = []
        i = 0
        while i < n and not self.broken:
            c = line[i]
            if c in " \t":
                i += 1
            elif c == "\\" and line.startswith("\n", i + 1):
                i += 2  # a line continuation disappears before the shell splits words
            elif c == "\n":
                out.append(_Op("\n"))
                i += 1
            elif c == "#":
                self.f.inject(
                    "'#' starts a comment: the shell ignores the rest of the line, which a reader "
                    "may not notice"
                )
                end = line.find("\n", i)
                i = n if end < 0 else end
            elif c in _OPERATOR_START:
                op = next(o for o in _OPERATORS if line.startswith(o, i))
                # '2>' and '2>&1': a word of digits right before a redirection is its fd.
                if op[0] in "<>" and out and isinstance(out[-1], _Word):
                    prev = out[-1]
                    if prev.value.isdigit() and not prev.quoted and i > 0 and line[i - 1].isdigit():
                        out.pop()
                out.append(_Op(op))
                i += len(op)
            else:
                word, i = self.word(i)
                out.append(word)
        return out

    def word(self, i: int) -> tuple[_Word, int]:
        line, n, b = self.line, self.n, _Builder()
        start = i
        while i < n:
            c = line[i]
            if c in " \t\n" or c in _OPERATOR_START:
                break
            if c == "\\":
                if i + 1 >= n:
                    self.f.inject("a backslash ends the command; shells differ on what it means")
                    i += 1
                    break
                nxt = line[i + 1]
                if nxt == "\n":
                    i += 2
                    continue
                if nxt in "nr":
                    self.f.inject(
                        f"'\\{nxt}' outside quotes is a line break in disguise (the shell drops "
                        "the backslash; another decoder would split the command there)"
                    )
                b.quote(nxt)
                i += 2
            elif c == "'":
                end = line.find("'", i + 1)
                if end < 0:
                    self._unbalanced("a single quote")
                    return b.build(), n
                b.quote(line[i + 1 : end])
                i = end + 1
            elif c == '"':
                i = self.double(i + 1, b)
            elif c == "$":
                i = self.dollar(i, b, quoted=False)
            elif c == "`":
                i = self.backtick(i, b)
            elif c == "~" and i == start:
                user = re.match(r"[A-Za-z0-9._-]*", line[i + 1 :])
                name = user.group() if user else ""
                b.value.append("~" + name)
                b.path.append("~" + name)
                b.shape.append("x")
                b.expansion = b.expansion or "~"
                i += 1 + len(name)
            else:
                run = _PLAIN_RUN.match(line, i)
                if run:
                    b.plain(run.group())
                    i = run.end()
                else:  # a glob character, a brace or a tilde inside a word
                    b.plain(c)
                    i += 1
            if self.broken:
                return b.build(), n
        return b.build(), i

    def _unbalanced(self, what: str) -> None:
        self.f.inject(f"{what} is not closed: the command cannot be read the way the shell would")
        self.broken = True

    def double(self, i: int, b: _Builder) -> int:
        line, n = self.line, self.n
        b.quoted = True
        while i < n:
            c = line[i]
            if c == '"':
                return i + 1
            if c == "\\":
                nxt = line[i + 1] if i + 1 < n else ""
                if nxt == "\n":
                    i += 2
                elif nxt and nxt in '$`"\\':
                    b.quote(nxt)
                    i += 2
                else:
                    b.quote("\\")
                    i += 1
            elif c == "$":
                i = self.dollar(i, b, quoted=True)
            elif c == "`":
                i = self.backtick(i, b)
            else:
                run = _DQ_RUN.match(line, i)
                assert run is not None
                b.quote(run.group())
                i = run.end()
            if self.broken:
                return n
        self._unbalanced("a double quote")
        return n

    def dollar(self, i: int, b: _Builder, *, quoted: bool) -> int:
        line, n = self.line, self.n
        nxt = line[i + 1] if i + 1 < n else ""
        if nxt == "(":
            if line.startswith("((", i + 1):
                self.f.inject(
                    f"'{_clip(line[i:])}' is an arithmetic expansion, which can run command "
                    "substitutions (array subscripts)"
                )
            else:
                self.f.inject(f"'{_clip(line[i:])}' runs a command substitution")
            end = _find_close(line, i + 2, "(", ")")
            if end < 0:
                self._unbalanced("a '$(' substitution")
                return n
            self.bodies.append(line[i + 2 : end])
            b.param("", "$(...)")
            return end + 1
        if nxt == "{":
            self.f.inject(
                f"'{_clip(line[i:])}' is a parameter expansion, which can hide commands"
            )
            end = _find_close(line, i + 2, "{", "}")
            if end < 0:
                self._unbalanced("a '${' expansion")
                return n
            inner = line[i + 2 : end]
            b.param(inner if _NAME.fullmatch(inner) else "", line[i : end + 1])
            return end + 1
        if nxt == "'" and not quoted:
            self.f.inject("$'...' (ANSI-C quoting) is read differently by sh (dash) and bash")
            j = i + 2
            while j < n and line[j] != "'":
                j += 2 if line[j] == "\\" else 1
            if j >= n:
                self._unbalanced("a $'...' quote")
                return n
            b.quote(line[i + 2 : j])
            return j + 1
        if nxt == '"' and not quoted:
            self.f.inject('$"..." (locale translation) is read differently by sh (dash) and bash')
            return self.double(i + 2, b)
        if nxt == "[":
            self.f.inject("'$[' is bash's old arithmetic expansion (dash reads it as text), which "
                          "evaluates array subscripts that can run commands")
        match = _NAME.match(line, i + 1)
        if match:
            if match.group() == "IFS" and not quoted:
                # Unquoted, $IFS is split away: 'timeout 5$IFS"sh" -c ...' is three words to
                # the shell and one to a reader.
                self.f.inject(
                    "'$IFS' outside double quotes splits the word it is in: the shell sees more "
                    "words (and another command) than the text shows"
                )
            b.param(match.group(), "$" + match.group())
            return match.end()
        if nxt and nxt in "0123456789@*#?-$!":
            b.param(nxt, "$" + nxt)
            return i + 2
        (b.quote if quoted else b.plain)("$")
        return i + 1

    def backtick(self, i: int, b: _Builder) -> int:
        line, n = self.line, self.n
        j = i + 1
        while j < n and line[j] != "`":
            j += 2 if line[j] == "\\" else 1
        self.f.inject(f"backticks run a command substitution ('{_clip(line[i : j + 1])}')")
        if j >= n:
            self._unbalanced("a backtick substitution")
            return n
        self.bodies.append(re.sub(r"\\([$`\\])", r"\1", line[i + 1 : j]))
        b.param("", "`...`")
        return j + 1


def _find_close(line: str, i: int, opener: str, closer: str) -> int:
    """Index of the ``closer`` matching an opened ``$(`` or ``${``, quote-aware; -1 if none."""
    depth, n = 1, len(line)
    while i < n:
        c = line[i]
        if c == "\\":
            i += 2
            continue
        if c == "'":
            end = line.find("'", i + 1)
            if end < 0:
                return -1
            i = end + 1
            continue
        if c == '"':
            i += 1
            while i < n and line[i] != '"':
                i += 2 if line[i] == "\\" else 1
            i += 1
            continue
        if c == "`":
            i += 1
            while i < n and line[i] != "`":
                i += 2 if line[i] == "\\" else 1
            i += 1
            continue
        if c == opener:
            depth += 1
        elif c == closer:
            depth -= 1
            if depth == 0:
                return i
        i += 1
    return -1


def _clip(text: str, limit: int = 60) -> str:
    text = text.replace("\n", "\\n")
    return text if len(text) <= limit else text[: limit - 3] + "..."


# -------------------------------------------------------------------------
# command lines
# -------------------------------------------------------------------------

_RESERVED = frozenset(
    {"if", "then", "else", "elif", "fi", "do", "done", "case", "esac", "while", "until", "for",
     "in", "{", "}", "!", "[[", "]]", "function", "select", "coproc"}
)
_SHELLSHOCK = re.compile(r"\(\s*\)\s*\{")
_ENCODED_CONTROL = re.compile(r"%0[0ad]", re.IGNORECASE)


def _analyze_line(line: str, allow_pipes: bool, findings: _Findings, depth: int) -> None:
    if len(line) > MAX_COMMAND_CHARS:
        findings.inject(f"the command is longer than {MAX_COMMAND_CHARS} characters")
        return
    if depth > MAX_DEPTH:
        findings.inject(f"commands are nested more than {MAX_DEPTH} deep; the guard stops there")
        return
    _scan_chars(line, findings)
    if _SHELLSHOCK.search(line):
        findings.inject("'() {' defines a shell function (the shellshock pattern)")
    lexer = _Lexer(line, findings)
    tokens = lexer.tokens()
    for body in lexer.bodies:
        inner = _Findings()
        _analyze_line(body, allow_pipes, inner, depth + 1)
        for reason in inner.destructive:
            findings.destroy(f"in a command substitution: {reason}")
    commands: list[list[_Word]] = [[]]
    pipelines: list[list[list[_Word]]] = [[commands[0]]]
    pending: str | None = None
    functions: list[tuple[str, int]] = []
    for k, token in enumerate(tokens):
        if isinstance(token, _Word):
            if pending is not None:
                _check_redirect_target(pending, token, findings)
                pending = None
                continue
            if token.brace:
                findings.inject(
                    f"'{_clip(token.value)}' is a brace expansion: bash expands it and sh does "
                    "not; quote it or spell the words out"
                )
            if token.quoted is False and token.expansion == "" and "://" not in token.value:
                if _ENCODED_CONTROL.search(token.value):
                    findings.inject(
                        f"'{_clip(token.value)}' holds a percent-encoded line break or NUL (%0a, "
                        "%0d, %00), which splits the command once something decodes it"
                    )
            commands[-1].append(token)
            continue
        op = str(token)
        if op in _REDIRECTS:
            if op.startswith("<<"):
                what = "a here-string" if op == "<<<" else "a here-document"
                findings.inject(f"'{op}' starts {what}, input the guard does not read")
            else:
                findings.inject(f"'{op}' redirects input or output")
            pending = op if op in _WRITE_REDIRECTS else "<"
            continue
        if op in ("<(", ">("):
            findings.inject(f"'{op} ... )' runs a process substitution")
        elif op == "(":
            current = commands[-1]
            following = tokens[k + 1] if k + 1 < len(tokens) else None
            if len(current) == 1 and isinstance(following, _Op) and following == ")":
                name = current[0].value
                findings.inject(f"'{name}()' defines a shell function")
                functions.append((name, k + 2))
            else:
                findings.inject("'( ... )' runs commands in a subshell")
        elif op == ")":
            pass
        elif op == "|":
            if not allow_pipes:
                findings.inject("'|' pipes the output into a second command")
            commands.append([])
            pipelines[-1].append(commands[-1])
            continue
        else:
            findings.inject(_SEPARATORS.get(op, f"operator {op!r} chains commands"))
        commands.append([])
        pipelines.append([commands[-1]])
    if pending is not None:
        findings.inject("a redirection has no target")
    for command in commands:
        if command and command[0].value == "function" and not command[0].quoted:
            findings.inject("'function' defines a shell function")
            if len(command) > 1:
                functions.append((command[1].value, tokens.index(command[1]) + 1))
    _check_fork_bomb(functions, tokens, findings)
    for command in commands:
        if command:
            _check_command(command, findings, allow_pipes, depth, first=True)
    for pipeline in pipelines:
        stages = [c for c in pipeline if c]
        if len(stages) > 1:
            _check_download_pipe([_program_name(s) for s in stages], findings)


def _check_redirect_target(op: str, target: _Word, findings: _Findings) -> None:
    if op == "<":
        return
    if _is_device(target.path):
        findings.destroy(f"'{op} {target.value}' overwrites a disk device")
    elif _is_system_path(target.path):
        findings.destroy(f"'{op} {target.value}' overwrites a system file")


def _check_fork_bomb(
    functions: list[tuple[str, int]], tokens: list[_Word | _Op], findings: _Findings
) -> None:
    for name, start in functions[:16]:  # a bound on the work; more are refused regardless
        # The body: from the first token after the definition to the matching '}' or ')'.
        depth, body = 0, []
        for token in tokens[start:]:
            if isinstance(token, _Word):
                if token.value == "{" and not token.quoted:
                    depth += 1
                elif token.value == "}" and not token.quoted:
                    depth -= 1
                    if depth <= 0:
                        break
                else:
                    body.append(token.value)
            elif token == "(":
                depth += 1
            elif token == ")":
                depth -= 1
                if depth <= 0:
                    break
        if name in body:
            findings.destroy(f"function '{name}' calls itself (a fork bomb)")


_DOWNLOADERS = frozenset({"curl", "wget", "fetch", "aria2c", "http", "https", "lwp-request"})


def _check_download_pipe(programs: Sequence[str], findings: _Findings) -> None:
    for i, program in enumerate(programs):
        if program in _DOWNLOADERS:
            runner = next(
                (p for p in programs[i + 1 :] if p in _SHELLS or _family(p) in _INTERPRETERS),
                None,
            )
            if runner:
                findings.destroy(f"'{program} ... | {runner}' downloads code and runs it unseen")


def _program_name(words: Sequence[_Word]) -> str:
    """The program a pipeline stage really runs, wrappers and assignments skipped."""
    argv = list(words)
    for _ in range(MAX_DEPTH):
        while argv and _ASSIGNMENT.match(argv[0].value):
            argv = argv[1:]
        if not argv:
            return ""
        name = _basename(argv[0].value)
        spec = _WRAPPERS.get(name)
        if spec is None:
            return name
        inner = _wrapped(name, spec, argv[1:], _Findings(), [])
        if not inner:
            return name
        argv = inner
    return ""


# -------------------------------------------------------------------------
# one command (argv), wrappers, interpreters
# -------------------------------------------------------------------------

_ODD_PROGRAM = re.compile(r"[\s;&|<>`$()\\'\"]")


def _basename(value: str) -> str:
    base = value.rsplit("/", 1)[-1]
    return base or value


_VERSIONED = re.compile(
    r"^(python|pypy|perl|ruby|node|nodejs|php|lua|luajit|tclsh|wish|Rscript|bash|zsh|ksh|"
    r"gawk|mawk|nawk|awk)[0-9.]*(?:-[0-9.]+)?$"
)


def _family(name: str) -> str:
    match = _VERSIONED.match(name)
    return match.group(1) if match else name


_SHELLS = frozenset(
    {"sh", "bash", "dash", "zsh", "ksh", "mksh", "ash", "csh", "tcsh", "fish", "rbash", "yash",
     "posh", "ksh93", "pdksh", "oksh", "elvish", "xonsh", "nu"}
)
_CODE_RUNNERS = {
    "eval": "'eval' runs a string as shell code",
    "exec": "'exec' replaces the shell with another program",
    "source": "'source' runs a file as shell code",
    ".": "'.' runs a file as shell code",
    "trap": "'trap' registers shell code to run later",
    "alias": "'alias' defines shell code run under another name",
}
# Variables that decide which code a program loads or runs.
_CODE_VARIABLES = frozenset(
    {
        "PATH", "IFS", "ENV", "BASH_ENV", "SHELLOPTS", "BASHOPTS", "PS4", "PROMPT_COMMAND",
        "CDPATH", "GLOBIGNORE", "PERL5OPT", "PERL5LIB", "PERLLIB", "PYTHONSTARTUP",
        "PYTHONPATH", "PYTHONHOME", "PYTHONINSPECT", "PYTHONUSERBASE", "NODE_OPTIONS",
        "NODE_PATH", "RUBYOPT", "RUBYLIB", "GIT_SSH_COMMAND", "GIT_SSH", "GIT_EXEC_PATH",
        "GIT_CONFIG_PARAMETERS", "GIT_CONFIG", "GIT_CONFIG_GLOBAL", "GIT_CONFIG_SYSTEM",
        "GIT_CONFIG_COUNT", "GIT_PROXY_COMMAND", "GIT_ASKPASS", "SSH_ASKPASS", "GIT_EDITOR",
        "GIT_SEQUENCE_EDITOR", "GIT_PAGER", "GIT_EXTERNAL_DIFF", "GIT_TEMPLATE_DIR", "GIT_DIR",
        "GIT_ALLOW_PROTOCOL", "EDITOR", "VISUAL", "PAGER", "MANPAGER", "LESSOPEN", "LESSCLOSE",
        "BROWSER", "GCONV_PATH", "JAVA_TOOL_OPTIONS", "_JAVA_OPTIONS", "LOCPATH", "HOSTALIASES",
        "XDG_CONFIG_HOME", "ZDOTDIR", "TAR_OPTIONS", "GIT_COMMON_DIR", "SUDO_ASKPASS",
        "RSYNC_RSH", "PERL5DB", "PYTHONBREAKPOINT", "MANOPT", "LESSKEYIN", "LESSKEY",
        "LESSKEY_CONTENT", "SHELL", "MAKEFLAGS", "MFLAGS", "GNUMAKEFLAGS", "GLIBC_TUNABLES",
        "GIT_SSH_VARIANT", "GIT_PROTOCOL_FROM_USER",
        # Where programs read configuration that names programs to run: HOME is
        # XDG_CONFIG_HOME's parent (~/.gitconfig with core.fsmonitor, ~/.config/git/config,
        # ~/.npmrc's script-shell, ~/.wgetrc's use_askpass, ~/.kube/config's exec plugin), and
        # a model that can write a folder of the workdir can make it a home. Measured: HOME=dir
        # 'git status' ran dir/.config/git/config's core.fsmonitor.
        "HOME", "KUBECONFIG", "WGETRC", "SYSTEM_WGETRC", "AWS_CONFIG_FILE", "CARGO_HOME",
        "GOENV", "GNUPGHOME", "OPENSSL_CONF", "OPENSSL_ENGINES", "OPENSSL_MODULES", "PHPRC",
        "PHP_INI_SCAN_DIR", "R_PROFILE", "R_PROFILE_USER", "R_ENVIRON", "R_ENVIRON_USER",
        "PSQLRC", "BUNDLE_GEMFILE", "GEM_HOME", "GEM_PATH", "RUSTUP_HOME",
        "RUSTUP_TOOLCHAIN",
        # Options or commands for a language's runtime or build tool, read from the
        # environment: a Java agent, go's -toolexec, a rustc wrapper, Lua code run at start.
        "JDK_JAVA_OPTIONS", "JAVA_OPTS", "MAVEN_OPTS", "GRADLE_OPTS", "CLASSPATH", "GOFLAGS",
        "RUSTC", "RUSTC_WRAPPER", "RUSTC_WORKSPACE_WRAPPER", "RUSTDOC", "RUSTFLAGS",
        "RUSTDOCFLAGS", "LUA_PATH", "LUA_CPATH",
        # qemu's user-mode emulators take the guest program's environment and the libraries it
        # loads from these; psql runs its pager and editor from these.
        "QEMU_SET_ENV", "QEMU_LD_PREFIX", "PSQL_PAGER", "PSQL_EDITOR",
    }
)
_CODE_PREFIXES = ("LD_", "DYLD_", "BASH_FUNC_", "GIT_CONFIG_KEY_", "GIT_CONFIG_VALUE_",
                  # LUA_INIT and LUA_INIT_5_4 run their value as Lua code; LUA_PATH_5_4 and
                  # the like pick the modules Lua loads.
                  "LUA_INIT", "LUA_PATH_", "LUA_CPATH_")
# cargo reads CARGO_<SECTION>_<KEY> as configuration: these keys name programs it runs
# (CARGO_BUILD_RUSTC_WRAPPER, CARGO_TARGET_<TRIPLE>_RUNNER and _LINKER, a registry's credential
# provider); CARGO_TARGET_DIR or CARGO_BUILD_JOBS stay plain.
_CARGO_CODE = re.compile(
    r"CARGO_(?:BUILD|TARGET|HOST|REGISTRY|REGISTRIES|ALIAS)_\w*?"
    r"(?:RUNNER|LINKER|RUSTC|WRAPPER|RUSTDOC|FLAGS|CREDENTIAL_PROVIDERS?)"
    r"\Z|CARGO_ALIAS_\w+\Z"
)
_CODE_SUFFIXES = ("_ASKPASS",)
# npm reads every npm_config_* variable as configuration (script-shell, node-options, ...).
_CODE_PREFIXES_ANY_CASE = ("npm_config_",)
# make's flags variables are everyday ('MAKEFLAGS=-j8'); only these letters are let through.
_MAKE_FLAGS = frozenset({"MAKEFLAGS", "MFLAGS", "GNUMAKEFLAGS"})
_PLAIN_MAKE_FLAGS = re.compile(r"[-\s0-9jklsnwiBOqrRt]*")


def code_bearing_env_name(name: str) -> bool:
    """Whether setting the environment variable ``name`` can change which code a program loads
    or runs (``LD_PRELOAD``, ``BASH_ENV``, ``GIT_CONFIG_*``, ``GIT_PAGER``, ``*_ASKPASS``, ...).

    The shell guard refuses such assignments wherever it finds them in a command line; a tool
    that sets variables itself (shell_exec's ``env``) should refuse the same names.
    """
    return (
        name in _CODE_VARIABLES
        or name.startswith(_CODE_PREFIXES)
        or name.endswith(_CODE_SUFFIXES)
        or name.lower().startswith(_CODE_PREFIXES_ANY_CASE)
        or _CARGO_CODE.match(name) is not None
    )
_SUBSCRIPT_BUILTINS = frozenset(
    {"let", "declare", "typeset", "local", "readonly", "export", "printf", "test", "[", "unset",
     "read", "mapfile", "readarray", "wait", "shift", "return", "exit", "source", ".", "eval"}
)
_DECLARERS = frozenset({"export", "declare", "typeset", "local", "readonly", "set", "setenv"})
# Build tools that pass VAR=value arguments into the environment of the commands they run.
_ENV_ARGUMENT_TAKERS = frozenset({"make", "gmake", "bmake", "ninja"})


def _check_assignment(text: str, findings: _Findings, how: str = "") -> None:
    name, _, value = text.partition("=")
    name = name.rstrip("+")
    if name in _MAKE_FLAGS and _PLAIN_MAKE_FLAGS.fullmatch(value):
        return
    if code_bearing_env_name(name):
        findings.inject(f"setting {name}{how} changes which code the command runs")


def _check_command(
    words: Sequence[_Word],
    findings: _Findings,
    allow_pipes: bool,
    depth: int,
    *,
    first: bool = False,
) -> None:
    """Check one command: assignments, the program position, wrappers, destructive meaning."""
    if depth > MAX_DEPTH:
        findings.inject(
            f"commands are wrapped or nested more than {MAX_DEPTH} deep; the guard stops there"
        )
        return
    i = 0
    while i < len(words) and _ASSIGNMENT.match(words[i].value):
        _check_assignment(words[i].value, findings)
        i += 1
    argv = list(words[i:])
    if not argv:
        return
    program = argv[0]
    if program.shell:
        if first and not program.quoted and program.value in _RESERVED:
            findings.inject(f"'{program.value}' is shell syntax for a compound command or group")
            return
        if program.glob:
            findings.inject(
                f"the program {program.value!r} is a glob pattern: what runs depends on the "
                "files that match it"
            )
        if program.expansion:
            findings.inject(
                f"the program name comes from an expansion ({program.expansion}), so what runs "
                "is hidden"
            )
        if program.brace:
            findings.inject(f"the program {program.value!r} is a brace expansion")
    if _ODD_PROGRAM.search(program.value.replace("$(...)", "").replace("`...`", "")):
        # No program is named like this: it is a fragment made to close a quote of a command
        # template ('";id;"') and run what follows.
        findings.inject(
            f"the program name {_clip(program.value)!r} holds shell syntax or spaces; it looks "
            "like a fragment meant to break out of quotes"
        )
    if _PROCESS_LINK_PROGRAM.match(_climbed(program.value)):
        # /proc/self/exe is whatever program execs it (the shell running the line, the tool's
        # own Python for an argv list): '/proc/self/exe -c CODE' is 'sh -c CODE' or
        # 'python3 -c CODE' under a name no rule knows. /dev/fd/N runs an open file.
        findings.inject(
            f"the program {_clip(program.value)!r} is a process link: it runs the program of "
            "the process that starts it, or an open file, under a name that hides which"
        )
        return
    name = _program_alias(_basename(program.value))
    args = argv[1:]
    if name == "ld.so":
        _check_loader(args, findings, allow_pipes, depth)
        return
    values = [a.value for a in args]
    if name in ("busybox", "toybox") and args:
        _check_command(args, findings, allow_pipes, depth + 1)
        return
    if name in _CODE_RUNNERS:
        findings.inject(_CODE_RUNNERS[name])
        if name == "eval" and args:
            _nested_line(" ".join(values), "eval", findings, allow_pipes, depth)
        elif name == "exec" and args:
            j = _skip_options(values, "a", frozenset())
            _check_command(args[j:], findings, allow_pipes, depth + 1)
        return
    if name in _SUBSCRIPT_BUILTINS and any(
        "[" in v and ("$(" in v or "`" in v or "$[" in v) for v in values
    ):
        # bash evaluates array subscripts in these builtins' arguments, quoted or not:
        # let 'a[$(id)]' runs id.
        findings.inject(f"'{name}' evaluates array subscripts in its arguments, and a "
                        "subscript here holds a command substitution")
    if name in _DECLARERS:
        for value in values:
            if "=" in value:
                _check_assignment(value, findings, f" through '{name}'")
    if name in _ENV_ARGUMENT_TAKERS:
        for value in values:
            if _ASSIGNMENT.match(value):
                _check_assignment(value, findings, f" as a '{name}' argument")
    if name in _SHELLS:
        _check_shell(name, args, findings, allow_pipes, depth)
        return
    family = _family(name)
    if family in _INTERPRETERS:
        _check_interpreter(family, name, args, findings)
    special = _SPECIAL.get(name)
    if special is not None:
        if name in _OPTIONS_ANYWHERE:
            _check_hidden_words(name, args, findings)
        special(name, args, findings, allow_pipes, depth)
    if name in _SUBCOMMAND_RUNNERS:
        inner = _subcommand_command(name, args)
        if inner:
            _check_command(inner, findings.sub(""), allow_pipes, depth + 1)
            return
    if name == "nix-shell":
        for option, value in zip(values, [*values[1:], ""], strict=True):
            if option in ("--run", "--command") or option.startswith(("--run=", "--command=")):
                findings.inject(f"'{name} {option.split('=', 1)[0]}' runs a string as a shell "
                                "command")
                script = option.split("=", 1)[1] if "=" in option else value
                _nested_line(script, name, findings, allow_pipes, depth)
    if name == "capsh" and "--" in values:
        # 'capsh [options] -- ARGS' runs /bin/bash ARGS ('capsh -- -c CMD', or a shell reading
        # stdin with no ARGS).
        _check_shell("bash", args[values.index("--") + 1 :], findings, allow_pipes, depth + 1)
        return
    runner = _RUNNERS.get(name) or (_check_qemu_user if _QEMU_USER.match(name) else None)
    if runner is not None:
        inner = runner(name, args, findings, allow_pipes, depth)
        if inner:
            _check_command(inner, findings.sub(""), allow_pipes, depth + 1)
        return
    spec = _WRAPPERS.get(name)
    if spec is not None:
        strings: list[str] = []
        inner = _wrapped(name, spec, args, findings, strings)
        for string in strings:
            findings.inject(f"'{name}' runs a string as a shell command")
            _nested_line(string, name, findings, allow_pipes, depth)
        # The wrapper's own options end where the command starts ('env "$X" ls': X may be
        # '-S sh -c id').
        _check_hidden_words(name, args[: len(args) - len(inner)], findings)
        if name == "xargs" and inner:
            inner = _with_xargs_input(args, inner)
        if inner:
            _check_command(inner, findings.sub(""), allow_pipes, depth + 1)
        return
    _check_destructive(name, args, findings)


# Programs named by a process link rather than by a file: resolved by the kernel in the process
# that executes them.
_PROCESS_LINK_PROGRAM = re.compile(
    r"^/(?:proc/(?:self|thread-self|[0-9]+)(?:/task/(?:self|[0-9]+))?/(?:exe|fd/.*|map_files/.*)"
    r"|dev/(?:fd/.*|stdin|stdout|stderr))\Z"
)
# The dynamic loader runs the program named by its first operand ('ld.so /bin/sh'):
# /usr/bin/ld.so, ld-linux-x86-64.so.2, ld-linux-aarch64.so.1, ld-musl-x86_64.so.1, ld64.so.2.
_LOADER = re.compile(r"^(?:ld(?:-linux(?:-[\w-]+)?)?\.so|ld-musl-[\w-]+\.so|ld64\.so)"
                     r"(?:\.[0-9]+)*\Z")
# A shell under a versioned or static build's name: Debian ships /bin/zsh5, bash-static,
# zsh-static, mksh-static.
_SHELL_VARIANT = re.compile(r"^([a-z]+?)(?:[0-9.]+|-static)+\Z")
_MORE_SHELLS = frozenset({"lksh", "sash"})


def _climbed(path: str) -> str:
    """``path`` normalised, a relative one that climbs out ('../../../proc/self/exe') read as
    absolute: enough '..' from any working directory reach the root."""
    normal = os.path.normpath(path)
    if normal.startswith("../"):
        return "/" + re.sub(r"^(?:\.\./)+", "", normal)
    return normal


def _program_alias(name: str) -> str:
    """The name the guard judges a program by: 'ld.so' for every dynamic loader, the shell
    for a shell's versioned or static name (zsh5, bash-static)."""
    if _LOADER.match(name):
        return "ld.so"
    if name in _MORE_SHELLS:
        return "sh"
    match = _SHELL_VARIANT.match(name)
    if match and match.group(1) in _SHELLS:
        return match.group(1)
    return name


# ld.so options that choose which code is loaded (as LD_LIBRARY_PATH, LD_PRELOAD, LD_AUDIT do),
# and the ones that only take a value.
_LOADER_CODE_OPTIONS = ("--library-path", "--preload", "--audit", "--glibc-hwcaps-prepend")
_LOADER_VALUE_OPTIONS = ("--argv0", "--glibc-hwcaps-mask")


def _check_loader(
    args: Sequence[_Word], findings: _Findings, allow_pipes: bool, depth: int
) -> None:
    """'ld.so [OPTIONS] PROGRAM ARGS': the program it runs is checked like any other."""
    values = [a.value for a in args]
    k = 0
    while k < len(values):
        value = values[k]
        if value == "--":
            k += 1
            break
        if not value.startswith("--"):
            break
        key = _long_option(value, (*_LOADER_CODE_OPTIONS, *_LOADER_VALUE_OPTIONS)) or value
        if key in _LOADER_CODE_OPTIONS:
            findings.inject(f"'ld.so {key}' chooses which code is loaded into the program")
        if key in (*_LOADER_CODE_OPTIONS, *_LOADER_VALUE_OPTIONS) and "=" not in value:
            k += 1
        k += 1
    if k < len(args):
        _check_command(args[k:], findings, allow_pipes, depth + 1)


def _nested_line(
    script: str, via: str, findings: _Findings, allow_pipes: bool, depth: int
) -> None:
    """Analyse a string some program runs as shell code; its reasons are prefixed."""
    if depth + 1 > MAX_DEPTH:
        findings.inject(f"commands are nested more than {MAX_DEPTH} deep; the guard stops there")
        return
    _analyze_line(script, allow_pipes, findings.sub(f"in the script run by '{via}': "), depth + 1)


# --- options ---------------------------------------------------------------


def _skip_options(
    values: Sequence[str],
    short_values: str,
    long_values: frozenset[str],
    short_optional: str = "",
    collect: dict[str, list[str]] | None = None,
    long_names: Iterable[str] = (),
) -> int:
    """Index of the first operand after GNU-style options (stops at the first operand).

    ``short_values``: short options that take a value (attached or the next argument);
    ``short_optional``: short options whose value can only be attached; ``long_values``: long
    options that take the next argument when not written ``--opt=value``; ``long_names``: other
    long options worth knowing (those that run code first). Long options given by a prefix
    (``--s``) are collected under their full name. Option values are appended to
    ``collect[option]`` when given.
    """
    long_names = tuple(long_names)
    i, n = 0, len(values)
    while i < n:
        arg = values[i]
        if arg == "--":
            return i + 1
        if not arg.startswith("-") or arg == "-":
            return i
        if arg.startswith("--"):
            key, eq, value = arg.partition("=")
            key = _long_option(key, (*long_names, *long_values)) or key  # '--s' = '--split-string'
            if not eq and key in long_values and i + 1 < n:
                value = values[i + 1]
                i += 1
            if collect is not None:
                collect.setdefault(key, []).append(value)
            i += 1
            continue
        j = 1
        while j < len(arg):
            letter = arg[j]
            if letter in short_values:
                value = arg[j + 1 :]
                if not value and i + 1 < n:
                    i += 1
                    value = values[i]
                if collect is not None:
                    collect.setdefault("-" + letter, []).append(value)
                break
            if letter in short_optional:
                if collect is not None:
                    collect.setdefault("-" + letter, []).append(arg[j + 1 :])
                break
            if collect is not None:
                collect.setdefault("-" + letter, []).append("")
            j += 1
        i += 1
    return n


@attrs.frozen
class _Wrapper:
    """How to find the command a wrapper runs: its options, operands before the command, and
    options whose value is a shell string (``-c``) or an assignment (``-E X=1``)."""

    short_values: str = ""
    long_values: frozenset[str] = frozenset()
    short_optional: str = ""
    operands: int = 0  # operands before the command (timeout's duration, chroot's root)
    assignments: bool = False  # NAME=value words between the options and the command
    string_options: tuple[str, ...] = ()  # options whose value is run as a shell command
    env_options: tuple[str, ...] = ()  # options whose value is NAME=value for the command
    no_command_options: tuple[str, ...] = ()  # with these, nothing is run (command -v)
    # Options that make the wrapper start a shell (sudo -s, doas -s): with no command, the
    # shell reads its commands from standard input, which the guard does not see.
    shell_options: tuple[str, ...] = ()
    # With no command at all the wrapper starts a shell reading standard input (chroot DIR,
    # unshare, nsenter, setarch, proot, firejail, schroot).
    empty_shell: bool = False


def _w(
    short: str = "",
    long: Iterable[str] = (),
    optional: str = "",
    operands: int = 0,
    assignments: bool = False,
    strings: tuple[str, ...] = (),
    env: tuple[str, ...] = (),
    no_command: tuple[str, ...] = (),
    shell: tuple[str, ...] = (),
    empty_shell: bool = False,
) -> _Wrapper:
    return _Wrapper(short, frozenset(long), optional, operands, assignments, strings, env,
                    no_command, shell, empty_shell)


_WRAPPERS: dict[str, _Wrapper] = {
    "env": _w("uCS", ("--unset", "--chdir", "--split-string"), assignments=True,
              strings=("-S", "--split-string")),
    "sudo": _w("ugCDprtUTh", ("--user", "--group", "--close-from", "--chdir", "--prompt",
                               "--role", "--type", "--other-user", "--command-timeout",
                               "--host"), assignments=True, no_command=("-l", "-v", "-k", "-K",
                                                                        "--list", "--validate"),
               shell=("-s", "-i", "--shell", "--login")),
    "doas": _w("uC", shell=("-s",)),
    "pkexec": _w("", ("--user",)),
    "nice": _w("n", ("--adjustment",)),
    "ionice": _w("cnpPu", ("--class", "--classdata", "--pid", "--pgid", "--uid")),
    "nohup": _w(),
    "setsid": _w(),
    # 'unbuffer [-p] program [args]': -p (pipeline mode) takes no value. Read as taking one,
    # 'unbuffer -p sh' hid the shell and 'unbuffer -p rm -rf ~' the deletion.
    "unbuffer": _w(),
    "timeout": _w("sk", ("--signal", "--kill-after"), operands=1),
    "stdbuf": _w("ioe", ("--input", "--output", "--error")),
    "chrt": _w("TPD", ("--sched-runtime", "--sched-period", "--sched-deadline"), operands=1),
    "taskset": _w("", (), operands=1),
    "unshare": _w("SGRwl", ("--setuid", "--setgid", "--root", "--wd", "--map-user",
                            "--map-group", "--map-users", "--map-groups", "--propagation",
                            "--load-interp", "--owner"), empty_shell=True),
    "nsenter": _w("tSG", ("--target", "--setuid", "--setgid", "--env"), empty_shell=True),
    "chroot": _w("", ("--userspec", "--groups"), operands=1, empty_shell=True),
    "xargs": _w("adEILnPs", ("--arg-file", "--delimiter", "--max-args", "--max-procs",
                             "--max-chars", "--process-slot-var"), optional="eil"),
    "time": _w("fo", ("--format", "--output")),
    "command": _w("", (), no_command=("-v", "-V")),
    "builtin": _w(),
    "strace": _w("oeEpPsSuaIbXUO", ("--output", "--expr", "--env", "--attach", "--user",
                                     "--trace", "--trace-fds", "--trace-path", "--signal",
                                     "--status", "--string-limit", "--columns",
                                     "--summary-sort-by", "--detach-on", "--abbrev",
                                     "--verbose", "--raw", "--read", "--write", "--fault",
                                     "--inject", "--kvm", "--argv0", "--const-print-style",
                                     "--syscall-limit"),
                 env=("-E", "--env")),
    "ltrace": _w("oeEpsSuaAnlLx", ("--output",)),
    "gosu": _w("", (), operands=1),
    "su-exec": _w("", (), operands=1),
    "runuser": _w("cugGs", ("--user", "--group", "--supp-group", "--shell", "--command"),
                  strings=("-c", "--command")),
    "su": _w("cgGsw", ("--group", "--supp-group", "--shell", "--command",
                       "--whitelist-environment"), strings=("-c", "--command")),
    "sg": _w("", (), operands=1),
    "flock": _w("wEc", ("--timeout", "--wait", "--conflict-exit-code", "--command"),
                operands=1, strings=("-c", "--command")),
    "script": _w("cTIOBEom", ("--command", "--log-timing", "--log-in", "--log-out",
                              "--log-io", "--echo", "--output-limit", "--logging-format"),
                 optional="t", strings=("-c", "--command")),
    "watch": _w("nqd", ("--interval", "--differences", "--equexit", "--chgexit")),
    "cgexec": _w("g", ()),
    "prlimit": _w("p", ("--pid",)),
    "setpriv": _w("", ("--ruid", "--euid", "--rgid", "--egid", "--reuid", "--regid",
                       "--groups", "--inh-caps", "--ambient-caps", "--bounding-set",
                       "--securebits", "--pdeathsig", "--selinux-label", "--apparmor-profile",
                       "--landlock-access", "--landlock-rule", "--seccomp-filter")),
    "numactl": _w("CNmipP", ()),
    "firejail": _w(empty_shell=True),
    "fakeroot": _w("lsi", ("--lib", "--faked")),
    "systemd-run": _w("upEMH", ("--unit", "--property", "--setenv", "--machine", "--host",
                                "--description", "--slice", "--uid", "--gid", "--nice",
                                "--working-directory"), env=("-E", "--setenv"),
                      shell=("-S", "--shell")),
    "dbus-run-session": _w(),
    "nocache": _w(),
    "catchsegv": _w(),
    "valgrind": _w(),
    "caffeinate": _w(),
    # More programs that run the command after their options; unknown to the guard, each hid
    # 'rm -rf ~' (or 'sh', which then reads its commands from stdin) behind it.
    "rlwrap": _w("bCDefgHlOPqsStwz", ("--break-chars", "--command-name", "--file",
                                      "--history-filename", "--logfile", "--substitute-prompt",
                                      "--set-term-name", "--filter", "--pre-given",
                                      "--prompt-colour", "--histsize",
                                      "--extra-char-after-completion",
                                      "--extra-char-before-completion", "--forget-matching",
                                      "--multi-line", "--quote-characters",
                                      "--wait-before-prompt", "--only-cook"),
                 optional="ap", strings=("-z", "--filter")),
    "faketime": _w("", (), operands=1),
    "eatmydata": _w(),
    "cpulimit": _w("lpe", ("--limit", "--pid", "--exe")),
    "xvfb-run": _w("nfsewp", ("--server-num", "--auth-file", "--server-args", "--error-file",
                              "--wait", "--xauth-protocol")),
    "ssh-agent": _w("aEPtO", (), no_command=("-k",)),
    "chronic": _w(),
    "ifne": _w(),
    "proxychains": _w("f"),
    "proxychains4": _w("f"),
    "torsocks": _w("uapP", ("--user", "--pass", "--address", "--port")),
    "tini": _w("pe"),
    "dumb-init": _w("r", ("--rewrite",)),
    "trickle": _w("duwtln"),
    "lckdo": _w("W", (), operands=1),
    # Audit s40: more programs that run the command after their options, each of which hid
    # 'rm -rf ~' (or a shell reading stdin) behind it.
    # 'runcon CONTEXT CMD' or 'runcon [-c] [-t TYPE] [-u USER] [-r ROLE] [-l RANGE] CMD'
    # (_wrapped drops the CONTEXT operand when no part of it is given by an option).
    "runcon": _w("turl", ("--type", "--user", "--role", "--range")),
    # 'setarch ARCH [options] [CMD]' (ARCH first, _wrapped skips it) and its per-architecture
    # names; with no command they start /bin/sh, which reads stdin.
    **{name: _w(empty_shell=True, no_command=("--list",))
       for name in ("setarch", "linux32", "linux64", "i386", "x86_64", "uname26")},
    # daemontools / runit: run the command as a user, with limits, under a lock.
    "chpst": _w("uUe/nlLmdopfcrt"),
    "setuidgid": _w("", (), operands=1),
    "envuidgid": _w("", (), operands=1),
    "softlimit": _w("mdostfcrpal"),
    "setlock": _w("", (), operands=1),
    "pgrphack": _w(),
    # 'envdir DIR CMD' loads a variable from each file of DIR (_wrapped refuses it, as
    # --env-file: the files can set LD_PRELOAD).
    "envdir": _w("", (), operands=1),
    "fakechroot": _w("ldecb", ("--lib", "--elfloader", "--environment", "--config-dir",
                               "--bindir")),
    "proot": _w("rRSbmqwkvi", ("--rootfs", "--bind", "--mount", "--qemu", "--pwd", "--cwd",
                               "--kernel-release", "--verbose"), empty_shell=True),
    "schroot": _w("cudno", ("--chroot", "--user", "--directory", "--session-name",
                            "--option"), empty_shell=True),
    "sshpass": _w("pfdP", (), optional="e"),
    # 'entr [-acdnprsz] UTILITY ARGS' ('-s': UTILITY is a shell string, see _wrapped).
    "entr": _w(),
    "nq": _w(),
    "tsp": _w("LDWN"),
    "daemonize": _w("ceopluE", (), env=("-E",)),
    **{name: _w() for name in ("run-one", "run-this-one", "keep-one-running",
                               "run-one-constantly", "run-one-until-success",
                               "run-one-until-failure")},
    "heaptrack": _w("opa", ("--output", "--pid", "--analyze")),
    "kcov": _w("", (), operands=1),  # 'kcov [--opt=value] OUTDIR CMD'
    "memusage": _w("npdxy", ("--progname", "--png", "--data", "--x-size", "--y-size")),
    "systemd-cat": _w("tp", ("--identifier", "--priority", "--stderr-priority",
                             "--level-prefix")),
    "dbus-launch": _w("", ("--autolaunch", "--config-file")),
    **{name: _w() for name in ("prime-run", "primusrun", "pvkrun")},
    "optirun": _w("bc", ("--bridge", "--vgl-compress")),
    # 'flatpak-spawn --host CMD' runs CMD outside the flatpak sandbox.
    "flatpak-spawn": _w("", ("--env", "--directory", "--forward-fd", "--unset-env",
                             "--app-path", "--usr-path", "--sandbox-expose",
                             "--sandbox-expose-ro", "--sandbox-flag", "--sandbox-expose-path",
                             "--sandbox-expose-path-ro", "--sandbox-expose-path-try",
                             "--sandbox-expose-path-ro-try"), env=("--env",)),
}

# Project tools whose subcommand runs the rest of the line as a command in the project's
# environment ('uv run rm -rf ~' runs rm): the subcommands, and the options between the
# subcommand and the command.
_SUBCOMMAND_RUNNERS: dict[str, tuple[frozenset[str], _Wrapper]] = {
    "uv": (frozenset({"run"}), _w("pfPiw", (
        "--with", "--with-editable", "--with-requirements", "--python", "--package",
        "--env-file", "--directory", "--project", "--extra", "--group", "--only-group",
        "--no-group", "--index", "--default-index", "--index-url", "--extra-index-url",
        "--find-links", "--config-file", "--cache-dir", "--color", "--exclude-newer",
        "--index-strategy", "--keyring-provider", "--resolution", "--prerelease", "--link-mode",
        "--refresh-package", "--reinstall-package", "--upgrade-package", "--no-binary-package",
        "--no-build-package", "--python-platform", "--allow-insecure-host", "--no-extra"))),
    "poetry": (frozenset({"run"}), _w("CP", ("--directory", "--project"))),
    "pdm": (frozenset({"run"}), _w("p", ("--project", "--venv"))),
    "pipenv": (frozenset({"run"}), _w()),
    "hatch": (frozenset({"run"}), _w()),
    "rye": (frozenset({"run"}), _w()),
    "pixi": (frozenset({"run", "exec"}), _w("e", ("--environment", "--manifest-path"))),
    **{name: (frozenset({"run"}), _w("npc", ("--name", "--prefix", "--cwd")))
       for name in ("conda", "mamba", "micromamba")},
    "bundle": (frozenset({"exec"}), _w("", ("--gemfile",))),
    **{name: (frozenset({"exec", "x"}), _w("C", ("--cd", "--env")))
       for name in ("mise", "rtx", "asdf")},
    "direnv": (frozenset({"exec"}), _w("", (), operands=1)),
    # 'dotenv run CMD' (python-dotenv), 'dotenvx run -- CMD': the command, after loading a
    # file of variables (the options above catch a named one; the default is ./.env).
    "dotenv": (frozenset({"run"}), _w()),
    "dotenvx": (frozenset({"run"}), _w("fe", ("--env-file", "--env", "--convention"))),
    "nix": (frozenset({"develop", "shell"}), _w()),
    # 'ip netns exec NAME CMD', 'ip vrf exec NAME CMD' ('ip -all netns exec CMD': no NAME).
    "ip": (frozenset({"exec"}), _w("", (), operands=1)),
    # 'py-spy record [options] -- CMD', 'rr record [options] CMD': profilers of a command.
    "py-spy": (frozenset({"record", "top"}), _w("oprdfn", (
        "--output", "--pid", "--rate", "--duration", "--format", "--function", "--nonblocking",
        "--idle", "--gil", "--threads", "--native", "--subprocesses"))),
    "rr": (frozenset({"record"}), _w("cohV", ("--num-cpu-ticks", "--output-trace-dir",
                                               "--env", "--bind-to-cpu",
                                               "--syscall-buffer-size"))),
    # 'R CMD TOOL ARGS' runs R's tools, and any other program, in R's environment.
    "R": (frozenset({"CMD"}), _w()),
}


def _subcommand_command(name: str, args: Sequence[_Word]) -> list[_Word] | None:
    """The command a project tool's run subcommand runs (None: not that subcommand)."""
    subcommands, spec = _SUBCOMMAND_RUNNERS[name]
    values = [a.value for a in args]
    k = next((i for i, v in enumerate(values) if v in subcommands), None)
    if k is None:
        return None
    rest = list(args[k + 1 :])
    if name == "nix":
        # 'nix develop [installable] -c CMD ARGS' / 'nix shell PKGS -c CMD': the command
        # follows -c or --command; without it nix starts an interactive shell.
        at = next((i for i, w in enumerate(rest) if w.value in ("-c", "--command")), None)
        return None if at is None else rest[at + 1 :]
    if name in ("mise", "rtx", "asdf", "dotenvx", "py-spy") and any(w.value == "--"
                                                                   for w in rest):
        return rest[[w.value for w in rest].index("--") + 1 :]
    if name == "py-spy" and any(w.value in ("-p", "--pid") or w.value.startswith("--pid=")
                                for w in rest):
        return None  # a running process, no command
    if name == "ip" and any(v.startswith("-a") for v in values[:k]):
        spec = _w()  # 'ip -all netns exec CMD': the command runs in every namespace
    inner = _wrapped(name, spec, rest, _Findings(), [])
    while name in ("mise", "rtx", "asdf") and inner and "@" in inner[0].value:
        inner = inner[1:]  # 'mise x node@20 python@3.12 CMD': tool versions first
    return inner


def _wrapped(
    name: str,
    spec: _Wrapper,
    args: Sequence[_Word],
    findings: _Findings,
    strings: list[str],
) -> list[_Word]:
    """The command a wrapper runs (may be empty); shell strings it runs go to ``strings``."""
    values = [a.value for a in args]
    options: dict[str, list[str]] = {}
    names = [o for o in (*spec.string_options, *spec.env_options, *spec.no_command_options,
                         *spec.shell_options) if o.startswith("--")]
    if name == "watch":
        names.append("--exec")
    # 'setarch ARCH [options] CMD': the architecture comes before the options.
    start = 1 if name == "setarch" and values[:1] and not values[0].startswith("-") else 0
    j = start + _skip_options(values[start:], spec.short_values, spec.long_values,
                              spec.short_optional, options, names)
    for option in spec.string_options:
        for value in options.get(option, ()):
            if name == "env":
                # 'env -S STRING' splits STRING into the command and its arguments.
                value = " ".join([value, *values[j:]])
                j = len(values)
            strings.append(value)
    for option in spec.env_options:
        for value in options.get(option, ()):
            _check_assignment(value, findings, f" through '{name} {option}'")
    if any(option in options for option in spec.no_command_options):
        return []
    if name == "flock":
        # 'flock FILE -c STRING', 'flock FILE CMD ...' or 'flock FD' (nothing to run).
        if j < len(values) and values[j].isdigit():
            return []
        rest = values[j + 1 :]
        if rest[:1] and (rest[0] == "-c" or _long_option(rest[0], ("--command",))):
            strings.append(rest[0].split("=", 1)[1] if "=" in rest[0] else " ".join(rest[1:2]))
            return []
    if name in ("su", "runuser") and not strings:
        # GNU getopt permutes: 'su root -c STRING' has its -c after the operand.
        for k, value in enumerate(values):
            command = value == "-c" or _long_option(value, ("--command",)) is not None
            if command and "=" in value:
                strings.append(value.split("=", 1)[1])
            elif command and k + 1 < len(values):
                strings.append(values[k + 1])
    if name == "su" or name == "sg":
        if name == "sg" and j + 1 < len(values):
            strings.append(" ".join(values[j + 1 :]))
        return []  # su runs a login shell or its -c string, never an argv
    if name == "runuser" and "-u" not in options and "--user" not in options:
        return []
    if name == "script":
        return []  # script runs its -c string (or a shell reading input)
    if name == "entr" and "-s" in options:
        if j < len(values):
            strings.append(values[j])  # 'entr -s STRING': run by $SHELL -c
        return []
    if name == "runcon" and not any(o in options for o in (
            "-t", "-u", "-r", "-l", "--type", "--user", "--role", "--range")):
        j += 1  # 'runcon CONTEXT CMD'
    if name == "envdir":
        findings.inject("'envdir DIR' loads environment variables from the files of DIR, which "
                        "can set the ones that choose the code that runs (LD_PRELOAD, ...)")
    if name == "chpst" and "-e" in options:
        findings.inject("'chpst -e DIR' loads environment variables from the files of DIR, "
                        "which can set the ones that choose the code that runs (LD_PRELOAD, "
                        "...)")
    if name == "watch":
        rest = values[j:]
        if "-x" in options or "--exec" in options:
            return list(args[j:])
        if rest:
            strings.append(" ".join(rest))  # watch joins its arguments and runs them by sh -c
        return []
    j += spec.operands
    if spec.assignments:
        while j < len(values) and _ASSIGNMENT.match(values[j]):
            _check_assignment(values[j], findings, f" through '{name}'")
            j += 1
    shell = next((o for o in spec.shell_options if o in options), None)
    if j >= len(values) and (shell is not None or spec.empty_shell) and not any(
        v in ("-h", "--help", "-V", "--version") for v in values
    ):
        # 'sudo -s', 'doas -s', 'chroot DIR', 'unshare -r': an interactive shell, fed the
        # tool's standard input.
        how = f"'{name} {shell}'" if shell else f"'{name}' with no command"
        findings.inject(f"{how} starts a shell that reads its commands from standard input, "
                        "which the guard does not see")
    return list(args[j:])


# What xargs adds to the command it runs: words the guard never sees (its input). Modelled as a
# word taken from a variable, so that every rule about hidden words applies to it: 'xargs rm'
# is 'rm "$X"', 'xargs python3 -c' is 'python3 -c "$X"' (code read from stdin), 'xargs git
# -c' a configuration of the input's choosing.
_XARGS_INPUT = "$XARGS_INPUT"


def _xargs_word(template: _Word | None = None, replace: str = "") -> _Word:
    if template is None:
        return _Word(_XARGS_INPUT, _UNKNOWN, expansion=_XARGS_INPUT, shell=True)
    return _Word(
        template.value.replace(replace, _XARGS_INPUT),
        template.path.replace(replace, _UNKNOWN),
        glob=template.glob,
        expansion=template.expansion or _XARGS_INPUT,
        quoted=template.quoted,
        shell=True,
    )


def _with_xargs_input(args: Sequence[_Word], inner: Sequence[_Word]) -> list[_Word]:
    """The command xargs runs, its input in place: appended, or (``-I R``) in place of ``R``."""
    options: dict[str, list[str]] = {}
    spec = _WRAPPERS["xargs"]
    _skip_options([a.value for a in args[: len(args) - len(inner)]], spec.short_values,
                  spec.long_values, spec.short_optional, options)
    replace = next((v or "{}" for k in ("-I", "-i") for v in options.get(k, ())), None)
    if replace is None:
        replace = next((v or "{}" for k, vs in options.items()
                        if k.startswith("--") and _abbreviates(k, "--replace") for v in vs), None)
    if replace is None:
        return [*inner, _xargs_word()]
    return [inner[0], *(_xargs_word(w, replace) if replace in w.value else w for w in inner[1:])]


def _from_variable(word: _Word) -> bool:
    """A word that starts with a variable's value (not ``$HOME`` or ``~``, a home path): it
    may be an option ('-c CODE', '--exec=CMD', '-ccore.pager=...'), whatever the text shows."""
    return word.shell and word.path.startswith(_UNKNOWN)


def _hidden_word(name: str, word: _Word, findings: _Findings, what: str = "") -> None:
    findings.destroy(
        f"'{name} ... {_clip(word.value, 40)}': {what or 'a word'} taken from a variable (or "
        "xargs' input) may be an option that runs code ('-c CODE', '-e', a configuration), "
        "which the guard does not see: the user must confirm this exact call"
    )


# Programs that read options anywhere (GNU getopt permutes, git subcommands) and have options
# that run code or a program: any word of theirs from a variable may be such an option.
# (find, rm and chmod judge variables themselves.)
_OPTIONS_ANYWHERE = frozenset(
    {"git", "make", "gmake", "bmake", "cmake", "ssh", "scp", "sftp", "autossh", "rsync", "tar",
     "bsdtar", "gtar", "zip", "vim", "vi", "nvim", "ex", "view", "vimdiff", "gvim", "gdb",
     "lldb", "sort", "split", "man", "npx", "npm", "pnpm", "wget", "tcpdump", "apt", "apt-get",
     "apt-cache", "aptitude", "sqlite3", "ed"}
)
# Options whose next word is data (a message, a directory, an archive), whatever it holds.
_DATA_OPTIONS: dict[str, frozenset[str]] = {
    "git": frozenset({"-m", "--message", "-C"}),
    "make": frozenset({"-C", "--directory"}),
    "tar": frozenset({"-f", "--file", "-C", "--directory"}),
}


def _check_hidden_words(name: str, args: Sequence[_Word], findings: _Findings) -> None:
    data = _DATA_OPTIONS.get(_family(name) if name not in ("gtar", "bsdtar") else "tar",
                             frozenset())
    for k, word in enumerate(args):
        if not _from_variable(word):
            continue
        previous = args[k - 1].value if k else ""
        if previous in data or (
            name in ("tar", "gtar", "bsdtar") and re.fullmatch(r"-[A-Za-z]*[fC]", previous)
        ):
            continue  # 'git commit -m "$MSG"', 'tar -xf "$ARCHIVE"'
        _hidden_word(name, word, findings)
        return


# --- shells and interpreters --------------------------------------------

# A "file" that is the standard input (or a terminal, or another open descriptor): a script read
# from it is code the guard never sees. Matched on the lexically normalised path.
_STDIN_FILE = re.compile(
    r"(?:^|/)(?:dev/+(?:stdin|tty|fd(?:/|$))|proc/+[^/]+/+(?:task/+[^/]+/+)?fd(?:/|$)|fd/+[^/]*$)"
)


def _stdin_file(path: str) -> bool:
    """``-``, ``/dev/stdin``, ``/dev/fd/N``, ``/proc/self/fd/N``, ``/proc/PID/fd/N``, ``/dev/tty``
    and anything else under ``/dev`` or ``/proc``: no script or program file lives there."""
    if path == "-":
        return True
    normal = _normal(path.replace(_UNKNOWN, "x"))
    if normal.startswith(("/dev/", "/proc/")) or normal in ("/dev", "/proc"):
        return True
    return bool(_STDIN_FILE.search(normal))


def _check_shell(
    name: str, args: Sequence[_Word], findings: _Findings, allow_pipes: bool, depth: int
) -> None:
    values = [a.value for a in args]
    command_mode = stdin_mode = False
    i = 0
    while i < len(values):
        arg = values[i]
        if arg == "--":
            i += 1
            break
        if arg in ("--rcfile", "--init-file", "-o", "+o", "-O", "+O"):
            i += 2
            continue
        if arg.startswith("--"):
            i += 1
            continue
        if len(arg) > 1 and arg[0] in "-+":
            letters = arg[1:]
            if arg[0] == "-" and "c" in letters:
                command_mode = True
            if arg[0] == "-" and "s" in letters:
                stdin_mode = True
            if "o" in letters or "O" in letters:
                i += 1  # '-eo pipefail': the option name follows
            i += 1
            continue
        break
    operands = values[i:]
    # Options, and the script operand (where options are still read): 'sh $X' may be
    # 'sh -c CODE', 'bash "$X"' 'bash -cCODE'. Words after the script are its arguments.
    hidden = next((w for w in args[: i + 1] if _from_variable(w)), None)
    if hidden is not None:
        _hidden_word(name, hidden, findings)
    if command_mode:
        findings.inject(f"'{name} -c' runs a nested shell")
        if operands:
            _nested_line(operands[0], f"{name} -c", findings, allow_pipes, depth)
        return
    if stdin_mode or not operands or operands[0] == "-":
        findings.inject(
            f"'{name}' with no script reads its commands from standard input, which the guard "
            "does not see"
        )
        return
    if _stdin_file(args[i].path):
        findings.inject(
            f"'{name} {operands[0]}' reads its commands from standard input or another open "
            "file descriptor, which the guard does not see"
        )
        return
    # 'bash script.sh': a file; it runs in the sandbox like any program.


@attrs.frozen
class _Interpreter:
    code: str  # short options whose value is inline code
    long_code: tuple[str, ...]
    values: str  # short options that take a value that is not code
    ends: str  # short options after which the rest belongs to the program (python -m)
    first_operand_is_code: bool = False
    source_options: str = ""  # short options naming a program file or module (-f, -m, -r)
    attached: str = ""  # short options whose value can only be attached (perl -i.bak, -x)
    long_values: tuple[str, ...] = ()  # long options that take the next argument as value


_NODE_LONG_VALUES = (
    "--require", "--import", "--loader", "--experimental-loader", "--title", "--input-type",
    "--conditions", "--env-file", "--inspect-port", "--redirect-warnings", "--icu-data-dir",
    "--openssl-config", "--disable-warning", "--experimental-policy", "--diagnostic-dir",
    "--report-dir", "--report-filename", "--unhandled-rejections", "--dns-result-order",
    "--watch-path", "--test-reporter", "--test-reporter-destination", "--test-name-pattern",
    "--stack-trace-limit", "--trace-event-categories", "--trace-event-file-pattern",
    "--cpu-prof-dir", "--cpu-prof-name", "--heap-prof-dir", "--heap-prof-name",
    "--heapsnapshot-signal", "--secure-heap", "--tls-cipher-list", "--max-http-header-size",
)
_AWK_LONG_VALUES = (
    "--assign", "--field-separator", "--file", "--include", "--exec", "--load",
)
# Long options whose value names a program file (or a module loaded as code).
_LONG_SOURCES = frozenset({"--file", "--exec"})
# Long options whose value is a library loaded as code before the program.
_LONG_LIBRARIES = frozenset({"--include", "--load", "--require", "--import", "--loader",
                             "--experimental-loader"})
_INTERPRETERS: dict[str, _Interpreter] = {
    "python": _Interpreter("c", (), "WXQ", "m", source_options="m",
                           long_values=("--check-hash-based-pycs",)),
    "pypy": _Interpreter("c", (), "WXQ", "m", source_options="m",
                         long_values=("--check-hash-based-pycs",)),
    # perl: -I takes the next argument; -i, -x, -M, -m, -d, -D, -F only an attached value;
    # -l, -0 and -C attached digits (or -C letters), then more options ('-le', '-CSe').
    "perl": _Interpreter("eE", (), "I", "", attached="imMxdDF"),
    "ruby": _Interpreter("e", (), "IrCE", "", attached="xFiKlT0W"),
    "node": _Interpreter("ep", ("--eval", "--print"), "rC", "", source_options="r",
                         long_values=_NODE_LONG_VALUES),
    "nodejs": _Interpreter("ep", ("--eval", "--print"), "rC", "", source_options="r",
                           long_values=_NODE_LONG_VALUES),
    "deno": _Interpreter("", (), "", ""),
    "php": _Interpreter("rBRE", (), "dcz", "", source_options="f"),
    "lua": _Interpreter("e", (), "l", ""),
    "luajit": _Interpreter("e", (), "lj", ""),
    "Rscript": _Interpreter("e", (), "", ""),
    "tclsh": _Interpreter("", (), "", ""),
    "awk": _Interpreter("e", ("--source",), "vFfWiEl", "", True, "fE",
                        long_values=_AWK_LONG_VALUES),
    "gawk": _Interpreter("e", ("--source",), "vFfWiEl", "", True, "fE",
                         long_values=_AWK_LONG_VALUES),
    "mawk": _Interpreter("", (), "vFfW", "", True, "f"),
    "nawk": _Interpreter("", (), "vFf", "", True, "f"),
    "sed": _Interpreter("e", ("--expression",), "fl", "", True, "f",
                        long_values=("--file", "--line-length")),
    # Audit s40: more interpreters with inline code or a prompt that reads standard input.
    "R": _Interpreter("e", (), "", "", source_options="f", long_values=("--file",)),
    "julia": _Interpreter("eE", ("--eval", "--print"), "LJpt", "", attached="Og",
                          long_values=("--load", "--sysimage")),
    "expect": _Interpreter("c", (), "D", "", source_options="fb"),
    "octave": _Interpreter("", ("--eval",), "p", "", long_values=(
        "--path", "--exec-path", "--image-path", "--info-file", "--info-program",
        "--doc-cache-file", "--texi-macros-file")),
    "ipython": _Interpreter("c", (), "", "m", source_options="m"),
    "irb": _Interpreter("", (), "Ir", ""),
    "m4": _Interpreter("", (), "DUIlFRtoLWHBST", "", attached="d"),
    "gnuplot": _Interpreter("e", (), "", "c", source_options="c"),
}
# Python modules that read Python (or debugger commands, which run Python) from standard
# input: 'python -m code' is a REPL, 'python -m pdb x.py' a debugger prompt.
_PYTHON_PROMPTS = frozenset({"code", "pdb", "asyncio", "idlelib", "IPython", "ptpython",
                             "bpython", "rlcompleter", "idlelib.idle"})
# 'python -m timeit STMT...', '-s SETUP': statements given on the line are inline code.
_PYTHON_CODE_MODULES = frozenset({"timeit"})
# IPython's shell escapes and magics: '!id', 'x = !id', '%system id', '%%bash'.
_IPYTHON_SHELL = re.compile(r"(?m)(?:^|[;=])\s*!|%")
# gnuplot: '!CMD', system(), backticks, and files read from a command ("< CMD", "| CMD").
_GNUPLOT_SHELL = re.compile(r"!|[\"']\s*[<|]|\b(?:load|call|eval(?:uate)?|system|shell)\b")
_SPAWN = re.compile(
    r"\b(?:system|exec(?:l|lp|le|v|vp|ve|vpe|lpe|_command)?(?=\s*[(\s'\"])|popen\w*|spawn\w*"
    r"|fork\w*|subprocess|child_process|pty|__import__|importlib|eval|compile|getattr|"
    r"globals|builtins|ctypes|cffi|Open3|IO\s*\.\s*popen|Kernel|syscall|proc_open|shell_exec|"
    r"passthru|pcntl_\w+|os\s*\.\s*execute|io\s*\.\s*popen|require|Function|Deno\s*\.\s*"
    r"(?:run|Command)|Bun\s*\.\s*spawn|process\s*\.\s*binding|getline|qx)\b"
    r"|`|%x[({\[<|!/]|\bimport\s*\(|\|\s*[\"']|[\"']\s*\|"
    # os.posix_spawn, vars(os)["sys"+"tem"], os.__dict__[...], CORE::GLOBAL::, module._load
    r"|\b\w*spawn\w*|\bvars\s*\(|__dict__|CORE::|\b_load\b"
    # asyncio.create_subprocess_shell, Perl's readpipe, node's process.getBuiltinModule
    r"|\w*subprocess\w*|\breadpipe\b|\bgetBuiltinModule\b"
    # A name looked up at run time hides which function runs: operator.attrgetter('sys'+'tem'),
    # os.__getattribute__(...), methodcaller, Reflect.get, ... and a name glued together from
    # string literals ('sys' + 'tem', "child_" + "process", Perl's 'sys' . 'tem').
    r"|\b(?:attrgetter|methodcaller|__getattr(?:ibute)?__|Reflect\s*\.\s*(?:get|apply)|"
    r"__builtins__|__subclasses__|__globals__)\b"
    r"|([\"'])[^\"'\n]*\1\s*[+.]\s*([\"'])[^\"'\n]*\2"
    # Perl's open with a pipe in the mode, however the string is quoted: open(F, q(|id)),
    # open(my $f, "-|", "id"). ('||' and '|=' are operators, not pipes.)
    r"|\bopen\s*\(?[^;\n]{0,200}?(?<!\|)\|(?![|=])"
)
# In awk, a '|' outside strings and regular expressions that is not '||' is a pipe to or from a
# command ('print ... | cmd', 'cmd | getline', '|&' a coprocess), whatever the command is held
# in and whatever the printed text holds.
_AWK_STRING = re.compile(r'"(?:\\.|[^"\\\n])*"?')
# A regular expression literal: a '/' where an operand starts (not a division).
_AWK_REGEX = re.compile(r'(^|[(,{;!~&|?:\n=]\s*)/(?:\\.|[^/\\\n])*/?')
_AWK_PIPE = re.compile(r"(?<!\|)\|(?!\|)&?")


def _awk_pipe(code: str) -> re.Match[str] | None:
    """The first pipe to or from a command in awk code, if any (one pass per pattern)."""
    skeleton = _AWK_STRING.sub('""', code)
    skeleton = _AWK_REGEX.sub(lambda m: m.group(1) + "//", skeleton)
    return _AWK_PIPE.search(skeleton)
_DEVICE_TEXT = re.compile(
    r"/dev/+(?:sd|hd|vd|xvd|nvme|mmcblk|dm-|md|loop|mapper/|disk/|sr|mtd|nbd|rbd|zd|mem\b|"
    r"block/|char/|bsg/|sg[0-9]|ram[0-9]|zram|pmem|cciss/|"
    r"kmem\b|port\b)"
)


# The command string of system("..."), popen('...'), `...` and the like in inline code.
_SPAWNED_STRING = re.compile(
    r"(?:system|popen|exec\w*|spawn\w*|check_output|check_call|getoutput|run|call|qx|"
    r"shell_exec|passthru|execute)\s*\(?\s*([\"'])([^\n]{1,1024}?)(?<!\\)\1"
)
# A deleting call with the root, a home, '..' or a root glob as a literal argument.
_DELETE_CODE = re.compile(
    r"\b(?:rmtree|unlink|rm_rf|rm_r|remove_dir_all|rmdir|remove|rimraf|rmSync|rm|"
    r"deleteSync|removedirs)\b[^;\n]{0,80}?[\"'](?:/+\.?/*\*?|~/?\*?|\.\./?|\$HOME/?)[\"']"
)


def _sed_runs(script: str) -> bool:
    """GNU sed's 'e' command and the 'e' flag of 's' run shell commands.

    Read by :func:`_sed_parse_runs` alone, in one pass. (Regular expressions that blanked
    's' parts by their delimiter were dropped: each 's' followed by a delimiter that never
    closes scanned to the end of the script, quadratic in its length, 2.6 s for 16 KB; and
    what they found beyond the reader was text of 'a'/'i'/'c', file names and comments.)
    """
    return _sed_parse_runs(script)


def _sed_parse_runs(script: str) -> bool:
    """Walk the script command by command, as GNU sed reads it: any character but a backslash
    or newline delimits 's' and 'y' (``sQaQbQe``, ``s x y e``). True on an 'e' command or flag,
    and when the script cannot be read (fail closed)."""
    i, n = 0, len(script)

    def delimited(k: int, delim: str) -> int:
        # Index just past the closing delimiter of a part starting at k, or -1.
        while k < n:
            c = script[k]
            if c == "\\":
                k += 2
                continue
            if c == "\n" and delim != "\n":
                return -1
            if c == delim:
                return k + 1
            k += 1
        return -1

    def address(k: int) -> int:
        while k < n and script[k] in " \t":
            k += 1
        if k < n and script[k] in "/\\":
            delim = script[k] if script[k] == "/" else script[k + 1 : k + 2]
            start = k + 1 if script[k] == "/" else k + 2
            if not delim:
                return -1
            k = delimited(start, delim)
            if k < 0:
                return -1
            while k < n and script[k] in "IM":
                k += 1
            return k
        while k < n and (script[k].isdigit() or script[k] in "$~+"):
            k += 1
        return k

    while i < n:
        c = script[i]
        if c in " \t\n;{}!":
            i += 1
            continue
        if c == "#":
            end = script.find("\n", i)
            i = n if end < 0 else end
            continue
        i = address(i)
        if i < 0:
            return True
        if i < n and script[i] == ",":
            i = address(i + 1)
            if i < 0:
                return True
        while i < n and script[i] in " \t!":
            i += 1
        if i >= n:
            break
        command = script[i]
        i += 1
        if command == "e":
            return True
        if command in "sy":
            if i >= n or script[i] in "\\\n":
                return True
            delim = script[i]
            i = delimited(i + 1, delim)
            if i < 0:
                return True
            i = delimited(i, delim)
            if i < 0:
                return True
            while i < n and script[i] not in ";\n}#":
                if command == "s" and script[i] == "e":
                    return True
                if command == "s" and script[i] in "wW":
                    break  # 'w FILE' takes the rest of the line
                i += 1
            end = script.find("\n", i) if i < n and script[i] in "wW" else i
            i = n if end < 0 else end
        elif command in "aicrRwWbtTvl:qQLz=dDgGhHnNpPx" or command.isalpha():
            if command in "aicrRwW:":
                # Text or a file name: the rest of the line; a/i/c text goes on over lines
                # that end in a backslash ('a\' NEWLINE 'text').
                while True:
                    end = script.find("\n", i)
                    if end < 0:
                        i = n
                        break
                    i = end + 1
                    # (Not 'script[:end].endswith': a copy per line is quadratic.)
                    if command not in "aic" or script[end - 1 : end] != "\\":
                        i = end
                        break
            else:
                while i < n and script[i] not in ";\n}":
                    i += 1
        elif command in "{}":
            continue
        else:
            return True
    return False


def _check_interpreter(
    family: str, name: str, words: Sequence[_Word], findings: _Findings
) -> None:
    spec = _INTERPRETERS[family]
    values = [w.value for w in words]
    codes: list[str] = []
    code_words: list[_Word] = []  # the words that hold inline code
    sources: list[str] = []  # program files named by options (awk -f FILE, sed -f FILE)
    module_code: list[str] = []  # perl -M/-m values, which perl pastes into its code
    has_source = False
    prompt = False  # an interactive prompt reads standard input after the program
    stop = False
    i, n = 0, len(values)
    while i < n:
        arg = values[i]
        if arg == "--":
            i += 1
            break
        if not arg.startswith("-") or arg == "-":
            break
        if arg.startswith("--"):
            _, eq, value = arg.partition("=")
            key = _long_option(arg, (*spec.long_code, *spec.long_values)) or arg.split("=")[0]
            takes = key in spec.long_code or key in spec.long_values
            if takes and not eq and i + 1 < n:
                i += 1
                value = values[i]
            if key in spec.long_code:
                codes.append(value)
                code_words.append(words[i])
            elif takes and key in _LONG_SOURCES | _LONG_LIBRARIES:
                has_source = has_source or key in _LONG_SOURCES
                sources.append(value)
            i += 1
            continue
        j, stop = 1, False
        while j < len(arg):
            letter = arg[j]
            if (family in ("python", "pypy", "lua", "luajit", "ipython") and letter == "i") or (
                family == "perl" and letter == "d" and arg[j + 1 : j + 2] not in (":", "t")
            ):
                # 'python -i x.py', 'lua -i x.lua': a prompt after the program; 'perl -d': the
                # debugger's prompt, which evaluates Perl. Both read standard input.
                prompt = True
            if letter in spec.attached:
                if family == "perl" and letter in "mM":
                    # '-MFoo=a,b' becomes 'use Foo split(/,/,q{a,b});' before the program:
                    # "-M'strict; system q(id)'" is inline code too.
                    module_code.append(arg[j + 1 :])
                break  # the rest of the word is its value
            if family == "perl" and letter in "l0C":
                # '-l012', '-0777', '-0x1F', '-CSD': the value is these characters only.
                j += 1
                if letter == "0" and arg[j : j + 1] == "x":
                    allowed = "0123456789abcdefABCDEF"
                    j += 1
                else:
                    allowed = "0123456789IOEioSADLa" if letter == "C" else "01234567"
                while j < len(arg) and arg[j] in allowed:
                    j += 1
                continue
            if letter in spec.code or letter in spec.values or letter in spec.ends:
                value = arg[j + 1 :]
                if not value and i + 1 < n:
                    i += 1
                    value = values[i]
                if letter in spec.code:
                    codes.append(value)
                    code_words.append(words[i])
                    # python -c: everything after the code is its arguments.
                    stop = family in ("python", "pypy")
                if letter in spec.source_options:
                    has_source = True
                    sources.append(value)
                elif letter in "il" and family in ("awk", "gawk"):
                    sources.append(value)  # gawk -i/-l: a library, then the program
                if letter == "W" and family in ("awk", "gawk", "mawk") and value.startswith("e"):
                    # mawk '-W exec FILE': the program is read from FILE.
                    has_source = True
                    if i + 1 < n:
                        i += 1
                        sources.append(values[i])
                    stop = True
                if letter in spec.ends:
                    stop = True
                break
            j += 1
        i += 1
        if stop:
            break
    operands = values[i:] if i <= n else []
    if family in ("python", "pypy", "ipython") and stop and sources and not codes:
        module = sources[-1]
        if module in _PYTHON_PROMPTS:
            prompt = True
        elif module in _PYTHON_CODE_MODULES:
            # 'python -m timeit [-s SETUP] STMT...': every statement is inline code.
            k = i
            while k < n:
                if values[k] in ("-s", "--setup") and k + 1 < n:
                    codes.append(values[k + 1])
                    code_words.append(words[k + 1])
                    k += 2
                    continue
                if values[k] in ("-n", "--number", "-r", "--repeat", "-u", "--unit"):
                    k += 2
                    continue
                if not values[k].startswith("-"):
                    codes.append(values[k])
                    code_words.append(words[k])
                k += 1
    if prompt:
        findings.destroy(f"'{name}' opens a prompt that reads code from standard input, which "
                         "the guard does not see: the user must confirm this exact call")
    # '--version' and '--help' end the interpreter before it reads any code.
    informational = any(v in ("--version", "--help") for v in values[:i])
    # Options are read up to the first operand, and that word may be one: 'python3 "$X"' runs
    # '-cCODE', 'awk "$X"' and 'perl $X' may be '-e CODE'. GNU sed reads options anywhere.
    # After python's -c CODE (or -m) everything is the program's.
    end = n if family == "sed" else (i if stop else i + 1)
    hidden = next((w for w in words[:end] if _from_variable(w)), None)
    if hidden is not None:
        _hidden_word(name, hidden, findings)
    if not codes and spec.first_operand_is_code and operands and not has_source:
        codes.append(operands[0])
        code_words.append(words[i])
    elif not codes and not has_source and operands and not spec.first_operand_is_code:
        has_source = not _stdin_file(operands[0])
    for word in code_words:
        if word.shell and _UNKNOWN in word.path:
            # 'python3 -c "print($X)"', "sed \"s/a/$B/\"": the variable's value is code too.
            findings.destroy(
                f"inline {family} code holds a variable's value ({word.expansion}), code the "
                "guard does not see: the user must confirm this exact call"
            )
            break
    if any(_stdin_file(source) for source in sources if family not in ("python", "pypy")):
        # 'awk -f /dev/stdin', 'sed -f -': the program comes from standard input.
        if family == "sed":
            findings.inject(
                "a sed script read from standard input may hold the 'e' command, which runs "
                "shell commands out of the guard's sight"
            )
        else:
            findings.destroy(
                f"'{name}' reads its program from standard input or an open file descriptor, "
                "which the guard does not see: the user must confirm this exact call"
            )
    if not codes and not has_source and not spec.first_operand_is_code and not informational:
        # The code is unseen, and inline code can run anything: the user must see this call.
        findings.destroy(
            f"'{name}' with no program reads its code from standard input, which the guard "
            "does not see: the user must confirm this exact call"
        )
    for code in [*codes, *module_code]:
        if len(code) > MAX_COMMAND_CHARS:
            # The scans below are regular expressions: keep their cost bounded.
            findings.destroy(
                f"inline {family} code is longer than {MAX_COMMAND_CHARS} characters, too long "
                "for the guard to read: the user must confirm this exact call"
            )
            continue
        if family == "sed":
            if _sed_runs(code):
                findings.inject(
                    "a sed script with the 'e' command or flag runs shell commands, out of the "
                    "guard's sight; run that command directly instead"
                )
        else:
            spawn = _SPAWN.search(code) or (
                _awk_pipe(code) if family in ("awk", "gawk", "mawk", "nawk") else None
            ) or (_IPYTHON_SHELL.search(code) if family == "ipython" else None) or (
                _GNUPLOT_SHELL.search(code) if family == "gnuplot" else None
            )
            if spawn:
                # Interpreters' inline code can run anything: it is not refused (python -c is an
                # everyday tool), but it needs the user's confirmation of this very call, even
                # for an always-allowed tool.
                findings.destroy(
                    f"inline {family} code can start other programs ({spawn.group()!r}) out of "
                    "the guard's sight: the user must confirm this exact call"
                )
            for literal in _SPAWNED_STRING.finditer(code):
                inner = _Findings()
                _analyze_line(literal.group(2), False, inner, MAX_DEPTH)
                for reason in inner.destructive:
                    findings.destroy(f"in the command the inline {family} code runs: {reason}")
        if _DEVICE_TEXT.search(code):
            findings.destroy(f"inline {family} code names a disk device")
        if _DELETE_CODE.search(code):
            findings.destroy(f"inline {family} code deletes the root, a home or a parent tree")


# --- programs with their own ways to run commands ---------------------------

_GIT_CODE_KEYS = re.compile(
    r"^(?:core\.(?:fsmonitor|sshcommand|pager|editor|askpass|hookspath|gitproxy|"
    r"alternaterefscommand|worktree)|sequence\.editor|diff\.external|diff\..+\.(?:textconv|"
    r"command)|merge\..+\.driver|(?:diff|merge)tool\..+\.(?:cmd|path)|filter\..+|"
    r"credential(?:\..+)?\.helper|gpg(?:\..+)?\.program|uploadpack\.packobjectshook|"
    r"include(?:if\..+)?\.path|pager\..+|alias\..+|protocol(?:\..+)?\.allow|url\..+|"
    r"remote\..+\.(?:uploadpack|receivepack|proxy|vcs)|submodule\..+\.update|"
    r"init\.templatedir|(?:web|browser|man|instaweb)\..*|sendemail\..+|"
    r"trailer\..+\.(?:command|cmd)|interactive\.difffilter|ssh\.variant|http\..*proxy.*|"
    r"core\.fsmonitorhookversion|safe\.bareRepository|receive\.procreceiverefs|"
    r"notes\.rewritemode|gc\..*hook.*|maintenance\..+|hook\..+|gpg\.ssh\.defaultkeycommand|"
    r"core\.editor|diff\..+\.cmd|(?:status|log|diff)\.external)$",
    re.IGNORECASE,
)


def _git_key(findings: _Findings, pair: str, how: str) -> None:
    key = pair.split("=", 1)[0].strip()
    if _GIT_CODE_KEYS.match(key):
        findings.inject(f"{how} {key} makes git run a program (or load configuration) of the "
                        "caller's choosing")


# Options of git subcommands that run a program (or take configuration), by subcommand.
_GIT_PROGRAM_OPTIONS: dict[str, tuple[str, ...]] = {
    "clone": ("--upload-pack", "--config"),
    "fetch": ("--upload-pack",),
    "pull": ("--upload-pack",),
    "ls-remote": ("--upload-pack",),
    "fetch-pack": ("--upload-pack", "--exec"),
    "archive": ("--exec",),
    "push": ("--receive-pack", "--exec"),
    "send-pack": ("--receive-pack", "--exec"),
}


def _check_git(
    name: str, args: Sequence[_Word], findings: _Findings, allow_pipes: bool, depth: int
) -> None:
    values = [a.value for a in args]
    i, n = 0, len(values)
    while i < n:
        arg = values[i]
        if arg == "-c" and i + 1 < n:
            _git_key(findings, values[i + 1], "'git -c'")
            i += 2
        elif arg.startswith("-c") and not arg.startswith("--"):
            _git_key(findings, arg[2:], "'git -c'")  # not a git spelling today: fail closed
            i += 1
        elif arg.startswith("--config-env"):
            findings.inject("'git --config-env' takes configuration from an environment "
                            "variable, out of the guard's sight")
            i += 1 if "=" in arg else 2
        elif arg in ("-C", "--work-tree", "--namespace", "--super-prefix", "--list-cmds",
                     "--attr-source"):
            i += 2
        elif arg == "--git-dir" or arg.startswith("--git-dir="):
            findings.inject("'git --git-dir' reads configuration and hooks from a directory the "
                            "guard cannot vouch for")
            i += 1 if "=" in arg else 2
        elif arg.startswith("--exec-path="):
            findings.inject("'git --exec-path=DIR' runs git commands from DIR")
            i += 1
        elif arg.startswith("-"):
            i += 1
        else:
            break
    if i >= n:
        return
    sub, rest, words = values[i], values[i + 1 :], args[i + 1 :]
    for value in rest:
        if value.startswith("ext::") or "::" in value.split("/", 1)[0] and "ext::" in value:
            findings.inject("an 'ext::' URL makes git run a command")
    if sub in ("init", "clone") and any(_abbreviates(v, "--template") for v in rest):
        findings.inject(f"'git {sub} --template' copies hooks of the caller's choosing")
    if sub == "config":
        operands, k = [], 0
        while k < len(rest):
            value = rest[k]
            if value in ("-f", "--file", "--blob", "--type", "--default", "--comment", "--value"):
                k += 2  # an option with its value, not the key
                continue
            if not value.startswith("-"):
                operands.append(value)
            k += 1
        if operands[:1] and operands[0] in ("set", "add", "replace-all"):
            operands = operands[1:]
        if operands and (len(operands) >= 2 or any("=" in o for o in operands[:1])):
            _git_key(findings, operands[0], "'git config'")
    elif sub in ("clone", "fetch", "pull", "ls-remote", "archive", "push", "remote", "submodule",
                 "fetch-pack", "send-pack"):
        # Abbreviations ('--upload-pa') are matched among the options this subcommand has, so
        # that '--rec' of fetch stays '--recurse-submodules'.
        own = _GIT_PROGRAM_OPTIONS.get(sub, ())
        for k, value in enumerate(rest):
            key = _long_option(value, own) or value.split("=", 1)[0]
            if key in ("--upload-pack", "--receive-pack", "--exec") or (
                value == "-u" and sub in ("clone", "ls-remote", "fetch-pack")
            ):
                findings.inject(f"'git {sub} {key}' runs a program of the caller's choosing")
            if key in ("-c", "--config") and sub in ("clone", "submodule"):
                pair = value.split("=", 1)[1] if "=" in value and key == "--config" else (
                    rest[k + 1] if k + 1 < len(rest) else "")
                _git_key(findings, pair, f"'git {sub} {key}'")
        if sub == "submodule" and "foreach" in rest:
            findings.inject("'git submodule foreach' runs a shell command")
            after = rest[rest.index("foreach") + 1 :]
            after = [v for v in after if v != "--recursive"]
            if after:
                _nested_line(" ".join(after), "git submodule foreach", findings, allow_pipes,
                             depth)
    elif sub == "rebase":
        for k, value in enumerate(rest):
            exec_option = _long_option(value, ("--exec",)) is not None  # '--exe' too
            if (value == "-x" or exec_option and "=" not in value) and k + 1 < len(rest):
                findings.inject(f"'git rebase {value}' runs a shell command")
                _nested_line(rest[k + 1], "git rebase --exec", findings, allow_pipes, depth)
            elif exec_option or (value.startswith("-x") and len(value) > 2):
                script = value.split("=", 1)[1] if "=" in value else value[2:]
                findings.inject("'git rebase --exec' runs a shell command")
                _nested_line(script, "git rebase --exec", findings, allow_pipes, depth)
    elif sub == "bisect" and rest[:1] == ["run"]:
        _check_command(words[1:], findings, allow_pipes, depth + 1)
    elif sub in ("difftool", "mergetool"):
        if any(v.startswith("-x") or _long_option(v, ("--extcmd",)) for v in rest):
            findings.inject(f"'git {sub} --extcmd' runs a program of the caller's choosing")
    elif sub == "filter-branch":
        findings.inject("'git filter-branch' runs its filters as shell commands")
    elif sub == "grep":
        if any(v.startswith("-O") or _long_option(v, ("--open-files-in-pager",))
               for v in rest):
            findings.inject("'git grep -O' runs a pager program of the caller's choosing")
    elif sub == "send-email":
        if any(_long_option(v, ("--to-cmd", "--cc-cmd", "--header-cmd", "--sendmail-cmd"))
               or (_long_option(v, ("--smtp-server",)) and v.partition("=")[2].startswith("/"))
               for v in rest):
            findings.inject("'git send-email' would run a program of the caller's choosing")
    loss = _git_data_loss(sub, rest)
    if loss:
        findings.destroy(f"'git {sub}' {loss}")


def _git_data_loss(sub: str, rest: Sequence[str]) -> str | None:
    """What a git subcommand destroys that no commit holds (or rewrites on a remote), if
    anything: uncommitted changes, untracked files, stashes, unmerged branches, history."""
    flags, operands = _flags(rest)
    if sub == "clean":
        if not (flags & {"n"} or _has_long(flags, "--dry-run")) and (
            flags & {"f"} or _has_long(flags, "--force")
        ):
            return "deletes untracked files (and with -x ignored ones) beyond recovery"
    elif sub == "reset":
        if _has_long(flags, "--hard") or _has_long(flags, "--merge") or _has_long(
            flags, "--keep"
        ):
            return "--hard throws away uncommitted changes"
    elif sub in ("checkout", "restore"):
        staged_only = sub == "restore" and (
            flags & {"S"} or _has_long(flags, "--staged")
        ) and not (flags & {"W"} or _has_long(flags, "--worktree"))
        paths = [o for o in operands if o]
        # 'git checkout -- PATHS', 'git checkout .', 'git restore PATHS', and -f (discards
        # changes while switching): working-tree edits are overwritten.
        if not staged_only and (
            (sub == "restore" and paths) or "--" in rest or "." in paths
            or flags & {"f"} or _has_long(flags, "--force")
            or any(_matches_all(p) for p in paths)
        ):
            return "overwrites uncommitted changes in the working tree"
    elif sub == "stash" and operands[:1] in (["clear"], ["drop"]):
        return f"{operands[0]} deletes stashed changes"
    elif sub == "branch" and ("D" in flags or (flags & {"d"} and (
        flags & {"f"} or _has_long(flags, "--force")
    )) or _has_long(flags, "--delete") and _has_long(flags, "--force")):
        return "-D deletes a branch whether or not it was merged"
    elif sub == "switch" and (
        flags & {"f"} or _has_long(flags, "--force") or _has_long(flags, "--discard-changes")
    ):
        return "--discard-changes overwrites uncommitted changes in the working tree"
    elif sub == "push" and (
        flags & {"f", "d"} or any(f.startswith("--force") for f in flags)
        or _has_long(flags, "--mirror")
        or _has_long(flags, "--delete") or _has_long(flags, "--prune")
        or any(o.startswith("+") or o.startswith(":") for o in operands)
    ):
        return "rewrites or deletes history on a remote (force, delete, mirror)"
    elif sub == "reflog" and operands[:1] in (["expire"], ["delete"]):
        return "drops the reflog, the record that recovers lost commits"
    elif sub == "gc" and any(v.startswith("--prune=now") for v in rest):
        return "--prune=now deletes unreachable commits at once"
    elif sub == "update-ref" and flags & {"d"}:
        return "-d deletes a ref"
    elif sub == "rm" and (flags & {"f"} or _has_long(flags, "--force")) and not (
        flags & {"n"} or _has_long(flags, "--dry-run") or _has_long(flags, "--cached")
    ):
        # Without -f git refuses to remove files with changes; with it, they are lost.
        return "-f deletes files together with their uncommitted changes"
    return None


def _check_find(
    name: str, args: Sequence[_Word], findings: _Findings, allow_pipes: bool, depth: int
) -> None:
    values = [a.value for a in args]
    i, n = 0, len(values)
    while i < n and values[i] in ("-H", "-L", "-P") or (i < n and values[i].startswith("-O")):
        i += 1
    if i < n and values[i] == "-D":
        i += 2
    roots: list[_Word] = []
    while i < n and not values[i].startswith(("-", "(", "!", ",")) and values[i] != ")":
        roots.append(args[i])
        i += 1
    expression = values[i:]
    deletes = "-delete" in expression
    hidden = next(
        (
            w.value
            for k, w in enumerate(args)
            if w.path.startswith(_UNKNOWN)
            # A quoted variable as the value of a test ('-name "$PATTERN"') is one word, a
            # value: it cannot become an action. Anywhere else it may ('"$X"' = '-delete').
            and not (w.quoted and k > i and values[k - 1] in _FIND_VALUE_TESTS)
        ),
        None,
    )
    if hidden is not None:
        # '$X' (a root or in the expression) may split into '-delete' or '-exec CMD ;', a
        # quoted one into '-delete': what find would do is not in the text.
        findings.destroy(f"'find ... {hidden}' takes part of its expression from a variable, "
                         "which may hold -delete or -exec")
    # The expression as operators and primaries (narrows, deletes), for _find_guarded.
    items: list[str | tuple[bool, bool]] = []
    k = i
    while k < n:
        value = values[k]
        if value in ("-exec", "-execdir", "-ok", "-okdir"):
            end = k + 1
            while end < n and values[end] not in (";", "+"):
                end += 1
            inner = list(args[k + 1 : end])
            removes = False
            if inner:
                _check_command(inner, findings, allow_pipes, depth + 1)
                program = _basename(inner[0].value)
                removes = program in ("rm", "shred", "unlink", "rmdir", "srm", "wipe")
                deletes = deletes or removes
            items.append((False, removes))
            k = end + 1
            continue
        if value in _FIND_OPERATORS:
            items.append(value)
            k += 1
            continue
        if value in _FIND_VALUE_TESTS and k + 1 < n:
            items.append((value in _FIND_RESTRICTING and _find_narrows(value, values[k + 1]),
                          False))
            k += 2
            continue
        if value in ("-fprint", "-fprint0", "-fprintf", "-fls") and k + 1 < n:
            if _is_device(args[k + 1].path):
                findings.destroy(f"'find {value} {values[k + 1]}' overwrites a disk device")
            k += 3 if value == "-fprintf" else 2
            items.append((False, False))
            continue
        items.append((value == "-empty", value == "-delete"))
        k += 1
    if not deletes:
        return
    restricted = _find_guarded(items)
    for root in roots or [_Word.literal(".")]:
        danger = _target_danger(root.path)
        if danger is None:
            continue
        if _local(danger) and restricted:
            continue
        findings.destroy(f"'find {root.value} ... -delete' deletes {danger}")


_FIND_OPERATORS = frozenset({"!", "-not", "(", ")", "-o", "-or", "-a", "-and", ","})


def _find_guarded(items: Sequence[str | tuple[bool, bool]]) -> bool:
    """Whether every deletion in a find expression runs only once a narrowing test held.

    ``items``: operators and primaries (narrows, deletes). Read as find reads it (``!`` binds
    closest, then ``-a``, then ``-o``, then ``,``): under ``-a`` a test narrows what follows it;
    ``! -name keep -delete`` and ``-name keep -o -delete`` delete everything else. An
    expression that does not parse counts as not narrowed.
    """
    pos = 0

    def primary() -> tuple[bool, bool] | None:  # (narrows, safe) of one operand
        nonlocal pos
        if pos >= len(items):
            return None
        item = items[pos]
        pos += 1
        if item in ("!", "-not"):
            inner = primary()
            return None if inner is None else (False, inner[1])
        if item == "(":
            inner = alternatives(",")
            if inner is None or pos >= len(items) or items[pos] != ")":
                return None
            pos += 1
            return inner
        if isinstance(item, str):
            return None
        narrows, deletes = item
        return narrows, not deletes

    def chain() -> tuple[bool, bool] | None:  # '-a' (explicit or implied)
        nonlocal pos
        narrowed, safe = False, True
        while True:
            operand = primary()
            if operand is None:
                return None
            # A deletion in this operand is safe if an earlier operand narrowed, or itself is.
            safe = safe and (narrowed or operand[1])
            narrowed = narrowed or operand[0]
            if pos < len(items) and items[pos] in ("-a", "-and"):
                pos += 1
            elif pos >= len(items) or items[pos] in ("-o", "-or", ",", ")"):
                return narrowed, safe

    def alternatives(top: str = "") -> tuple[bool, bool] | None:  # '-o', then ','
        nonlocal pos
        narrowed, safe = True, True
        while True:
            branch = chain()
            if branch is None:
                return None
            narrowed, safe = narrowed and branch[0], safe and branch[1]
            if pos < len(items) and items[pos] in ("-o", "-or", ","):
                pos += 1
            else:
                return narrowed, safe

    whole = alternatives()
    return whole is not None and pos == len(items) and whole[1]


# Tests (with a value) that may narrow what 'find -delete' deletes; _find_narrows judges the value.
# -user/-group/-uid/-gid are left out: in the sandbox every file belongs to the one user.
_FIND_RESTRICTING = frozenset(
    {"-name", "-iname", "-path", "-ipath", "-wholename", "-iwholename", "-regex", "-iregex",
     "-newer", "-mtime", "-mmin", "-atime", "-amin", "-ctime", "-cmin", "-size", "-perm",
     "-lname", "-ilname", "-inum", "-samefile", "-links", "-newermt"}
)
# Tests whose next word is their value (not an action or an operator).
_FIND_VALUE_TESTS = _FIND_RESTRICTING | frozenset(
    {"-type", "-xtype", "-user", "-group", "-uid", "-gid", "-maxdepth", "-mindepth", "-fstype",
     "-printf", "-fprint", "-used", "-context"}
)
_FIND_TIMES = {"-mtime": 30, "-atime": 30, "-ctime": 30, "-mmin": 43_200, "-amin": 43_200,
               "-cmin": 43_200}
_SIZE_UNITS = {"c": 1, "w": 2, "b": 512, "k": 1024, "M": 1 << 20, "G": 1 << 30}


def _find_narrows(test: str, value: str) -> bool:
    """Whether ``find TEST VALUE`` clearly narrows a deletion (``-name '*.o'``, ``-mmin -5``);
    ``-name '?*'``, ``-regex '.*'``, ``-size -99999999k`` or ``-mtime +1`` do not."""
    if test in ("-name", "-iname", "-path", "-ipath", "-wholename", "-iwholename", "-regex",
                "-iregex", "-lname", "-ilname"):
        # A literal name part narrows; wildcards, brackets and regex operators alone do not.
        literal = re.sub(r"\{[0-9,]*\}", "", _BRACKET.sub("", value))
        return any(c.isalnum() or c in "_-~#@%" for c in literal.replace("\\", ""))
    if test in _FIND_TIMES:
        match = re.fullmatch(r"([-+]?)([0-9]+)", value)
        if not match:
            return False
        sign, number = match.group(1), int(match.group(2))
        # '-mmin -5': changed recently (narrow); '+N' is everything older (most of a tree).
        return sign != "+" and number <= _FIND_TIMES[test]
    if test == "-size":
        match = re.fullmatch(r"([-+]?)([0-9]+)([cwbkMG]?)", value)
        if not match:
            return False
        sign, number = match.group(1), int(match.group(2))
        size = number * _SIZE_UNITS[match.group(3) or "b"]
        if sign == "-":
            return size <= 4096
        return sign == "" or size > 0
    return True


def _check_remote_shells(
    name: str, args: Sequence[_Word], findings: _Findings, allow_pipes: bool, depth: int
) -> None:
    values = [a.value for a in args]
    for k, value in enumerate(values):
        nxt = values[k + 1] if k + 1 < len(values) else ""
        if name in ("ssh", "scp", "sftp", "autossh"):
            option = value[2:] if value.startswith("-o") and len(value) > 2 else (
                nxt if value == "-o" else "")
            if re.match(r"(?i)\s*(proxycommand|localcommand|permitlocalcommand|knownhostscommand"
                        r"|match\s+exec)", option):
                findings.inject(f"'{name} -o {option.split('=')[0]}' runs a local command")
            if value == "-F" or (value.startswith("-F") and len(value) > 2):
                findings.inject(f"'{name} -F' reads a configuration that can run commands")
            if name in ("scp", "sftp") and (value == "-S" or value.startswith("-S")):
                findings.inject(f"'{name} -S' runs a program of the caller's choosing")
        elif name == "rsync":
            if _long_option(value, ("--rsh", "--rsync-path")) or _rsync_short_e(value):
                findings.inject("'rsync -e/--rsh/--rsync-path' runs a command of the caller's "
                                "choosing")
        elif name in ("tar", "bsdtar", "gtar"):
            if any(_abbreviates(value, option, ("--checkpoint",))
                   for option in _TAR_PROGRAM_OPTIONS) or _tar_short_program(value, k == 0):
                findings.inject(f"'{name} {value.split('=')[0]}' runs a program of the caller's "
                                "choosing")
        elif name in ("zip",):
            if value.startswith("-TT") or _abbreviates(value, "--unzip-command"):
                findings.inject("'zip -TT' runs a command of the caller's choosing")
        elif name in ("vim", "vi", "nvim", "ex", "view", "vimdiff", "gvim"):
            if value in ("-c", "--cmd", "-S") or value.startswith("+"):
                findings.inject(f"'{name} {value}' runs editor commands, which can run programs")
        elif name in ("gdb", "lldb"):
            if value in ("-ex", "-x", "-iex", "-ix", "-batch", "-o") or _long_option(
                value, ("--eval-command", "--command", "--one-line", "--init-eval-command",
                        "--init-command")):
                findings.inject(f"'{name} {value}' runs debugger commands, which can run programs")
        elif name in ("at", "batch", "crontab"):
            if not (name == "crontab" and value in ("-l", "-r", "-e")):
                findings.inject(f"'{name}' schedules shell commands to run later")
                break
        elif name in ("parallel",):
            findings.inject("'parallel' runs its arguments as shell commands")
            break
    if name in ("at", "batch") and not values:
        findings.inject(f"'{name}' schedules shell commands to run later")
    if name in ("gdb", "lldb") and not any(
        v in ("-batch", "--batch", "-b", "-batch-silent", "--batch-silent", "--version",
              "-version", "--help", "-help", "-v", "--configuration") for v in values
    ):
        # Without batch mode the debugger reads its commands from standard input, where
        # 'shell CMD' (or 'platform shell', 'script') runs anything: 'gdb --args rm -rf ~'.
        findings.destroy(f"'{name}' reads debugger commands from standard input, where "
                         "'shell CMD' runs a shell command the guard does not see: the user "
                         "must confirm this exact call")
    if name in ("vim", "vi", "nvim", "ex", "view", "vimdiff", "gvim"):
        _check_ed(name, args, findings, allow_pipes, depth)  # ex mode reads stdin


def _rsync_short_e(value: str) -> bool:
    """rsync's -e among short flags, its value attached or next: '-e', '-avze', '-e"sh -c id"',
    '-avessh'. rsync's other short options take no value, except -B, -M, -T and -@ ('-T DIR'),
    whose value ends the word."""
    if not value.startswith("-") or value.startswith("--"):
        return False
    for letter in value[1:]:
        if letter == "e":
            return True
        if letter in "BMTf@" or not letter.isalnum():
            return False
    return False


_TAR_PROGRAM_OPTIONS = ("--to-command", "--checkpoint-action", "--use-compress-program",
                        "--info-script", "--new-volume-script", "--rsh-command")
# tar's short options that take a value; -I (compress program) and -F (volume script) run one.
_TAR_SHORT_VALUES = "bCfFgHIKLNTVX"


def _tar_short_program(value: str, first: bool) -> bool:
    """``-I PROG``, ``-xIprog``, ``-cvIprog``, or old-style ``tar cIf PROG ...`` (first word)."""
    if value.startswith("--"):
        return False
    if value.startswith("-"):
        letters = value[1:]
    elif first and value.isalpha():
        return "I" in value or "F" in value  # old style: every letter takes the next word
    else:
        return False
    for letter in letters:
        if letter in "IF":
            return True
        if letter in _TAR_SHORT_VALUES:
            return False  # the rest of the word is this option's value
    return False


def _check_make(
    name: str, args: Sequence[_Word], findings: _Findings, allow_pipes: bool, depth: int
) -> None:
    values = [a.value for a in args]
    for k, value in enumerate(values):
        nxt = values[k + 1] if k + 1 < len(values) else ""
        target = ""
        if name == "cmake":
            if value == "-P":
                target = nxt
            elif value == "-E" and nxt == "env":
                rest = list(args[k + 2 :])
                while rest and (rest[0].value.startswith("-") or _ASSIGNMENT.match(rest[0].value)):
                    if _ASSIGNMENT.match(rest[0].value):
                        _check_assignment(rest[0].value, findings, " through 'cmake -E env'")
                    rest = rest[1:]
                if rest:
                    _check_command(rest, findings, allow_pipes, depth + 1)
                break
        elif value in ("-f", "--file", "--makefile"):
            target = nxt
        elif value.startswith("-f") and not value.startswith("--"):
            target = value[2:]
        elif _abbreviates(value, "--file") or _abbreviates(value, "--makefile"):
            target = value.split("=", 1)[1] if "=" in value else nxt
        elif value == "-E" or _abbreviates(value, "--eval", ("--e",)):
            findings.destroy(f"'{name} --eval' runs make code given inline, which can run any "
                             "command: the user must confirm this exact call")
        if target and _stdin_file(target):
            findings.destroy(f"'{name}' reads its makefile or script from standard input, which "
                             "the guard does not see: the user must confirm this exact call")


@attrs.frozen
class _RunsOption:
    """An option whose value a program runs: a shell string (``sh -c``) or a program."""

    long: str  # '--pager' ('' if none)
    short: str = ""  # 'P' ('' if none)
    string: bool = False  # the value is a shell command line, analysed as one
    attached_only: bool = False  # the short option's value is never the next word (-Hfirefox)
    key: re.Pattern[str] | None = None  # only values that match (apt's -o NAME=VALUE)
    # A flag, no value: the program joins the words after it and runs them (pnpm -c CMD ARGS).
    joins_rest: bool = False
    # The value is a configuration file (or setting) that can name programs to run.
    config: bool = False
    # The value is a file of environment variables (KEY=VALUE lines) loaded for the program:
    # it can set the variables the guard refuses on a command line (LD_PRELOAD, NODE_OPTIONS).
    env_file: bool = False


# Everyday programs with an option that makes them run a command of the caller's choosing.
_RUNS_OPTIONS: dict[str, tuple[_RunsOption, ...]] = {
    "sort": (_RunsOption("--compress-program"),),
    "split": (_RunsOption("--filter", string=True),),
    "man": (_RunsOption("--pager", "P", string=True), _RunsOption("--html", "H",
                                                                    attached_only=True)),
    "npx": (_RunsOption("--call", "c", string=True), _RunsOption("--script-shell")),
    "npm": (_RunsOption("--call", "c", string=True), _RunsOption("--script-shell")),
    "pnpm": (_RunsOption("--shell-mode", "c", string=True, joins_rest=True),
             _RunsOption("--script-shell")),
    # wgetrc commands are case-, '_'- and '-'-insensitive ('-e useAskPass=./x'); --config
    # reads a whole wgetrc, where use_askpass may be.
    "wget": (_RunsOption("--use-askpass"),
             _RunsOption("--execute", "e", key=re.compile(
                 r"(?i)[\s_-]*u[_-]*s[_-]*e[_-]*a[_-]*s[_-]*k[_-]*p[_-]*a[_-]*s[_-]*s")),
             _RunsOption("--config", config=True)),
    # Preprocessors and pagers run for the caller: 'rg --pre ./x PATTERN' runs ./x per file.
    "rg": (_RunsOption("--pre"),),
    # 'nodemon --exec "CMD"' runs CMD by a shell on every change.
    "nodemon": (_RunsOption("--exec", "x", string=True),),
    "ag": (_RunsOption("--pager"),),
    **{name: (_RunsOption("--pager"),) for name in ("bat", "batcat")},
    # A kubeconfig's users[].user.exec.command is run to get credentials (measured: kubectl
    # --kubeconfig ran it for 'get pods').
    **{name: (_RunsOption("--kubeconfig", config=True),)
       for name in ("kubectl", "helm", "oc", "k9s", "kubectx", "kubens", "stern")},
    # 'cargo --config KEY=VALUE' sets configuration: a runner, a rustc wrapper, a linker, an
    # alias; a value that is no KEY=VALUE is a file of such settings.
    "cargo": (_RunsOption("--config", config=True, key=re.compile(
        r"(?i)(?:[^=]*(?:runner|wrapper|rustc|rustdoc|linker|alias|credential|flags|"
        r"\[)|[^=]*\Z)")),),
    "tcpdump": (_RunsOption("", "z"),),
    # Files of variables loaded for the command: the refused assignments, out of sight.
    "uv": (_RunsOption("--env-file", env_file=True),),
    **{name: (_RunsOption("--env-file", env_file=True),
              _RunsOption("--env-file-if-exists", env_file=True))
       for name in ("node", "nodejs", "bun", "deno")},
    "dotenvx": (_RunsOption("--env-file", "f", env_file=True),),
    "dotenv": (_RunsOption("--file", "f", env_file=True),),
    **{name: (_RunsOption("--option", "o", key=re.compile(
        r"(?i)[^=]*(?:invoke|::bin|pager|script|method|hook|options)")),
              _RunsOption("--config-file", "c"))
       for name in ("apt", "apt-get", "apt-cache", "aptitude")},
}


def _check_runs_options(
    name: str, args: Sequence[_Word], findings: _Findings, allow_pipes: bool, depth: int
) -> None:
    values = [a.value for a in args]
    for k, value in enumerate(values):
        if value == "--":
            break
        nxt = values[k + 1] if k + 1 < len(values) else None
        for option in _RUNS_OPTIONS[name]:
            found: str | None = None
            if option.long and _abbreviates(value, option.long):
                if option.joins_rest:
                    found = " ".join(values[k + 1 :])
                elif "=" in value:
                    found = value.split("=", 1)[1]
                elif not option.attached_only:
                    found = nxt
            elif option.short and value.startswith("-" + option.short) and not value.startswith(
                "--"
            ):
                if option.joins_rest:
                    found = " ".join(values[k + 1 :])
                else:
                    # An optional value ('-Hfirefox') is attached; '-H' alone uses the default.
                    found = value[2:] or (None if option.attached_only else nxt)
            if found is None or (option.key is not None and not option.key.match(found)):
                continue
            spelled = option.long or "-" + option.short
            if option.config:
                findings.inject(f"'{name} {spelled}' reads configuration of the caller's "
                                "choosing, which can name programs for it to run")
            elif option.env_file:
                findings.inject(f"'{name} {spelled}' loads environment variables from a file, "
                                "which can set the ones that choose the code that runs "
                                "(LD_PRELOAD, NODE_OPTIONS, ...)")
            elif option.string:
                findings.inject(f"'{name} {spelled}' runs a string as a shell command")
                if found:
                    _nested_line(found, name, findings, allow_pipes, depth)
            else:
                findings.inject(f"'{name} {spelled}' runs a program of the caller's choosing")
            if option.joins_rest:
                # Every later word is part of the command just analysed, not an option of
                # this program: reading them again re-analysed each suffix ('pnpm -c -c -c
                # ...', quadratic: 39 s for 16 KB).
                return
            break  # one finding per word ('--env-file' abbreviates '--env-file-if-exists')


# sqlite3's dot-commands that only show or set something; any other one (.shell, .system,
# '.once |CMD', .import '|CMD', .load, .edit, ...) may run a program. Matched on the command's
# first word, which sqlite3 takes by its prefix too ('.sh' is '.shell').
_SQLITE_PLAIN = frozenset(
    {".tables", ".schema", ".headers", ".header", ".mode", ".dump", ".indexes", ".indices",
     ".quit", ".exit", ".help", ".databases", ".show", ".width", ".separator", ".nullvalue",
     ".timer", ".print", ".changes", ".echo", ".eqp", ".explain", ".fullschema", ".stats",
     ".bail", ".limit", ".lint", ".dbinfo", ".dbconfig", ".selftest", ".scanstats",
     ".version", ".timeout", ".expert", ".parameter", ".binary"}
)
_SQLITE_VALUES = frozenset(
    {"-cmd", "-init", "-separator", "-newline", "-nullvalue", "-vfs", "-pagecache",
     "-lookaside", "-heap", "-maxsize", "-mmap", "-escape", "-A", "-zip"}
)
_SQLITE_CODE = re.compile(r"(?i)\b(?:edit|load_extension|writefile|fts3_tokenizer)\s*\(")


def _check_sqlite(
    name: str, args: Sequence[_Word], findings: _Findings, allow_pipes: bool, depth: int
) -> None:
    values = [a.value for a in args]
    commands: list[str] = []  # SQL and dot-commands: -cmd values and operands after the DB
    operands = 0
    k = 0
    while k < len(values):
        value = values[k]
        option = "-" + value.lstrip("-") if value.startswith("-") else ""
        if option in _SQLITE_VALUES and k + 1 < len(values):
            if option == "-cmd":
                commands.append(values[k + 1])
            elif option == "-init" and _stdin_file(args[k + 1].path):
                commands.append(".stdin")
            k += 2
            continue
        if not option or value == "-":
            operands += 1
            if operands > 1:
                commands.append(value)
        k += 1
    if operands <= 1 and not any(v.lstrip("-") in ("version", "help") for v in values):
        findings.destroy(
            f"'{name}' with no SQL reads its commands from standard input, and its dot-commands "
            "(.shell, .system) run programs the guard does not see: the user must confirm this "
            "exact call"
        )
    for text in commands:
        for line in re.split(r"[\n;]", text):
            word = line.strip().split(None, 1)[0].lower() if line.strip() else ""
            if word.startswith(".") and word not in _SQLITE_PLAIN:
                findings.inject(f"'{name}' dot-command '{_clip(word, 20)}' may run a program "
                                "(.shell, .system, a pipe)")
                rest = line.strip().split(None, 1)[1:] or [""]
                if word in (".shell", ".system", ".sh", ".sys") and rest[0]:
                    _nested_line(rest[0].strip("\"'"), name, findings, allow_pipes, depth)
        match = _SQLITE_CODE.search(text)
        if match:
            findings.destroy(f"'{name}' SQL calls {match.group().rstrip('( ')!r}, which runs a "
                             "program, loads code or writes files: the user must confirm this "
                             "exact call")


def _check_ed(
    name: str, args: Sequence[_Word], findings: _Findings, allow_pipes: bool, depth: int
) -> None:
    # ed and ex take their commands from standard input, and '!CMD' runs a shell command:
    # whatever the tool sends as input is unseen.
    if name in ("ed", "ex") or any(v in ("-e", "-E", "-es", "-Es") for v in
                                     (a.value for a in args)):
        findings.destroy(
            f"'{name}' reads editor commands from standard input, and '!CMD' there runs a "
            "shell command the guard does not see: the user must confirm this exact call"
        )


# go's build flags that name a program to run: '-toolexec ./x' runs ./x in front of every
# compiler and linker call, '-exec ./x' runs the test binaries through ./x, '-vettool' is the
# vet program; '-ldflags=-extld=./x' picks the external linker. Go reads '-flag' and '--flag'.
_GO_PROGRAM_FLAGS = frozenset({"toolexec", "exec", "vettool"})
_GO_LINKER = re.compile(r"-{1,2}extld\b|-{1,2}extar\b")


def _check_go(
    name: str, args: Sequence[_Word], findings: _Findings, allow_pipes: bool, depth: int
) -> None:
    for value in (a.value for a in args):
        if value == "--":
            break
        if not value.startswith("-"):
            continue
        flag, _, setting = value.lstrip("-").partition("=")
        if flag in _GO_PROGRAM_FLAGS:
            findings.inject(f"'{name} -{flag}' runs a program of the caller's choosing")
        elif flag in ("ldflags", "gccgoflags") and _GO_LINKER.search(setting):
            findings.inject(f"'{name} -{flag}' names the linker, a program of the caller's "
                            "choosing")


_FD_EXEC = frozenset({"-x", "--exec", "-X", "--exec-batch"})
_FD_VALUES = frozenset({"-e", "--extension", "-t", "--type", "-d", "--max-depth",
                        "--min-depth", "--exact-depth", "-E", "--exclude", "-S", "--size",
                        "-j", "--threads", "-c", "--color", "-o", "--owner", "--changed-within",
                        "--changed-before", "--max-results", "--base-directory",
                        "--ignore-file", "--path-separator", "--batch-size"})
_FD_NARROWING = frozenset({"-e", "--extension", "-S", "--size", "-o", "--owner",
                           "--changed-within", "--changed-before"})
_REMOVERS = frozenset({"rm", "shred", "unlink", "rmdir", "srm", "wipe"})


def _check_fd(
    name: str, args: Sequence[_Word], findings: _Findings, allow_pipes: bool, depth: int
) -> None:
    """fd (find's successor) runs '-x CMD ARGS' for each match, '-X CMD ARGS' for all."""
    values = [a.value for a in args]
    at = next((k for k, v in enumerate(values) if v in _FD_EXEC), None)
    if at is None:
        return
    end = next((k for k in range(at + 1, len(values)) if values[k] == ";"), len(values))
    inner = list(args[at + 1 : end])
    if not inner:
        return
    _check_command(inner, findings, allow_pipes, depth + 1)
    if _basename(inner[0].value) not in _REMOVERS:
        return
    # Operands before -x: the pattern, then the folders searched (default '.').
    operands: list[_Word] = []
    narrowed = False  # by an extension, a size, a date or an owner, as find's tests narrow
    k = 0
    while k < at:
        value = values[k]
        if value in _FD_VALUES:
            narrowed = narrowed or value in _FD_NARROWING
            k += 2
            continue
        if not value.startswith("-"):
            operands.append(args[k])
        k += 1
    pattern = operands[0].value if operands else ""
    matches_all = pattern in ("", ".", ".*", "^", "$", "^.*$", ".+") and not narrowed
    for root in operands[1:] or [_Word.literal(".")]:
        danger = _target_danger(root.path)
        if danger is None or (_local(danger) and not matches_all):
            continue
        findings.destroy(f"'{name} ... {values[at]} {inner[0].value}' deletes what it finds "
                         f"in {danger}")


# --- audit s40: more programs that run a command, a string or code ------------------------
#
# Each handler reads the words after the program name, records what it finds, and returns the
# command the program runs (checked like any other, one level deeper) or None.

# perf's subcommands that run a command ('perf stat CMD', 'perf record -- CMD'), and the ones
# in front of them ('perf mem record CMD', 'perf kvm stat CMD', 'perf script NAME CMD').
_PERF_RUNS = frozenset({"record", "stat", "trace", "ftrace", "top", "mem", "c2c", "kvm", "lock",
                        "sched", "kmem", "timechart", "kwork", "script", "iostat"})
# Options of those subcommands that take the next word as their value (when not attached):
# read as flags, their value would be taken for the command ('perf stat -x , rm -rf ~').
_PERF_VALUES = frozenset(
    {"-e", "--event", "--filter", "-p", "--pid", "-t", "--tid", "-c", "--count", "-o",
     "--output", "-C", "--cpu", "-F", "--freq", "-m", "--mmap-pages", "-G", "--cgroup", "-u",
     "--uid", "-j", "--branch-filter", "-D", "--delay", "-r", "--repeat", "-x",
     "--field-separator", "-M", "--metrics", "--log-fd", "--pre", "--post", "-I",
     "--interval-print", "--control", "-k", "--clockid", "--call-graph", "--affinity",
     "--max-size", "--switch-output-event", "--for-each-cgroup", "--td-level", "--duration",
     "--max-events", "--max-stack", "--min-stack", "-i", "--input", "-s", "--script",
     "--exec-path", "--debugfs-dir", "--buildid-dir", "--symfs", "--vmlinux", "--kallsyms",
     "-T", "--tracer", "-N", "--notrace-funcs", "-g", "--graph-funcs", "--graph-opts",
     "-b", "--buffer-size", "--sort", "--time", "--cpu-list", "--pid-filter", "--comm",
     "--dsos", "--iostat"}
)
# Letters of _PERF_VALUES that are plain flags in some subcommands ('perf stat -T' is
# --transaction, 'perf ftrace -T' takes functions): by subcommand (record's for the ones that
# pass their options to record).
_PERF_FLAGS: dict[str, frozenset[str]] = {
    "record": frozenset({"-g", "-T", "-b", "-N", "-s", "-i", "-I"}),
    "stat": frozenset({"-T", "-c", "-i", "-g", "-b", "-N", "-s"}),
    "trace": frozenset({"-T", "-s", "-g", "-b", "-N"}),
    "ftrace": frozenset({"-i", "-s", "-c", "-I"}),
    "script": frozenset({"-g", "-T", "-b", "-N", "-I", "-c"}),
}


def _check_perf(
    name: str, args: Sequence[_Word], findings: _Findings, allow_pipes: bool, depth: int
) -> list[_Word] | None:
    """'perf stat|record|trace|ftrace [options] [--] CMD ARGS': CMD runs under perf.

    ``--pre``/``--post`` of 'perf stat' are shell strings; ``perf script -s FILE`` runs a script
    file (like 'python FILE', left to the sandbox) unless it is standard input.
    """
    values = [a.value for a in args]
    k, n = 0, len(values)
    sub: str | None = None
    script_name = False
    while k < n:
        value = values[k]
        if value == "--":
            return list(args[k + 1 :]) if sub else None
        if value.startswith("-") and value != "-":
            key, eq, attached = value.partition("=")
            nxt = attached if eq else (values[k + 1] if k + 1 < n else "")
            if key in ("--pre", "--post") and sub:
                findings.inject(f"'{name} stat {key}' runs a string as a shell command")
                _nested_line(nxt, f"{name} stat {key}", findings, allow_pipes, depth)
            if key in ("-s", "--script") and sub == "script" and nxt and _stdin_file(nxt):
                findings.destroy(f"'{name} script {key} {nxt}' reads its script from standard "
                                 "input, which the guard does not see: the user must confirm "
                                 "this exact call")
            flags = _PERF_FLAGS.get(sub or "", _PERF_FLAGS["record"])
            if key in _PERF_VALUES and not eq and key not in flags:
                k += 1
            k += 1
            continue
        if value in _PERF_RUNS and not script_name:
            sub = value
            k += 1
            continue
        if sub == "script" and value in ("record", "report", "live"):
            k += 1
            continue
        if sub == "script" and not script_name:
            script_name = True  # 'perf script NAME [CMD]': the name of a perf script
            k += 1
            continue
        if sub is None:
            return None  # 'perf report', 'perf list', 'perf probe ...': no command
        break
    return list(args[k:]) if sub and k < n else None


# npm's command names and aliases: the first of them on the line is npm's command; other
# non-option words before it are option values ('npm --loglevel silent exec ...').
_NPM_COMMANDS = frozenset(
    {"access", "adduser", "audit", "bugs", "cache", "ci", "completion", "config", "dedupe",
     "deprecate", "diff", "dist-tag", "docs", "doctor", "edit", "exec", "x", "explain",
     "explore", "find-dupes", "fund", "get", "help", "help-search", "hook", "init", "create",
     "install", "i", "in", "add", "install-ci-test", "cit", "install-test", "it", "link", "ln",
     "ll", "login", "logout", "ls", "list", "la", "org", "outdated", "owner", "pack", "ping",
     "pkg", "prefix", "profile", "prune", "publish", "query", "rebuild", "rb", "repo",
     "restart", "root", "run", "run-script", "rum", "urn", "sbom", "search", "s", "se",
     "find", "set", "shrinkwrap", "star", "stars", "start", "stop", "team", "test", "t", "tst",
     "token", "uninstall", "un", "rm", "r", "remove", "unlink", "unpublish", "unstar",
     "update", "up", "upgrade", "version", "v", "view", "info", "show", "whoami", "why",
     "home", "issues", "author", "c", "ddp", "dist-tags", "innit", "isntall"}
)
# npm options (configuration keys) that take the next word as their value.
_NPM_VALUES = frozenset(
    {"-p", "--package", "-c", "--call", "-w", "--workspace", "--prefix", "--loglevel",
     "--registry", "--cache", "--userconfig", "--globalconfig", "--node-options",
     "--script-shell", "--shell", "--tag", "--otp", "--scope", "--before", "--omit",
     "--include", "--install-strategy", "--cafile", "--proxy", "--https-proxy", "--noproxy",
     "--location", "--npx-cache", "--filter", "-F", "--dir", "-C", "--cwd", "--reporter",
     "--resume-from", "--config", "--env-file", "--preload", "--ext", "--cert",
     "--import-map", "--lock", "--seed", "--v8-flags", "--allow-read", "--allow-write",
     "--allow-net", "--allow-env", "--allow-run", "--allow-ffi", "--allow-sys"}
)
# pnpm's own commands; any other word is a script or, failing that, a program pnpm runs
# ('pnpm eslint .' is 'pnpm exec eslint .').
_PNPM_COMMANDS = frozenset(
    {"add", "install", "i", "remove", "rm", "uninstall", "un", "update", "up", "upgrade",
     "link", "ln", "unlink", "run", "run-script", "test", "t", "start", "publish", "pack",
     "list", "ls", "ll", "why", "outdated", "audit", "store", "init", "create", "dlx", "exec",
     "config", "c", "import", "rebuild", "rb", "prune", "fetch", "patch", "patch-commit",
     "patch-remove", "env", "setup", "server", "root", "bin", "licenses", "deploy", "doctor",
     "help", "dedupe", "install-test", "it", "restart", "stop", "self-update", "cat-file",
     "cat-index", "find-hash", "approve-builds", "ignored-builds", "recursive", "multi", "m",
     "version", "login", "logout", "whoami", "view", "info", "search", "owner", "dist-tag",
     "deprecate", "unpublish", "sbom"}
)


def _npm_operand(values: Sequence[str], start: int) -> int:
    """Index of the first operand from ``start``: after '--', or past npm's options."""
    k = start
    while k < len(values):
        value = values[k]
        if value == "--":
            return k + 1
        if not value.startswith("-") or value == "-":
            return k
        k += 2 if value in _NPM_VALUES else 1
    return k


def _check_node_runner(
    name: str, args: Sequence[_Word], findings: _Findings, allow_pipes: bool, depth: int
) -> list[_Word] | None:
    """The package managers of node: what runs a program named on the line.

    'npx CMD', 'npm exec|x [--] CMD', 'pnpm exec|dlx CMD', 'pnpm CMD' (no script of that
    name: pnpm runs the program), 'yarn dlx CMD', 'yarn node ARGS', 'bunx CMD', 'bun x CMD':
    the command is checked like any other (a package's program or, with '--package', any
    program on PATH). 'npm explore PKG -- CMD', 'yarn exec CMD' and 'bun exec CMD' run a shell
    string; 'npx' or 'npm exec' with nothing to run starts a shell reading standard input.
    Scripts of package.json ('npm test', 'npm run build', 'yarn build') are the project's own
    code, like a Makefile: they are left to the sandbox.
    """
    values = [a.value for a in args]
    if name in ("npx", "pnpx", "bunx"):
        sub, start = "exec", 0
    else:
        k = 0
        while k < len(values):
            value = values[k]
            if name == "bun" and value in ("-e", "--eval", "-p", "--print") or (
                name == "bun" and value.startswith(("--eval=", "--print="))
            ):
                # 'bun -e CODE' is node's inline code.
                _check_interpreter("node", name, args[k : k + 2], findings)
                return None
            if value == "--" or (not value.startswith("-") and (
                name != "npm" or value in _NPM_COMMANDS
            )):
                break
            k += 2 if value in _NPM_VALUES and name != "npm" else 1
        if k >= len(values) or values[k] == "--":
            return None
        sub, start = values[k], k + 1
    if name == "npm" and sub in ("exec", "x") or name in ("npx", "pnpx", "bunx") or (
        name in ("pnpm", "yarn", "bun") and sub in ("dlx", "x") or name == "pnpm" and sub == "exec"
    ):
        j = _npm_operand(values, start)
        called = any(v in ("-c", "--call", "--shell-mode", "-v", "--version", "-h", "--help")
                     or v.startswith("--call=") for v in values[start:j])
        if j >= len(values) and not called:
            findings.inject(f"'{name}{'' if sub == 'exec' and name != 'npm' else ' ' + sub}' "
                            "with nothing to run starts a shell that reads its commands from "
                            "standard input, which the guard does not see")
            return None
        return list(args[j:])
    if name == "pnpm" and sub not in _PNPM_COMMANDS:
        return list(args[start - 1 :])
    if name == "yarn" and sub == "node":
        return [_Word.literal("node"), *args[start:]]
    if (name == "npm" and sub == "explore") or (name in ("yarn", "bun") and sub == "exec"):
        j = start + 1 if name == "npm" else _npm_operand(values, start)
        if name == "npm":
            j = next((i + 1 for i in range(start, len(values)) if values[i] == "--"), len(values))
        string = " ".join(values[j:])
        if not string:
            findings.inject(f"'{name} {sub}' with no command starts a shell that reads its "
                            "commands from standard input, which the guard does not see")
            return None
        findings.inject(f"'{name} {sub}' runs its arguments as a shell command")
        _nested_line(string, f"{name} {sub}", findings, allow_pipes, depth)
        return None
    if name == "bun" and (sub == "repl" or sub == "run" and any(
        _stdin_file(a.path) for a in args[start : start + 1]
    )):
        findings.destroy(f"'{name} {sub}' reads its code from standard input, which the guard "
                         "does not see: the user must confirm this exact call")
    return None


# deno's options that take the next word (the others, '-p', '-A', '-q', take none or '=').
_DENO_VALUES = frozenset({"--ext", "--cert", "--location", "--seed", "--v8-flags",
                          "--import-map", "-c", "--config", "--lock", "--env-file",
                          "--inspect", "--log-level"})


def _check_deno(
    name: str, args: Sequence[_Word], findings: _Findings, allow_pipes: bool, depth: int
) -> list[_Word] | None:
    """'deno eval CODE' runs inline code with every permission; 'deno repl' and 'deno run -'
    read code from standard input."""
    values = [a.value for a in args]

    def operand(k: int) -> int:
        while k < len(values) and values[k].startswith("-") and values[k] != "-":
            if values[k] == "--":
                return k + 1
            k += 2 if values[k] in _DENO_VALUES else 1
        return k

    k = operand(0)
    if k >= len(values):
        return None
    sub = values[k]
    j = operand(k + 1)
    if sub == "eval":
        if j < len(values):
            _check_interpreter("node", name, [_Word.literal("-e"), args[j]], findings)
    elif sub == "repl" or (sub == "run" and (j >= len(values) or _stdin_file(args[j].path))):
        findings.destroy(f"'{name} {sub}' reads its code from standard input, which the guard "
                         "does not see: the user must confirm this exact call")
    return None


def _check_start_stop_daemon(
    name: str, args: Sequence[_Word], findings: _Findings, allow_pipes: bool, depth: int
) -> list[_Word] | None:
    """'start-stop-daemon --start --exec PROG [--startas PROG] -- ARGS' runs PROG ARGS."""
    values = [a.value for a in args]
    program: _Word | None = None
    k = 0
    while k < len(values):
        value = values[k]
        if value == "--":
            break
        key, eq, attached = value.partition("=")
        if key in ("-x", "--exec", "-a", "--startas") or (
            re.fullmatch(r"-[xa].+", value) is not None
        ):
            if eq:
                program = _Word.literal(attached)
            elif len(key) > 2 and not key.startswith("--"):
                program = _Word.literal(value[2:])
            elif k + 1 < len(values):
                program = args[k + 1]
                k += 1
            if key in ("-a", "--startas") or value.startswith("-a"):
                break  # --startas wins over --exec
        k += 1
    if program is None:
        return None
    after = next((i + 1 for i, v in enumerate(values) if v == "--"), len(values))
    return [program, *args[after:]]


# bwrap's options by the number of words they take (options not listed take none).
_BWRAP_ONE = frozenset(
    {"--args", "--argv0", "--uid", "--gid", "--hostname", "--chdir", "--unsetenv",
     "--lock-file", "--sync-fd", "--remount-ro", "--exec-label", "--file-label", "--proc",
     "--dev", "--tmpfs", "--mqueue", "--dir", "--seccomp", "--add-seccomp-fd", "--block-fd",
     "--userns-block-fd", "--info-fd", "--json-status-fd", "--userns", "--userns2", "--pidns",
     "--cap-add", "--cap-drop", "--perms", "--size", "--overlay-src", "--tmp-overlay",
     "--ro-overlay"}
)
_BWRAP_TWO = frozenset(
    {"--bind", "--bind-try", "--dev-bind", "--dev-bind-try", "--ro-bind", "--ro-bind-try",
     "--bind-fd", "--ro-bind-fd", "--file", "--bind-data", "--ro-bind-data", "--symlink",
     "--setenv", "--chmod", "--overlay"}
)


def _leading_options(
    values: Sequence[str], dash: str, arity: Callable[[str], int]
) -> tuple[list[int], int]:
    """The options before a runner's command (words starting with ``dash``, each followed by
    ``arity(option)`` values; ``--`` ends them): their indices, and where the command starts."""
    found: list[int] = []
    k = 0
    while k < len(values):
        value = values[k]
        if value == "--":
            return found, k + 1
        if not value.startswith(dash):
            break
        found.append(k)
        k += 1 + arity(value)
    return found, k


def _check_bwrap(
    name: str, args: Sequence[_Word], findings: _Findings, allow_pipes: bool, depth: int
) -> list[_Word] | None:
    """'bwrap [options] CMD ARGS': CMD runs in the namespace bwrap builds."""
    values = [a.value for a in args]
    options, end = _leading_options(
        values, "--", lambda v: 1 if v in _BWRAP_ONE else 2 if v in _BWRAP_TWO else 0
    )
    for k in options:
        if values[k] == "--args":
            findings.inject(f"'{name} --args FD' reads more arguments from a file descriptor, "
                            "which the guard does not see")
        if values[k] == "--setenv" and k + 2 < len(values):
            _check_assignment(f"{values[k + 1]}={values[k + 2]}", findings,
                              f" through '{name} --setenv'")
    return list(args[end:])


# qemu's user-mode emulators ('qemu-x86_64 PROG ARGS', 'qemu-aarch64-static ...') run a
# program of the host's file system; qemu-system-*, qemu-img and the tools are not runners.
_QEMU_USER = re.compile(r"^qemu-(?!system-|img\b|nbd\b|io\b|storage|pr-helper|ga\b|edid\b|"
                        r"keymap\b|bridge-helper|make-debian-root)[a-z0-9_]+(?:-static)?\Z")
_QEMU_VALUES = frozenset({"-L", "-E", "-U", "-cpu", "-g", "-d", "-D", "-p", "-R", "-B", "-s",
                          "-0", "-seed", "-trace", "-plugin", "-dfilter", "-r"})
#: The same, without their dashes (qemu takes each with one dash or two).
_QEMU_VALUE_NAMES = frozenset(v.lstrip("-") for v in _QEMU_VALUES)


def _check_qemu_user(
    name: str, args: Sequence[_Word], findings: _Findings, allow_pipes: bool, depth: int
) -> list[_Word] | None:
    """'qemu-ARCH [options] PROG ARGS': PROG runs (options with one dash or two)."""
    values = [a.value for a in args]
    options, end = _leading_options(
        values, "-", lambda v: 1 if v.lstrip("-") in _QEMU_VALUE_NAMES else 0
    )
    for k in options:
        if values[k] in ("-E", "--E") and k + 1 < len(values):
            for pair in values[k + 1].split(","):
                _check_assignment(pair, findings, f" through '{name} -E'")
    return list(args[end:])


def _check_sessions(
    name: str, args: Sequence[_Word], findings: _Findings, allow_pipes: bool, depth: int
) -> list[_Word] | None:
    """Terminal multiplexers and benchmark or watch loops run shell commands of their own.

    tmux: every command but the ones that list, show, capture or kill (new-session,
    send-keys, run-shell, if-shell, source-file, set-option default-command, ...), and no
    command at all (a new session); screen, dtach, abduco: anything but listing; hyperfine
    and watchexec: their operands are shell strings.
    """
    values = [a.value for a in args]
    if name == "tmux":
        k = 0
        while k < len(values) and values[k].startswith("-"):
            if values[k] in ("-c", "-f") or values[k].startswith(("-c", "-f")):
                findings.inject(f"'{name} {values[k][:2]}' runs a shell command or reads a "
                                "configuration that can run them")
                return None
            k += 2 if values[k] in ("-L", "-S", "-T") else 1
        if k >= len(values):
            if not any(v in ("-V",) for v in values):
                findings.inject("'tmux' with no command starts a session running a shell")
            return None
        commands = [values[k]] + [values[i + 1] for i in range(k, len(values) - 1)
                                  if values[i] in (";", "\\;") or values[i].endswith("\\;")]
        for command in commands:
            if command not in _TMUX_PLAIN:
                findings.inject(f"'tmux {_clip(command, 20)}' runs shell commands or types "
                                "into a session (new-session, send-keys, run-shell, ...), out "
                                "of the guard's sight")
                return None
        return None
    if name == "screen":
        if values and all(v in ("-ls", "-list", "-v", "-version", "-wipe", "-h", "--help")
                          or not v.startswith("-") and k and values[k - 1] in ("-ls", "-list")
                          for k, v in enumerate(values)):
            return None
    elif name in ("dtach", "abduco"):
        if values[:1] in (["-a"], ["-l"]) or not values:
            return None
    if name in ("hyperfine", "watchexec"):
        findings.inject(f"'{name}' runs its arguments as shell commands")
        return None
    findings.inject(f"'{name}' runs a shell or a command in a session of its own, out of the "
                    "guard's sight")
    return None


# tmux commands that only list, show, capture or end something.
_TMUX_PLAIN = frozenset(
    {"ls", "list-sessions", "list-windows", "lsw", "list-panes", "lsp", "list-clients", "lsc",
     "list-buffers", "lsb", "list-keys", "lsk", "list-commands", "lscm", "has-session", "has",
     "kill-server", "kill-session", "kill-window", "killw", "kill-pane", "killp",
     "capture-pane", "capturep", "show-buffer", "showb", "show-options", "show",
     "show-window-options", "showw", "show-environment", "showenv", "show-messages", "showmsgs",
     "info", "server-info", "delete-buffer", "deleteb", "save-buffer", "saveb"}
)


def _check_db_client(
    name: str, args: Sequence[_Word], findings: _Findings, allow_pipes: bool, depth: int
) -> list[_Word] | None:
    """psql and mysql run shell commands from their meta-commands.

    psql: '\\!' runs a shell command, '\\o |CMD', '\\g |CMD', '\\copy ... program' pipe to
    one, '\\i' reads a file, '\\setenv' changes the environment; any meta-command but the
    describing and showing ones is refused. '-o |CMD' pipes the output to a command; COPY ...
    PROGRAM runs a command on the server. mysql: 'system CMD' and '\\!' run a shell command,
    '--pager' and '--plugin-dir' a program or code, '--defaults-file' reads options that can
    name them. With no command given (-c, -e) both read their commands from standard input.
    """
    values = [a.value for a in args]
    psql = name == "psql"
    commands: list[str] = []
    reads_file = False
    informational = False
    k = 0
    while k < len(values):
        value = values[k]
        key, eq, attached = value.partition("=")
        nxt = values[k + 1] if k + 1 < len(values) else ""
        short = value[:2] if not value.startswith("--") else ""
        if psql:
            command = (short == "-c" and (value[2:] or nxt)) or (
                _abbreviates(key, "--command") and (attached if eq else nxt))
            output = (short == "-o" and (value[2:] or nxt)) or (
                _abbreviates(key, "--output") and (attached if eq else nxt))
            script = (short == "-f" and (value[2:] or nxt)) or (
                _abbreviates(key, "--file") and (attached if eq else nxt))
            if command:
                commands.append(command)
            if output and output.lstrip().startswith("|"):
                findings.inject(f"'{name} -o |CMD' pipes its output to a command")
            if script:
                reads_file = True
                if _stdin_file(script):
                    reads_file = False
            if value in ("-l", "--list", "-V", "--version", "-?", "--help") or short == "-l":
                informational = True
            if short in ("-c", "-o", "-f", "-d", "-h", "-p", "-U", "-v", "-F", "-R", "-P",
                         "-T", "-L") and len(value) == 2:
                k += 1
        else:
            command = (short == "-e" and (value[2:] or nxt)) or (
                _abbreviates(key, "--execute") and (attached if eq else nxt))
            if command:
                commands.append(command)
            option = _long_option(key, ("--pager", "--plugin-dir", "--defaults-file",
                                        "--defaults-extra-file", "--default-auth"))
            if option:
                findings.inject(f"'{name} {option}' runs a program, loads code or reads options "
                                "of the caller's choosing")
            if value in ("-V", "--version", "-?", "--help", "-I"):
                informational = True
            if short in ("-e", "-u", "-h", "-P", "-D", "-S") and len(value) == 2:
                k += 1
        k += 1
    for text in commands:
        if psql:
            stripped = text.lstrip()
            if stripped.startswith("\\"):
                for meta in re.findall(r"\\([A-Za-z!?]+\+?|.)", stripped):
                    meta_name = meta.rstrip("+")
                    if not (meta_name.startswith("d") or meta_name in _PSQL_PLAIN):
                        findings.inject(f"'{name}' meta-command '\\{_clip(meta, 20)}' may run a "
                                        "program (\\!, \\o |CMD, \\g |CMD, \\copy ... program)")
                        if meta == "!":
                            _nested_line(stripped.split("!", 1)[1].strip(), name, findings,
                                         allow_pipes, depth)
                        break
            elif re.search(r"(?i)\bprogram\b", text):
                findings.destroy(f"'{name}' SQL with COPY ... PROGRAM runs a command on the "
                                 "database server: the user must confirm this exact call")
        else:
            match = re.search(r"(?im)(?:^|;)\s*(?:system|pager|edit)\b|\\[!Pe]", text)
            if match:
                findings.inject(f"'{name}' client command {match.group().strip(' ;')!r} runs a "
                                "shell command or a program")
                inner = re.search(r"(?im)(?:^|;)\s*(?:system\b|\\!)([^;\n]*)", text)
                if inner and inner.group(1).strip():
                    _nested_line(inner.group(1).strip(), name, findings, allow_pipes, depth)
    if not commands and not reads_file and not informational:
        runs = "\\!" if psql else "system"
        findings.destroy(f"'{name}' with no command reads its commands from standard input, "
                         f"where {runs} runs shell commands the guard does not see: the user "
                         "must confirm this exact call")
    return None


# psql meta-commands that only show or set display options (besides \d*, which describe).
_PSQL_PLAIN = frozenset({"l", "list", "x", "timing", "conninfo", "encoding", "echo", "q", "?",
                         "h", "help", "a", "t", "H", "C", "f", "copyright", "errverbose", "sf",
                         "sv", "z", "qecho", "warn", "pset"})


def _check_dc(
    name: str, args: Sequence[_Word], findings: _Findings, allow_pipes: bool, depth: int
) -> list[_Word] | None:
    """dc runs the rest of a line after '!' as a shell command ('!<', '!>', '!=' compare)."""
    values = [a.value for a in args]
    codes: list[str] = []
    sources = 0
    k = 0
    while k < len(values):
        value = values[k]
        key, eq, attached = value.partition("=")
        if value in ("-e", "--expression", "-f", "--file") and k + 1 < len(values):
            (codes if value in ("-e", "--expression") else []).append(values[k + 1])
            sources += 1 if value in ("-f", "--file") and not _stdin_file(values[k + 1]) else 0
            k += 2
            continue
        if _abbreviates(key, "--expression") and eq or value.startswith("-e") and value != "-e":
            codes.append(attached if eq else value[2:])
        elif value in ("-V", "--version", "-h", "--help"):
            return None
        elif not value.startswith("-"):
            sources += 1
        k += 1
    for code in codes:
        if re.search(r"![^<>=]", code + "\n"):
            findings.destroy(f"'{name}' code with '!' runs a shell command out of the guard's "
                             "sight: the user must confirm this exact call")
            break
    if not codes and not sources:
        findings.destroy(f"'{name}' with no program reads its code from standard input, where "
                         "'!' runs shell commands the guard does not see: the user must "
                         "confirm this exact call")
    return None


# Emacs Lisp that starts programs or hides which function runs.
_LISP_SPAWN = re.compile(
    r"(?i)shell|process|call-|start-|make-|funcall|apply|intern|eval|load|require|read|"
    r"symbol|command|server|compile|term\b|\bdired|vc-|async|defalias|fset"
)


def _check_emacs(
    name: str, args: Sequence[_Word], findings: _Findings, allow_pipes: bool, depth: int
) -> list[_Word] | None:
    """'emacs --eval EXPR' and '-f FUNCTION' run Lisp given on the line."""
    values = [a.value for a in args]
    for k, value in enumerate(values):
        key, eq, attached = value.partition("=")
        key = "-" + key.lstrip("-") if key.startswith("-") else key
        if key in ("-eval", "-execute", "-f", "-funcall"):
            code = attached if eq else (values[k + 1] if k + 1 < len(values) else "")
            if _LISP_SPAWN.search(code) or (k + 1 < len(values) and _from_variable(args[k + 1])):
                findings.destroy(f"'{name} {value.split('=')[0]}' runs Lisp that can start "
                                 "programs out of the guard's sight: the user must confirm "
                                 "this exact call")
                return None
    return None


def _check_powershell(
    name: str, args: Sequence[_Word], findings: _Findings, allow_pipes: bool, depth: int
) -> list[_Word] | None:
    """PowerShell is a shell: '-Command' and '-EncodedCommand' run shell code given on the line
    (refused as a nested shell; it is not read as sh), and with no script file it reads its
    commands from standard input. Parameters are case-insensitive and may be abbreviated."""
    values = [a.value for a in args]
    k = 0
    while k < len(values):
        value = values[k]
        lowered = value.lower()
        if not lowered.startswith(("-", "/")) or lowered == "-":
            break
        param = lowered.lstrip("-/").split(":", 1)[0]
        if param and ("command".startswith(param) or param in ("ec", "e", "enc")
                      or "encodedcommand".startswith(param)) and param not in ("co",):
            findings.inject(f"'{name} {value}' runs a nested shell (PowerShell code)")
            return None
        if param and "file".startswith(param):
            if k + 1 >= len(values) or _stdin_file(args[k + 1].path):
                break
            return None  # a script file of the workdir
        if param in ("executionpolicy", "ex", "ep", "workingdirectory", "wd", "wo",
                     "configurationname", "config", "inputformat", "if", "in", "outputformat",
                     "of", "o", "windowstyle", "w", "custompipename", "settingsfile", "settings",
                     "configurationfile", "version", "v"):
            k += 1
        if param in ("version", "v", "help", "h", "?"):
            return None
        k += 1
    else:
        k = len(values)
    if k < len(values) and values[k] != "-" and name in ("pwsh", "pwsh-preview"):
        return None  # 'pwsh x.ps1': the first operand is a script file
    findings.inject(f"'{name}' with no script file runs shell code from its arguments or "
                    "standard input, which the guard does not see")
    return None


_RUNNERS: dict[
    str, Callable[[str, Sequence[_Word], _Findings, bool, int], list[_Word] | None]
] = {
    **{name: _check_powershell for name in ("pwsh", "pwsh-preview", "powershell",
                                            "powershell.exe")},
    "perf": _check_perf,
    **{name: _check_node_runner for name in ("npm", "npx", "pnpm", "pnpx", "yarn", "yarnpkg",
                                             "bun", "bunx")},
    "deno": _check_deno,
    "start-stop-daemon": _check_start_stop_daemon,
    "bwrap": _check_bwrap,
    **{name: _check_sessions for name in ("tmux", "screen", "dtach", "abduco", "hyperfine",
                                          "watchexec")},
    **{name: _check_db_client for name in ("psql", "mysql", "mariadb")},
    "dc": _check_dc,
    **{name: _check_emacs for name in ("emacs", "emacs-nox", "emacs-gtk", "emacsclient")},
}


_SPECIAL: dict[str, Callable[[str, Sequence[_Word], _Findings, bool, int], None]] = {
    "git": _check_git,
    "go": _check_go,
    "fd": _check_fd,
    "fdfind": _check_fd,
    "find": _check_find,
    **{name: _check_make for name in ("make", "gmake", "bmake", "cmake")},
    **{name: _check_remote_shells for name in (
        "ssh", "scp", "sftp", "autossh", "rsync", "tar", "bsdtar", "gtar", "zip", "vim", "vi",
        "nvim", "ex", "view", "vimdiff", "gvim", "gdb", "lldb", "at", "batch", "crontab",
        "parallel")},
    **{name: _check_runs_options for name in _RUNS_OPTIONS},
    "sqlite3": _check_sqlite,
    "ed": _check_ed,
}


# -------------------------------------------------------------------------
# destructive meaning
# -------------------------------------------------------------------------

_HERE = "everything in the working directory"
_WORKDIR_ITSELF = "the working directory itself"
_HOLDS_WORKDIR = "a directory that holds the working directory"
#: Components of the absolute working directory of the command being analysed (None: unknown).
_WORKDIR: contextvars.ContextVar[tuple[str, ...] | None] = contextvars.ContextVar(
    "tooldeck_shell_workdir", default=None
)
_SYSTEM_DIRS = frozenset(
    {"bin", "boot", "dev", "etc", "lib", "lib32", "lib64", "libx32", "sbin", "usr", "var",
     "root", "sys", "proc", "opt", "srv", "snap", "efi"}
)
# Disks by every name udev gives them: /dev/block/MAJ:MIN and /dev/char/MAJ:MIN are links to
# the same devices as /dev/sda or /dev/mem.
_DEVICE = re.compile(
    r"^/dev/(?:sd|hd|vd|xvd|nvme|mmcblk|disk/|md|dm-|loop|mapper/|sr|root|mtd|nbd|rbd|zd|ubi|"
    r"block/|char/|bsg/|sg[0-9]|ram[0-9]|zram|pmem|cciss/|fd[0-9]|"
    r"mem$|kmem$|port$)|^/proc/sysrq-trigger$|^/sys/(?:block|class/block|firmware)/"
)
_SAFE_DEVICES = frozenset({"/dev/null", "/dev/stdout", "/dev/stderr", "/dev/zero", "/dev/tty"})


def _components(path: str) -> tuple[bool, list[str], int]:
    """(absolute, normalised components, how many '..' climb above the start)."""
    absolute = path.startswith("/")
    out: list[str] = []
    above = 0
    for part in path.split("/"):
        if part in ("", "."):
            continue
        if part == "..":
            if out:
                out.pop()
            elif not absolute:
                above += 1
            continue
        out.append(part)
    return absolute, out, above


def _normal(path: str) -> str:
    """The path with '//', '.' and '..' resolved lexically, markers shown as '*' and '$?'."""
    absolute, parts, above = _components(path)
    text = ("/" if absolute else "") + "/".join([".."] * above + parts)
    return text.replace("\x02", "*").replace(_UNKNOWN, "$?")


def _globby(part: str) -> bool:
    return any(c in _GLOB for c in part)


# A bracket expression (with POSIX classes like [:alpha:]); no '[' inside keeps it linear.
_BRACKET = re.compile(r"\[[!^]?\]?(?:\[:[a-z]+:\]|[^\][])*\]")


def _matches_all(part: str) -> bool:
    """A pattern that matches every name in a directory, or nearly every one (``*``, ``.*``,
    ``?*``, ``*.*``, ``[!.]*``, ``[a-z]*``, ``*[!.]``, ``?``): nothing but wildcards and bracket
    expressions, no literal name part."""
    if not any(c in _GLOB for c in part):
        return False
    brackets = _BRACKET.findall(part)
    rest = _BRACKET.sub("", part)
    if not all(c in "*?." for c in rest):
        return False
    # '[abc]' alone names three files; a '*', a '?' or a negated or ranged bracket is broad.
    return "*" in rest or "?" in rest or any(
        b[1:2] in ("!", "^") or "-" in b[2:-1] for b in brackets
    )


def _target_danger(path: str) -> str | None:
    """What deleting (or changing) ``path`` recursively would hit, or None if nothing vital."""
    if path.startswith(_UNKNOWN):
        return "a path taken from a variable, which may be empty or '/'"
    if path.startswith("~"):
        head, _, rest = path.partition("/")
        _, parts, above = _components(rest)
        if above or not parts or _matches_all(parts[0]):
            return "a home directory" if head == "~" else f"the home of {head[1:]!r}"
        # Below a home are the user's keys, configuration and other projects ('~/.ssh',
        # '~/.config', '~/src'): vital unless the working directory is there and holds it.
        home = os.path.expanduser(head)
        workdir = _WORKDIR.get()
        if workdir and home.startswith("/"):
            _, home_parts, _ = _components(home)
            inside = _inside_workdir([*home_parts, *parts], workdir)
            if inside is not None:
                return _target_danger("/".join(inside)) if inside else _WORKDIR_ITSELF
        return f"files in a home directory ({path})"
    absolute, parts, above = _components(path)
    workdir = _WORKDIR.get()
    if absolute and workdir and parts:
        inside = _inside_workdir(parts, workdir)
        if inside is not None:
            # Below the working directory: judged as the relative path it is ('*' = here).
            return _target_danger("/".join(inside)) if inside else _WORKDIR_ITSELF
        if len(parts) <= len(workdir) and all(
            _component_matches(part, wd) for part, wd in zip(parts, workdir, strict=False)
        ):
            # '/work' above '/work/proj', or '/work/*' that matches it: what the rules below
            # say of it (a top-level directory), else that it holds the working directory.
            return _absolute_danger(path, parts) or f"{_HOLDS_WORKDIR} ({_normal(path)})"
    if absolute:
        return _absolute_danger(path, parts)
    if above:
        return "files outside the working directory ('..')"
    if not parts or _matches_all(parts[0]):
        return _HERE
    return None


def _absolute_danger(path: str, parts: Sequence[str]) -> str | None:
    """What deleting the absolute ``path`` (its normalised ``parts``) would hit, if vital."""
    if not parts:
        return "the whole system ('/')"
    top = parts[0]
    if _globby(top):
        return f"whatever '/{top}' matches at the root of the system"
    if top in _SYSTEM_DIRS:
        return f"system files ({_normal(path)})"
    if top in ("home", "Users") and (len(parts) == 1 or len(parts) == 2 or _globby(parts[1])):
        return "users' home directories"
    if top in ("home", "Users"):
        # Inside a home but not the working directory (the caller checked that first).
        return f"files in a home directory ({_normal(path)})"
    if len(parts) == 1 and top != "tmp":
        return f"a top-level directory ({_normal(path)})"
    if len(parts) >= 2 and _globby(parts[1]) and top != "tmp":
        return f"whatever {_normal(path)} matches near the root"
    return None


def _local(danger: str) -> bool:
    """A danger to the working directory's own files only (not the system or a home)."""
    return danger in (_HERE, _WORKDIR_ITSELF) or danger.startswith(_HOLDS_WORKDIR)


def _component_matches(part: str, name: str) -> bool:
    """Whether one path component (maybe a glob, maybe a variable) may name ``name``."""
    if part == name:
        return True
    if _UNKNOWN in part or _globby(part):
        pattern = part.replace(_UNKNOWN, "*").replace("\x02", "?")
        return fnmatch.fnmatchcase(name, pattern)
    return False


def _inside_workdir(parts: Sequence[str], workdir: Sequence[str]) -> list[str] | None:
    """The components below the working directory if ``parts`` is in it (or names it, []),
    else None. Its leading components must name the working directory literally: a glob there
    ('/*/proj/x') may match other trees too, and is judged by the absolute rules."""
    if len(parts) < len(workdir) or tuple(parts[: len(workdir)]) != tuple(workdir):
        return None
    return list(parts[len(workdir):])


def _leaves_workdir(path: str) -> bool:
    """A destination outside the working directory (absolute elsewhere, '..', a home)."""
    if path.startswith(("~", _UNKNOWN)):
        return True
    absolute, parts, above = _components(path)
    if not absolute:
        return above > 0
    workdir = _WORKDIR.get()
    return workdir is None or _inside_workdir(parts, workdir) is None


def _is_device(path: str) -> bool:
    if not path.startswith("/"):
        return False
    normal = _normal(path)
    return normal not in _SAFE_DEVICES and bool(_DEVICE.match(normal))


def _is_system_path(path: str) -> bool:
    absolute, parts, _ = _components(path)
    if not (absolute and parts and parts[0] in _SYSTEM_DIRS - {"dev", "proc", "sys"}):
        return False
    workdir = _WORKDIR.get()
    # A workdir under /srv or /opt is still the workdir: writing into it is everyday work.
    return workdir is None or _inside_workdir(parts, workdir) is None


def _flags(args: Sequence[str]) -> tuple[set[str], list[str]]:
    """Short flags (letters) and long options, and the operands, GNU style (options anywhere)."""
    flags: set[str] = set()
    operands: list[str] = []
    options_done = False
    for arg in args:
        if options_done or not arg.startswith("-") or arg == "-":
            operands.append(arg)
        elif arg == "--":
            options_done = True
        elif arg.startswith("--"):
            flags.add(arg.split("=", 1)[0])
        else:
            flags.update(arg[1:])
    return flags, operands


def _abbreviates(arg: str, option: str, exact: Iterable[str] = ()) -> bool:
    """``arg`` (``--rec``, ``--use-compress=x``) names the long ``option`` (``--recursive``):
    GNU getopt_long takes any unambiguous prefix. An ambiguous prefix makes the program fail, so
    counting it is safe; a prefix that is itself another option (``exact``) names that one."""
    key = arg.split("=", 1)[0]
    return len(key) > 2 and key.startswith("--") and option.startswith(key) and key not in exact


def _long_option(arg: str, options: Iterable[str]) -> str | None:
    """The option of ``options`` that ``arg`` (``--exe``, ``--upload-pa=x``) names: itself, or
    the first one it is a prefix of (GNU getopt_long and git take unambiguous prefixes; an
    ambiguous one makes the program fail, so naming the first is safe). Callers list the
    options that run code first. None when ``arg`` is no long option of these."""
    key = arg.split("=", 1)[0]
    if len(key) <= 2 or not key.startswith("--"):
        return None
    options = tuple(options)
    if key in options:
        return key
    return next((option for option in options if option.startswith(key)), None)


def _has_long(flags: Iterable[str], option: str, exact: Iterable[str] = ()) -> bool:
    return any(_abbreviates(flag, option, exact) for flag in flags)


def _operand_words(args: Sequence[_Word]) -> list[_Word]:
    out, done = [], False
    for word in args:
        if done or not word.value.startswith("-") or word.value == "-":
            out.append(word)
        elif word.value == "--":
            done = True
    return out


_SHUTDOWN = frozenset({"shutdown", "reboot", "halt", "poweroff"})
_DISK_TOOLS = frozenset(
    {"mkswap", "wipefs", "fdisk", "sfdisk", "cfdisk", "gdisk", "sgdisk", "parted", "blkdiscard",
     "mke2fs", "badblocks", "hdparm", "dmsetup", "cryptsetup", "zpool", "lvremove", "vgremove",
     "pvremove", "mdadm"}
)


def _check_destructive(name: str, args: Sequence[_Word], findings: _Findings) -> None:
    values = [a.value for a in args]
    flags, operands = _flags(values)
    words = _operand_words(args)
    # A word that is (or starts with) a variable may split into options ('-rf') and paths: the
    # command is judged as if it held the most destructive options. A quoted one stays one
    # word: it can be '-rf' only when another operand is there for it to act on.
    variables = [a for a in args if a.path.startswith(_UNKNOWN)]
    hidden = any(not a.quoted for a in variables) or (
        bool(variables) and len(words) > len(variables)
    )
    if name == "rm":
        if _has_long(flags, "--no-preserve-root"):
            findings.destroy("'rm --no-preserve-root' lifts the protection of /")
        recursive = flags & {"r", "R"} or _has_long(flags, "--recursive")
        if recursive or hidden:
            how = "rm -r" if recursive else "rm (a variable may hold '-r')"
            for word in words:
                if not recursive and word.quoted and word.path.startswith(_UNKNOWN):
                    continue  # one word: the '-r' itself, or a path without any '-r'
                danger = _target_danger(word.path)
                if danger:
                    findings.destroy(f"'{how} {word.value}' deletes {danger}")
    elif name in ("chmod", "chown", "chgrp", "setfacl", "chattr", "chcon"):
        recursive = bool(flags & {"R"}) or _has_long(flags, "--recursive") or hidden
        reference = _has_long(flags, "--reference")
        targets = words if reference or name in ("setfacl", "chattr") else words[1:]
        for word in targets:
            danger = _target_danger(word.path)
            if danger is None or _local(danger):
                continue
            _, parts, _ = _components(word.path)
            if recursive or len(parts) <= 1:
                findings.destroy(f"'{name} -R {word.value}' changes {danger}")
    elif name.startswith("mkfs") or name in _DISK_TOOLS:
        if name == "hdparm" and not any("security-erase" in v or "trim-sector" in v
                                        for v in values):
            return
        findings.destroy(f"'{name}' formats, erases or repartitions a disk")
    elif name == "dd":
        for word in args:
            if word.value.startswith("of="):
                target = word.path[3:]
                if _is_device(target):
                    findings.destroy(f"'dd {word.value}' overwrites a disk device")
                elif _is_system_path(target):
                    findings.destroy(f"'dd {word.value}' overwrites a system file")
    elif name == "shred":
        findings.destroy("'shred' destroys data beyond recovery")
    elif name == "truncate":
        for word in words:
            if _is_system_path(word.path) or _is_device(word.path):
                findings.destroy(f"'truncate {word.value}' empties a system file or device")
            elif word.glob and (danger := _target_danger(word.path)):
                findings.destroy(f"'truncate {word.value}' changes the size of {danger}")
    elif name in ("cp", "mv", "install", "tee", "ln", "rsync", "pv", "cat", "sponge"):
        _check_writes(name, args, values, words, flags, findings)
    elif name in _SHUTDOWN:
        findings.destroy(f"'{name}' stops or restarts the machine")
    elif name in ("init", "telinit") and operands[:1] in (["0"], ["6"]):
        findings.destroy(f"'{name} {operands[0]}' stops or restarts the machine")
    elif name == "systemctl" and set(operands) & {"poweroff", "reboot", "halt", "kexec",
                                                  "emergency", "rescue"}:
        findings.destroy("'systemctl' stops or restarts the machine")
    elif name == "kill":
        # 'kill -9 -1 1234' and 'kill -- -1' signal every process; 'kill 1' signals init.
        # Only a first word with a dash is the signal ('kill -1 123' is SIGHUP to 123); after
        # it (and after '--') every word is a target.
        k = 2 if values[:1] in (["-s"], ["-n"]) else (
            1 if values[:1] and values[0].startswith("-") and values[0] != "--" else 0)
        if values[k : k + 1] == ["--"]:
            k += 1
        if {"-1", "1"} & set(values[k:]):
            findings.destroy("'kill' would signal every process, or init")
    elif name in ("nc", "ncat", "netcat") and (flags & {"e", "c"} or any(
        _long_option(flag, ("--exec", "--sh-exec", "--lua-exec")) for flag in flags
    )):
        findings.destroy(f"'{name} -e' attaches a shell or program to a network socket")
    elif name == "socat" and any(re.match(r"(?i)[^:,]*\b(?:exec|system)[:,]", v)
                                 for v in operands):
        findings.destroy("'socat EXEC:/SYSTEM:' attaches a shell or program to a socket")


def _check_writes(
    name: str,
    args: Sequence[_Word],
    values: Sequence[str],
    words: Sequence[_Word],
    flags: set[str],
    findings: _Findings,
) -> None:
    if name in ("tee", "sponge"):
        targets = list(words)
    elif name in ("cat", "pv"):
        return  # they write to stdout; a redirection is judged on its own
    else:
        target_dir = next((args[k + 1] for k, v in enumerate(values[:-1]) if v in ("-t",
                           "--target-directory")), None)
        target_dir = target_dir or next((_Word.literal(v.split("=", 1)[1]) for v in values
                                         if v.startswith("--target-directory=")), None)
        targets = [target_dir] if target_dir else list(words[-1:])
        sources = list(words) if target_dir else list(words[:-1])
        if name == "mv":
            leaves = any(_leaves_workdir(word.path) for word in targets)
            for word in sources:
                danger = _target_danger(word.path)
                if danger == _HERE and leaves:
                    # 'mv * /tmp': the sandbox's /tmp (or another tree) keeps nothing for the
                    # user; the working directory is emptied all the same.
                    findings.destroy(f"'mv {word.value} {targets[0].value}' moves {danger} out "
                                     "of it")
                elif danger and danger != _HERE:
                    findings.destroy(f"'mv {word.value}' moves away {danger}")
        if name == "rsync" and any(f.startswith("--del") for f in flags):
            for word in targets:
                danger = _target_danger(word.path)
                if danger:
                    findings.destroy(f"'rsync --delete' into {word.value} deletes {danger}")
    for word in targets:
        if _is_device(word.path):
            findings.destroy(f"'{name}' onto {word.value} overwrites a disk device")
        elif _is_system_path(word.path) and name != "rsync":
            findings.destroy(f"'{name}' onto {word.value} overwrites system files")
