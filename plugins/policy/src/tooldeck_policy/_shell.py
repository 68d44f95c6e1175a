"""The shell guard: one plain command with its arguments, nothing the shell would run besides it.

A command line is parsed with a real shell parser (bashlex). The syntax tree tells what the shell
would do: chaining (``;``, ``&&``, ``||``, ``&``), pipes, command and process substitution,
redirections, ``${...}`` expansions, function definitions, grouping and compound commands. The
simple commands in the tree are then checked for programs that run a string as code (``eval``,
``exec``, ``sh -c``), for assignments that change what code runs (``LD_PRELOAD=...``), and for known
destructive commands (``rm -rf /``, ``mkfs``, ``dd of=/dev/sda``, ``curl ... | sh``, fork bombs).

bashlex does not cover all of bash (arithmetic ``$((...))``, ``[[ ]]``). When it fails, the line
is split again with :mod:`shlex` in punctuation mode: if that shows any shell operator, or quotes do
not balance, the line is flagged; a plain list of words passes. A parser failure on something that
is not a plain word list is suspicious in itself.

A small quote-aware scan of the raw text adds what parsers drop on the floor: newlines and carriage
returns (a newline separates commands; bashlex returns one tree per line), backslash escapes such as
``\\n`` outside quotes (the shell drops the backslash, so it is only there for another decoder) and
the shellshock prefix ``() {``. Nothing is URL-decoded, but a percent-encoded control character
(``%0a``) in a word that is not a URL is flagged: it only means something to a decoder that would
turn it into a command separator.
"""

from __future__ import annotations

import functools
import os
import re
import shlex
from collections.abc import Iterable, Sequence
from typing import Any

import attrs
import bashlex  # type: ignore[import-untyped]
import bashlex.ast  # type: ignore[import-untyped]

__all__ = ["CommandVerdict", "analyze_command"]

#: Longer command lines are refused unparsed (bashlex is pure Python; keep the guard cheap).
MAX_COMMAND_CHARS = 16_384
_MAX_DEPTH = 3

_SHELLS = frozenset(
    {"sh", "bash", "dash", "zsh", "ksh", "mksh", "ash", "csh", "tcsh", "fish", "rbash", "busybox"}
)
_INTERPRETERS = frozenset(
    {"python", "python2", "python3", "perl", "ruby", "node", "nodejs", "php", "lua", "tclsh"}
)
_DOWNLOADERS = frozenset({"curl", "wget", "fetch", "aria2c", "http", "https"})
_CODE_RUNNERS = {
    "eval": "'eval' runs a string as shell code",
    "exec": "'exec' replaces the shell with another program",
    "source": "'source' runs a file as shell code",
    ".": "'.' runs a file as shell code",
}
# Programs that run the rest of their arguments as another command.
_WRAPPERS = frozenset(
    {
        "sudo",
        "doas",
        "env",
        "nohup",
        "nice",
        "ionice",
        "timeout",
        "command",
        "builtin",
        "time",
        "stdbuf",
        "setsid",
        "xargs",
        "chroot",
        "unbuffer",
        "strace",
        "watch",
    }
)
# Variables that decide which code a program loads or runs.
_CODE_VARIABLES = frozenset(
    {
        "LD_PRELOAD",
        "LD_LIBRARY_PATH",
        "LD_AUDIT",
        "BASH_ENV",
        "ENV",
        "PATH",
        "IFS",
        "PS4",
        "PROMPT_COMMAND",
        "SHELLOPTS",
        "BASHOPTS",
        "PERL5OPT",
        "PERL5LIB",
        "PYTHONSTARTUP",
        "PYTHONPATH",
        "NODE_OPTIONS",
        "RUBYOPT",
        "GIT_SSH_COMMAND",
        "GIT_EXEC_PATH",
    }
)
_SHUTDOWN = frozenset({"shutdown", "reboot", "halt", "poweroff"})
_DISK_TOOLS = frozenset(
    {"mkswap", "wipefs", "fdisk", "sfdisk", "cfdisk", "gdisk", "sgdisk", "parted", "blkdiscard"}
)
_DISK_DEVICE = re.compile(r"^/dev/(?:sd|hd|vd|xvd|nvme|mmcblk|disk|md|dm-|loop|mapper/|sr|root)")
_ODD_PROGRAM = re.compile(r"[\s;&|<>`$()\\'\"]")
# Line feed, carriage return and NUL, percent-encoded. Only these: '%10s' or '%1d' are printf and
# date formats.
_ENCODED_CONTROL = re.compile(r"%0[0ad]", re.IGNORECASE)
_SHELLSHOCK = re.compile(r"\(\s*\)\s*\{")
_OPERATORS = {
    ";": "';' runs a second command",
    "&&": "'&&' chains a second command",
    "||": "'||' chains a second command",
    "&": "'&' runs a command in the background and starts another",
    "\n": "a newline separates a second command",
}


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
    def __init__(self) -> None:
        self.injection: list[str] = []
        self.destructive: list[str] = []

    def inject(self, reason: str) -> None:
        if reason not in self.injection:
            self.injection.append(reason)

    def destroy(self, reason: str) -> None:
        if reason not in self.destructive:
            self.destructive.append(reason)

    def verdict(self) -> CommandVerdict:
        return CommandVerdict(self.injection, self.destructive)


def analyze_command(
    command: str | Sequence[str], allow_pipes: bool = False, *, through_shell: bool = False
) -> CommandVerdict:
    """Find shell injection and destructive intent in ``command``.

    ``command`` is a command line (parsed as bash would parse it) or an argv list. An argv list is
    taken to be executed directly, without a shell (``subprocess.run(argv)``): its elements are
    never re-parsed, so ``;`` or ``|`` inside one is a literal character and not flagged. The list
    is still checked for NUL bytes, for a program that runs a script string (``bash -c SCRIPT``:
    nesting is flagged and the script is analysed as a command line), for ``eval``/``exec`` and
    for destructive commands. Pass ``through_shell=True`` for a tool that joins the list with
    spaces into a shell command line: the joined line is then analysed as a string.

    ``allow_pipes`` lets ``|`` through (other chaining stays refused).
    """
    if isinstance(command, str):
        return _analyze_string(command, allow_pipes)
    findings = _Findings()
    argv = list(command)
    if not all(isinstance(a, str) for a in argv):
        findings.inject("every argument of an argv list must be a string")
        return findings.verdict()
    if through_shell:
        return _analyze_string(" ".join(argv), allow_pipes)
    if any("\x00" in a for a in argv):
        findings.inject("an argument contains a NUL byte")
    _check_simple(argv, [], findings, allow_pipes, depth=0)
    return findings.verdict()


@functools.lru_cache(maxsize=2048)
def _analyze_string(command: str, allow_pipes: bool) -> CommandVerdict:
    # Cached: agents repeat commands (tests, builds), and the parser is pure Python.
    findings = _Findings()
    # A trailing line break ends the one command; it does not start another.
    _analyze_line(command.rstrip(" \t\n"), allow_pipes, findings, depth=0)
    return findings.verdict()


# -------------------------------------------------------------------------
# command lines
# -------------------------------------------------------------------------


def _analyze_line(line: str, allow_pipes: bool, findings: _Findings, depth: int) -> None:
    if len(line) > MAX_COMMAND_CHARS:
        findings.inject(f"the command is longer than {MAX_COMMAND_CHARS} characters")
        return
    if "\x00" in line:
        findings.inject("the command contains a NUL byte")
    _scan_raw(line, findings)
    try:
        trees = bashlex.parse(line)
    except Exception as exc:
        _fallback(line, str(exc), allow_pipes, findings, depth)
        return
    if len(trees) > 1:
        findings.inject(_OPERATORS["\n"])
    for tree in trees:
        _walk(tree, line, allow_pipes, findings, depth)


def _scan_raw(line: str, findings: _Findings) -> None:
    """Flag what the parsers lose: line breaks, backslash escapes outside quotes, shellshock."""
    if "\r" in line:
        findings.inject("a carriage return can hide part of the command or end a line")
    if _SHELLSHOCK.search(line):
        findings.inject("'() {' defines a shell function (the shellshock pattern)")
    quote: str | None = None
    i, n = 0, len(line)
    while i < n:
        c = line[i]
        if quote == "'":
            if c == "'":
                quote = None
        elif quote == '"':
            if c == "\\":
                i += 2
                continue
            if c == '"':
                quote = None
        else:
            if c == "\\":
                nxt = line[i + 1] if i + 1 < n else ""
                if nxt in ("n", "r"):
                    findings.inject(
                        f"'\\{nxt}' outside quotes is a line break in disguise (the shell drops "
                        "the backslash; another decoder would split the command there)"
                    )
                i += 2
                continue
            if c in ("'", '"'):
                quote = c
            elif c == "\n":
                findings.inject(_OPERATORS["\n"])
        i += 1


def _fallback(line: str, error: str, allow_pipes: bool, findings: _Findings, depth: int) -> None:
    """bashlex could not parse the line: look again with shlex in punctuation mode."""
    lexer = shlex.shlex(line, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    lexer.commenters = ""
    try:
        tokens = list(lexer)
    except ValueError as exc:
        findings.inject(f"the command cannot be parsed ({exc}); quotes must balance")
        return
    punctuation = [t for t in tokens if t and all(ch in "();<>|&" for ch in t)]
    for token in dict.fromkeys(punctuation):
        if token == "|" and allow_pipes:
            continue
        findings.inject(f"shell syntax {token!r} in a command the parser rejects ({error})")
    # Substitutions and expansions inside words, which shlex leaves in place.
    _check_encoded(tokens, findings)
    for token in tokens:
        if "`" in token:
            findings.inject("backticks run a command substitution")
        if "$(" in token:
            findings.inject("'$(' runs a command substitution")
        if "${" in token:
            findings.inject("'${' is a parameter expansion, which can hide commands")
    # Destructive checks per simple command, split at the operators.
    argv: list[str] = []
    stages: list[list[str]] = []
    for token in [*tokens, ";"]:
        if token in punctuation or token == ";":
            if argv:
                stages.append(argv)
            argv = []
        else:
            argv.append(token)
    for stage in stages:
        lead = 0
        while lead < len(stage) and _is_assignment(stage[lead]):
            lead += 1
        _check_simple(stage[lead:], stage[:lead], findings, allow_pipes, depth)
    programs = [os.path.basename(_unwrap(s)[0]) if _unwrap(s) else "" for s in stages]
    _check_download_pipe(programs, findings, "|" in punctuation)


def _is_assignment(word: str) -> bool:
    return bool(re.match(r"^[A-Za-z_][A-Za-z0-9_]*=", word))


# -------------------------------------------------------------------------
# syntax tree
# -------------------------------------------------------------------------


def _children(node: Any) -> Iterable[Any]:
    for attr in ("parts", "list"):
        for child in getattr(node, attr, None) or ():
            yield child
    for attr in ("command", "output", "heredoc"):
        child = getattr(node, attr, None)
        if isinstance(child, bashlex.ast.node):
            yield child


def _walk(node: Any, line: str, allow_pipes: bool, findings: _Findings, depth: int) -> None:
    kind = node.kind
    if kind == "operator":
        op = node.op
        findings.inject(_OPERATORS.get(op, f"operator {op!r} chains commands"))
    elif kind == "pipe":
        if not allow_pipes:
            findings.inject(f"'{node.pipe}' pipes the output into a second command")
    elif kind == "pipeline":
        programs = [_program(p) for p in node.parts if p.kind == "command"]
        _check_download_pipe(programs, findings, True)
    elif kind == "redirect":
        findings.inject(f"'{_text(node, line)}' redirects input or output")
        target = getattr(node, "output", None)
        if (
            isinstance(target, bashlex.ast.node)
            and target.kind == "word"
            and _DISK_DEVICE.match(target.word)
            and node.type in (">", ">>", ">|", "&>")
        ):
            findings.destroy(f"writing to {target.word} overwrites a disk device")
    elif kind == "commandsubstitution":
        text = _text(node, line)
        findings.inject(f"'{_clip(text)}' runs a command substitution")
    elif kind == "processsubstitution":
        findings.inject(f"'{_clip(_text(node, line))}' runs a process substitution")
    elif kind == "parameter":
        if line.startswith("${", node.pos[0]):
            findings.inject(
                f"'{_clip(_text(node, line))}' is a parameter expansion, which can hide commands"
            )
    elif kind == "function":
        name = node.name.word
        findings.inject(f"'{name}()' defines a shell function")
        if name in _programs_in(node.body):
            findings.destroy(f"function '{name}' calls itself (a fork bomb)")
    elif kind == "compound":
        opening = node.list[0].word if node.list and node.list[0].kind == "reservedword" else ""
        if opening == "(":
            findings.inject("'( ... )' runs commands in a subshell")
        elif opening == "{":
            findings.inject("'{ ...; }' groups several commands")
    elif kind in ("if", "for", "while", "until", "case"):
        findings.inject(f"'{kind}' is a compound command that runs several commands")
    elif kind == "command":
        words = [p.word for p in node.parts if p.kind == "word"]
        assignments = [p.word for p in node.parts if p.kind == "assignment"]
        first = next((p for p in node.parts if p.kind == "word"), None)
        if first is not None and any(
            getattr(p, "kind", "") in ("parameter", "commandsubstitution") for p in first.parts
        ):
            findings.inject("the program name comes from an expansion, so what runs is hidden")
        # Quoted words are left alone: 'printf "%0d"' is a format, not an encoded separator.
        raw = [_text(p, line) for p in node.parts if p.kind == "word"]
        _check_encoded([w for w in raw if "'" not in w and '"' not in w], findings)
        _check_simple(words, assignments, findings, allow_pipes, depth)
    for child in _children(node):
        _walk(child, line, allow_pipes, findings, depth)


def _text(node: Any, line: str) -> str:
    start, end = node.pos
    return str(line[start:end])


def _clip(text: str, limit: int = 60) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _program(node: Any) -> str:
    words = [p.word for p in node.parts if p.kind == "word"]
    words = _unwrap(words)
    return os.path.basename(words[0]) if words else ""


def _programs_in(node: Any) -> set[str]:
    found: set[str] = set()
    stack = [node]
    while stack:
        current = stack.pop()
        if current.kind == "command":
            found.add(_program(current))
        stack.extend(_children(current))
    return found


def _check_download_pipe(programs: Sequence[str], findings: _Findings, piped: bool) -> None:
    if not piped:
        return
    for i, program in enumerate(programs):
        if program in _DOWNLOADERS:
            runner = next((p for p in programs[i + 1 :] if p in _SHELLS | _INTERPRETERS), None)
            if runner:
                findings.destroy(f"'{program} ... | {runner}' downloads code and runs it unseen")


# -------------------------------------------------------------------------
# simple commands
# -------------------------------------------------------------------------


def _unwrap(words: Sequence[str], assignments: list[str] | None = None) -> list[str]:
    """Drop wrappers (``sudo -u x``, ``env A=1``, ``timeout 5``, ``nice -n 5``) before the program.

    Assignments made through ``env`` are appended to ``assignments`` when given.
    """
    words = list(words)
    for _ in range(8):
        if not words:
            return words
        name = os.path.basename(words[0])
        if name not in _WRAPPERS:
            return words
        rest = words[1:]
        # Options and their values, assignments, and a leading duration (timeout) go.
        while rest and (rest[0].startswith("-") or _is_assignment(rest[0])):
            option = rest.pop(0)
            if _is_assignment(option):
                if assignments is not None:
                    assignments.append(option)
            elif option in _VALUE_OPTIONS and name in _OPTION_TAKERS and rest:
                rest.pop(0)
        if name == "timeout" and rest and re.match(r"^[0-9.]+[smhd]?$", rest[0]):
            rest.pop(0)
        if name == "chroot" and rest:
            rest.pop(0)
        words = rest
    return words


_VALUE_OPTIONS = frozenset({"-u", "-g", "-n", "-c", "-s", "-k", "-C", "-o", "-e", "-i", "-p"})
_OPTION_TAKERS = frozenset({"sudo", "doas", "nice", "timeout", "ionice", "stdbuf", "xargs"})


def _check_encoded(words: Iterable[str], findings: _Findings) -> None:
    for word in words:
        if "://" not in word and _ENCODED_CONTROL.search(word):
            findings.inject(
                f"'{_clip(word)}' holds a percent-encoded line break or NUL (%0a, %0d, %00), "
                "which splits the command once something decodes it"
            )


def _check_simple(
    words: Sequence[str],
    assignments: Sequence[str],
    findings: _Findings,
    allow_pipes: bool,
    depth: int,
) -> None:
    all_assignments = list(assignments)
    argv = _unwrap(words, all_assignments)
    for assignment in all_assignments:
        name = assignment.split("=", 1)[0]
        if name in _CODE_VARIABLES:
            findings.inject(f"setting {name} changes which code the command runs")
    if not argv:
        return
    if _ODD_PROGRAM.search(argv[0]):
        # No program is named like this: it is a fragment made to close a quote of a command
        # template ('";id;"') and run what follows.
        findings.inject(
            f"the program name {_clip(argv[0])!r} holds shell syntax or spaces; it looks like a "
            "fragment meant to break out of quotes"
        )
    program = os.path.basename(argv[0])
    args = argv[1:]
    if program in _CODE_RUNNERS:
        findings.inject(_CODE_RUNNERS[program])
    if program == "busybox" and args:
        program, args = os.path.basename(args[0]), args[1:]
    if program in _SHELLS:
        script = _shell_script(args)
        if script is not None:
            findings.inject(f"'{program} -c' runs a nested shell")
            if depth < _MAX_DEPTH:
                inner = _Findings()
                _analyze_line(script, allow_pipes, inner, depth + 1)
                for reason in inner.injection:
                    findings.inject(f"in the nested script: {reason}")
                for reason in inner.destructive:
                    findings.destroy(f"in the nested script: {reason}")
    _check_destructive(program, args, findings)


def _shell_script(args: Sequence[str]) -> str | None:
    """The script of ``sh -c SCRIPT`` (also ``-lc``, ``-ec``), or None."""
    for i, arg in enumerate(args):
        if arg == "--":
            return None
        if arg.startswith("-") and not arg.startswith("--") and "c" in arg[1:]:
            # The first non-option argument after the flags is the script.
            for later in args[i + 1 :]:
                if not later.startswith("-"):
                    return later
            return ""
    return None


def _flags(args: Sequence[str]) -> tuple[set[str], list[str]]:
    """Short flags (letters) and long options, and the operands, GNU style."""
    flags: set[str] = set()
    operands: list[str] = []
    options_done = False
    for arg in args:
        if options_done or not arg.startswith("-") or arg == "-":
            operands.append(arg)
        elif arg == "--":
            options_done = True
        elif arg.startswith("--"):
            flags.add(arg)
        else:
            flags.update(arg[1:])
    return flags, operands


def _is_sweeping(target: str) -> bool:
    """A target whose recursive removal or mode change wrecks the system or the user's home."""
    if target in (
        "*",
        ".",
        "..",
        "./*",
        ".*",
        "~",
        "~/",
        "~/*",
        "$HOME",
        "${HOME}",
        "$HOME/",
        "$HOME/*",
        "${HOME}/",
        "${HOME}/*",
        "/*",
    ):
        return True
    if target.startswith("/"):
        normalized = os.path.normpath(target.rstrip("*"))
        # The root itself or a directory directly below it (/etc, /usr, /home, ...).
        return normalized.count("/") <= 1 and not normalized.startswith("/tmp")
    return False


def _check_destructive(program: str, args: Sequence[str], findings: _Findings) -> None:
    flags, operands = _flags(args)
    if program == "rm":
        if "--no-preserve-root" in flags:
            findings.destroy("'rm --no-preserve-root' lifts the protection of /")
        recursive = bool(flags & {"r", "R", "--recursive"})
        sweeping = [t for t in operands if _is_sweeping(t)]
        if recursive and sweeping:
            findings.destroy(
                f"'rm -r {' '.join(sweeping)}' deletes the system, a home, or everything here"
            )
    elif program in ("chmod", "chown", "chgrp"):
        recursive = bool(flags & {"R", "--recursive"})
        targets = operands[1:] if operands else []
        sweeping = [t for t in targets if _is_sweeping(t) and t not in ("*", ".", "./*", ".*")]
        if sweeping and (recursive or "/" in sweeping):
            findings.destroy(f"'{program} -R' on {' '.join(sweeping)} changes the whole system")
    elif program.startswith("mkfs") or program == "mke2fs" or program in _DISK_TOOLS:
        findings.destroy(f"'{program}' formats or repartitions a disk")
    elif program == "dd":
        for arg in args:
            if arg.startswith("of=/dev/") and arg[3:] not in (
                "/dev/null",
                "/dev/stdout",
                "/dev/stderr",
            ):
                findings.destroy(f"'dd {arg}' overwrites a device")
    elif program == "shred":
        if any(t.startswith("/dev/") for t in operands):
            findings.destroy("'shred' on a device destroys the disk")
    elif program in _SHUTDOWN:
        findings.destroy(f"'{program}' stops or restarts the machine")
    elif program in ("init", "telinit") and operands[:1] in (["0"], ["6"]):
        findings.destroy(f"'{program} {operands[0]}' stops or restarts the machine")
    elif program == "systemctl" and set(operands) & {"poweroff", "reboot", "halt", "kexec"}:
        findings.destroy("'systemctl' stops or restarts the machine")
    elif program == "kill":
        # 'kill -9 -1' and 'kill -- -1' signal every process; 'kill 1' signals init.
        # ('kill -1 123' is SIGHUP to 123: -1 is only a target when it comes last.)
        if (len(args) >= 2 and args[-1] == "-1") or (args and args[-1] == "1"):
            findings.destroy("'kill' would signal every process, or init")
    elif program in ("nc", "ncat", "netcat") and flags & {"e", "c"}:
        findings.destroy(f"'{program} -e' attaches a shell or program to a network socket")
    elif program == "find":
        root = args[0] if args and not args[0].startswith("-") else "."
        if "-delete" in args and _is_sweeping(root) and root not in (".", "*"):
            findings.destroy(f"'find {root} -delete' deletes a whole tree")
