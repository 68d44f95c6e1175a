"""The ``shell_exec`` tool: run one program (argv, no shell) or one shell command line.

Called as ``shell_exec(arguments, context)`` (``call_style="mapping"``) and importable by
reference (``tooldeck_tools_shell.tools:shell_exec``): the runner imports it inside a sandbox
worker (bubblewrap: the workdir mounted writable, no network, a private ``/tmp``, a clean
environment). The tool itself adds a deadline that kills the command's whole process group,
per-stream output caps, a scrubbed environment for the command, and checks its own arguments
again, since it may also run without the schema and policy plugins.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from typing import Any

from tooldeck_tools_process import (
    Completed,
    LineProgress,
    describe,
    requested_timeout,
    run_process,
    whose_limit,
    within_call,
)

from tooldeck_hookspecs import ErrorCode, ToolContext, ToolFailure

__all__ = [
    "DEFAULT_TIMEOUT_S",
    "MAX_TIMEOUT_S",
    "STDOUT_CAP_BYTES",
    "STDERR_CAP_BYTES",
    "MAX_ARGV_ITEMS",
    "MAX_ARGV_BYTES",
    "MAX_COMMAND_LINE_CHARS",
    "MAX_STDIN_BYTES",
    "MAX_ENV_VARS",
    "MAX_ENV_VALUE_CHARS",
    "REFUSED_ENV_NAMES",
    "BASE_ENVIRONMENT",
    "command_environment",
    "shell_exec",
]

DEFAULT_TIMEOUT_S = 60.0
#: ``timeout_s`` may not exceed this; the tool's ``execution.timeout_s`` adds a grace period.
MAX_TIMEOUT_S = 300.0
#: The tool's own ``execution.timeout_s``: the call's ``timeout_s`` plus room to start and answer.
EXECUTION_TIMEOUT_S = MAX_TIMEOUT_S + 15.0
#: Bytes kept of each stream: the first half and the last half of these (errors are at the end).
STDOUT_CAP_BYTES = 128 * 1024
STDERR_CAP_BYTES = 64 * 1024
#: A command that writes this much more than is kept is killed (``yes`` must not run forever).
DISCARD_LIMIT_BYTES = 64 * 1024 * 1024
MAX_ARGV_ITEMS = 4096
#: All of argv, UTF-8 encoded (Linux refuses single arguments over 128 KiB anyway).
MAX_ARGV_BYTES = 512 * 1024
#: The policy's shell guard refuses longer command lines unparsed; so does the tool.
MAX_COMMAND_LINE_CHARS = 16_384
MAX_STDIN_BYTES = 1024 * 1024
MAX_ENV_VARS = 32
MAX_ENV_VALUE_CHARS = 8192

#: Variables that decide which code a program loads or runs: never settable through ``env``
#: (the shell guard does not see ``env``, so the tool refuses them itself). A copy of the shell
#: guard's table (``tooldeck_policy._shell.code_bearing_env_name``: this pack does not depend on
#: tooldeck-policy), plus a few more; a test checks that it covers the guard's.
REFUSED_ENV_NAMES = frozenset(
    {
        "PATH", "IFS", "ENV", "BASH_ENV", "SHELLOPTS", "BASHOPTS", "PS4", "PROMPT_COMMAND",
        "CDPATH", "GLOBIGNORE", "PERL5OPT", "PERL5LIB", "PERLLIB", "PERL5DB", "PYTHONSTARTUP",
        "PYTHONPATH", "PYTHONHOME", "PYTHONINSPECT", "PYTHONUSERBASE", "PYTHONBREAKPOINT",
        "NODE_OPTIONS", "NODE_PATH", "RUBYOPT", "RUBYLIB",
        # git: configuration from the environment runs programs (core.fsmonitor, pagers, ...)
        "GIT_SSH_COMMAND", "GIT_SSH", "GIT_SSH_VARIANT", "GIT_EXEC_PATH",
        "GIT_CONFIG_PARAMETERS", "GIT_CONFIG", "GIT_CONFIG_GLOBAL", "GIT_CONFIG_SYSTEM",
        "GIT_CONFIG_COUNT", "GIT_PROXY_COMMAND", "GIT_ASKPASS", "GIT_EDITOR",
        "GIT_SEQUENCE_EDITOR", "GIT_PAGER", "GIT_EXTERNAL_DIFF", "GIT_TEMPLATE_DIR", "GIT_DIR",
        "GIT_COMMON_DIR", "GIT_ALLOW_PROTOCOL", "GIT_PROTOCOL_FROM_USER",
        # editors, pagers and helpers other programs start
        "EDITOR", "VISUAL", "PAGER", "MANPAGER", "MANOPT", "LESSOPEN", "LESSCLOSE", "LESSKEY",
        "LESSKEYIN", "LESSKEY_CONTENT", "BROWSER", "SHELL", "SSH_ASKPASS", "SUDO_ASKPASS",
        "RSYNC_RSH", "TAR_OPTIONS", "MAKEFLAGS", "MFLAGS", "GNUMAKEFLAGS",
        "GCONV_PATH", "JAVA_TOOL_OPTIONS", "_JAVA_OPTIONS", "LOCPATH", "HOSTALIASES",
        "XDG_CONFIG_HOME", "ZDOTDIR", "GLIBC_TUNABLES",
        # where programs read configuration that names programs to run (HOME=dir makes
        # dir/.gitconfig, dir/.config/git/config, dir/.npmrc, dir/.wgetrc theirs)
        "HOME", "KUBECONFIG", "WGETRC", "SYSTEM_WGETRC", "AWS_CONFIG_FILE", "CARGO_HOME",
        "GOENV", "GNUPGHOME", "OPENSSL_CONF", "OPENSSL_ENGINES", "OPENSSL_MODULES", "PHPRC",
        "PHP_INI_SCAN_DIR", "R_PROFILE", "R_PROFILE_USER", "R_ENVIRON", "R_ENVIRON_USER",
        "PSQLRC", "BUNDLE_GEMFILE", "GEM_HOME", "GEM_PATH", "RUSTUP_HOME", "RUSTUP_TOOLCHAIN",
        # runtime and build-tool options read from the environment
        "JDK_JAVA_OPTIONS", "JAVA_OPTS", "MAVEN_OPTS", "GRADLE_OPTS", "CLASSPATH", "GOFLAGS",
        "RUSTC", "RUSTC_WRAPPER", "RUSTC_WORKSPACE_WRAPPER", "RUSTDOC", "RUSTFLAGS",
        "RUSTDOCFLAGS", "LUA_PATH", "LUA_CPATH",
        # qemu-user's guest environment and library prefix; psql's pager and editor
        "QEMU_SET_ENV", "QEMU_LD_PREFIX", "PSQL_PAGER", "PSQL_EDITOR",
    }
)
_REFUSED_PREFIXES = ("LD_", "DYLD_", "BASH_FUNC_", "MALLOC_", "GLIBC_", "GIT_CONFIG_KEY_",
                     "GIT_CONFIG_VALUE_", "NPM_CONFIG_", "LUA_INIT", "LUA_PATH_", "LUA_CPATH_")
_REFUSED_SUFFIXES = ("_ASKPASS",)
# cargo's configuration keys that name programs (a copy of the guard's _CARGO_CODE).
_REFUSED_CARGO = re.compile(
    r"CARGO_(?:BUILD|TARGET|HOST|REGISTRY|REGISTRIES|ALIAS)_\w*?"
    r"(?:RUNNER|LINKER|RUSTC|WRAPPER|RUSTDOC|FLAGS|CREDENTIAL_PROVIDERS?)"
    r"\Z|CARGO_ALIAS_\w+\Z"
)
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}\Z")  # \Z: not "X\n"

#: The command's environment before ``env`` is applied; nothing is inherited from the host (or
#: from the sandbox worker). Colour and pagers are off: the reader is a model, not a terminal.
BASE_ENVIRONMENT: Mapping[str, str] = {
    "PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    "HOME": "/tmp",
    "TMPDIR": "/tmp",
    "LANG": "C.UTF-8",
    "TERM": "dumb",
    "NO_COLOR": "1",
    "PAGER": "cat",
    "GIT_PAGER": "cat",
    "GIT_TERMINAL_PROMPT": "0",
    "DEBIAN_FRONTEND": "noninteractive",
    # Bytecode in the workdir is a protected path (the host would import it): Python writes
    # none, so 'python -m pytest' does not end in PATH_NOT_ALLOWED.
    "PYTHONDONTWRITEBYTECODE": "1",
}


def _invalid(message: str, suggestion: str | None = None) -> ToolFailure:
    return ToolFailure(ErrorCode.INVALID_ARGUMENTS, message, suggestion=suggestion)


def _too_large(what: str, size: int, limit: int, unit: str = "bytes") -> ToolFailure:
    return ToolFailure(
        ErrorCode.TOO_LARGE,
        f"{what} is {size} {unit}; shell_exec accepts at most {limit} {unit}. Nothing was run.",
        suggestion="Put large data in a file in the working directory and pass its name.",
        details={"limit": limit, "size": size, "unit": unit},
    )


def _command(value: Any) -> list[str] | str:
    if isinstance(value, list | tuple):
        if not value:
            raise _invalid("command must not be empty: give the program and its arguments, "
                           'e.g. ["ls", "-la"]')
        if len(value) > MAX_ARGV_ITEMS:
            raise _too_large("command", len(value), MAX_ARGV_ITEMS, "arguments")
        if not all(isinstance(a, str) for a in value):
            raise _invalid("every element of command must be a string")
        if not value[0]:
            raise _invalid("the program name (command[0]) is empty")
        size = sum(len(a.encode("utf-8", "surrogatepass")) + 1 for a in value)
        if size > MAX_ARGV_BYTES:
            raise _too_large("command", size, MAX_ARGV_BYTES)
        if any("\x00" in a for a in value):
            raise _invalid("an element of command contains a NUL byte, which no program "
                           "can receive")
        return list(value)
    if isinstance(value, str):
        if not value.strip():
            raise _invalid("command must not be empty")
        if len(value) > MAX_COMMAND_LINE_CHARS:
            raise _too_large("the command line", len(value), MAX_COMMAND_LINE_CHARS,
                             "characters")
        if "\x00" in value:
            raise _invalid("the command line contains a NUL byte")
        return value
    raise _invalid(
        f"command must be a list of strings (program and arguments) or a command line "
        f"string, got {type(value).__name__}"
    )


def _timeout(value: Any) -> float:
    if value is None:
        return DEFAULT_TIMEOUT_S
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise _invalid(f"timeout_s must be a number of seconds, got {value!r}")
    if not 0 < value <= MAX_TIMEOUT_S:
        raise _invalid(f"timeout_s must be more than 0 and at most {MAX_TIMEOUT_S:g}, "
                       f"got {value!r}")
    return float(value)


def _stdin(value: Any) -> bytes | None:
    if value is None or value == "":
        return None
    if not isinstance(value, str):
        raise _invalid(f"stdin must be a string, got {type(value).__name__}")
    if len(value) > MAX_STDIN_BYTES:  # cheap bound before encoding a huge string
        raise _too_large("stdin", len(value), MAX_STDIN_BYTES, "characters")
    try:
        data = value.encode("utf-8")
    except UnicodeEncodeError:
        raise _invalid("stdin contains characters that are not valid Unicode (lone "
                       "surrogates)") from None
    if len(data) > MAX_STDIN_BYTES:
        raise _too_large("stdin", len(data), MAX_STDIN_BYTES)
    return data


def _env_name_problem(name: str) -> str | None:
    if not _ENV_NAME.match(name):
        return (f"{name!r} is not a valid variable name (letters, digits and '_', not "
                "starting with a digit, at most 128 characters)")
    upper = name.upper()
    if (upper in REFUSED_ENV_NAMES or upper.startswith(_REFUSED_PREFIXES)
            or upper.endswith(_REFUSED_SUFFIXES) or _REFUSED_CARGO.match(upper)):
        return f"{name!r} changes which code programs load or run; it cannot be set"
    return None


def command_environment(extra: Any) -> dict[str, str]:
    """The command's whole environment: :data:`BASE_ENVIRONMENT` plus validated ``extra``.

    Raises :class:`~tooldeck_hookspecs.ToolFailure` (``INVALID_ARGUMENTS``) naming every bad
    variable: a malformed name, a name in :data:`REFUSED_ENV_NAMES` (or ``LD_*``, ...), a value
    that is not a string, too long, or holds a NUL byte.
    """
    env = dict(BASE_ENVIRONMENT)
    if extra is None:
        return env
    if not isinstance(extra, Mapping):
        raise _invalid(f"env must be an object of NAME: value strings, got "
                       f"{type(extra).__name__}")
    if len(extra) > MAX_ENV_VARS:
        raise _invalid(f"env sets {len(extra)} variables; at most {MAX_ENV_VARS} are allowed")
    problems = []
    for name, value in extra.items():
        problem = _env_name_problem(str(name))
        if problem is None and not isinstance(value, str):
            problem = f"the value of {name!r} must be a string, got {type(value).__name__}"
        elif problem is None and len(value) > MAX_ENV_VALUE_CHARS:
            problem = f"the value of {name!r} is longer than {MAX_ENV_VALUE_CHARS} characters"
        elif problem is None and "\x00" in value:
            problem = f"the value of {name!r} contains a NUL byte"
        if problem:
            problems.append(problem)
        else:
            env[str(name)] = value
    if problems:
        raise _invalid("env: " + "; ".join(problems),
                       suggestion="Set only plain configuration variables (e.g. "
                       "{\"CI\": \"1\"}); PATH, LD_* and similar cannot be changed.")
    return env


def _cwd(value: Any, workdir: str) -> tuple[str, str]:
    """(absolute directory, display) of ``cwd``, which must resolve inside the workdir."""
    root = os.path.realpath(workdir or ".")
    if value is None or value in ("", "."):
        return root, "."
    if not isinstance(value, str):
        raise _invalid(f"cwd must be a path string, got {type(value).__name__}")
    if "\x00" in value:
        raise _invalid("cwd contains a NUL byte")
    # realpath follows links: a link inside the workdir that points out of it is refused too.
    target = os.path.realpath(os.path.join(root, value))
    if target != root and not target.startswith(root + os.sep):
        raise ToolFailure(
            ErrorCode.PATH_NOT_ALLOWED,
            f"cwd {value!r} is outside the working directory",
            suggestion="Use a directory inside the working directory, relative to it.",
        )
    if not os.path.isdir(target):
        raise ToolFailure(
            ErrorCode.EXECUTION_ERROR,
            f"cwd {value!r} is not an existing directory",
            suggestion="Check the name (list the working directory), or create the directory "
            "first.",
        )
    return target, os.path.relpath(target, root)


def _output_encoding(value: Any) -> str:
    if value is None:
        return "text"
    if value not in ("text", "base64"):
        raise _invalid(f"output_encoding must be 'text' or 'base64', got {value!r}")
    return str(value)


def fitted_caps(limits: Mapping[str, Any] | None) -> tuple[int, int]:
    """The stdout and stderr bytes kept, shrunk to fit the call's ``max_output_bytes``
    (``context.limits``) when a deployment set it below this tool's default: a result over the
    limit was refused whole (``OUTPUT_TRUNCATED``, no exit code, no sign the command ran),
    where a shorter output keeps the exit code and says what was cut. The default limit is 8
    times the caps plus 64 KiB (output escaped in JSON, the result's other fields)."""
    most = limits.get("max_output_bytes") if limits else None
    if not isinstance(most, int) or isinstance(most, bool):
        return STDOUT_CAP_BYTES, STDERR_CAP_BYTES
    total = STDOUT_CAP_BYTES + STDERR_CAP_BYTES
    room = (most - min(65536, most // 2)) // 8
    if room >= total:
        return STDOUT_CAP_BYTES, STDERR_CAP_BYTES
    room = max(room, 2048)
    stdout = max(1024, room * STDOUT_CAP_BYTES // total)
    return stdout, max(1024, room - stdout)


def _caps(cap: int, encoding: str) -> tuple[int, int]:
    # Text keeps head and tail; base64 keeps one contiguous run of bytes from the start.
    return (cap, 0) if encoding == "base64" else (cap // 2, cap - cap // 2)


def _start_failure(exc: BaseException, argv: list[str]) -> ToolFailure:
    program = argv[0]
    if isinstance(exc, FileNotFoundError):
        where = "" if "/" in program else f" on PATH ({BASE_ENVIRONMENT['PATH']})"
        return ToolFailure(
            ErrorCode.EXECUTION_ERROR,
            f"program {program!r} was not found{where}; nothing was run",
            suggestion="Check the program's name; only programs installed on the system (or "
            "files in the working directory, given with a path like './script.sh') can run.",
            details={"program": program},
        )
    if isinstance(exc, PermissionError):
        return ToolFailure(
            ErrorCode.EXECUTION_ERROR,
            f"program {program!r} cannot be executed (permission denied); nothing was run",
            suggestion="Make sure it is an executable file, or run it through its interpreter "
            "(e.g. ['python3', 'script.py']).",
            details={"program": program},
        )
    if isinstance(exc, ValueError | UnicodeError):
        return _invalid(f"the command cannot be passed to the operating system: {exc}")
    if isinstance(exc, OSError):
        return ToolFailure(
            ErrorCode.EXECUTION_ERROR,
            f"program {program!r} could not be started: {exc.strerror or exc}",
            details={"program": program, "errno": exc.errno},
        )
    raise exc


def _rlimit(name: str) -> int | None:
    """This process's soft limit ``name`` (``RLIMIT_FSIZE``, ``RLIMIT_CPU``), which the command
    inherits: the limits the runner set for the call, stated as they are rather than guessed."""
    import resource

    soft = resource.getrlimit(getattr(resource, name))[0]
    return None if soft == resource.RLIM_INFINITY else int(soft)


def _notes(completed: Completed, result: dict[str, Any], shell: bool) -> list[str]:
    notes = []
    code = completed.exit_code
    if shell and code == 127:
        notes.append("exit code 127: the shell did not find the program")
    elif shell and code == 126:
        notes.append("exit code 126: the program was found but could not be executed")
    elif completed.signal == "SIGXFSZ":
        fsize = _rlimit("RLIMIT_FSIZE")
        notes.append("the command was killed for writing a file larger than "
                     + (f"{fsize} bytes, the sandbox's limit per file" if fsize is not None
                        else "the sandbox allows"))
    elif completed.signal == "SIGXCPU":
        cpu = _rlimit("RLIMIT_CPU")
        notes.append("the command was killed for using up its CPU time limit"
                     + (f" ({cpu} CPU seconds per process, all its threads together)"
                        if cpu is not None else ""))
    elif completed.signal and not completed.output_overflow:
        notes.append(f"the command was killed by {completed.signal}")
    for stream in ("stdout", "stderr"):
        if result[f"truncated_{stream}"]:
            kept = "its first bytes" if result[f"{stream}_encoding"] == "base64" else (
                "its beginning and end")
            notes.append(f"{stream} was {result[f'{stream}_bytes']} bytes; only {kept} are "
                         "shown: filter the output (grep, head, tail) to see the rest")
    if completed.output_overflow:
        notes.append(f"the command wrote more than {DISCARD_LIMIT_BYTES} bytes beyond what is "
                     "kept and was killed")
    if "replacements" in result["stdout_encoding"]:
        notes.append("stdout is not valid UTF-8; undecodable bytes show as U+FFFD: call again "
                     "with output_encoding 'base64' for the exact bytes")
    return notes


def shell_exec(arguments: Mapping[str, Any], context: ToolContext) -> dict[str, Any]:
    """Run ``command`` in the working directory and report what it did.

    ``command`` is an argv list run without a shell, or a command line string run by
    ``/bin/sh -c`` (one command: the policy plugin refuses chaining, pipes, redirections and
    substitutions in it). A non-zero exit status is a successful call reporting ``exit_code``;
    a program that does not exist is ``EXECUTION_ERROR``; a command still running after
    ``timeout_s`` has its process group killed and the call fails with ``TIMEOUT`` (the partial
    output is in the error's details). So does one still running when its call's deadline
    (``context.seconds_left()``: the tool's ``execution.timeout_s``, which a deployment may set
    below ``timeout_s``) is about to pass: the tool stops it first, so the output is not lost.
    """
    if not isinstance(arguments, Mapping):
        raise _invalid("arguments must be a JSON object")
    command = _command(arguments.get("command"))
    # No timeout_s from the model: the pack's default, or the deployment's own time for the
    # tool where it configured one (a limit raised for long builds must not end at 60 s).
    timeout_s, deployed = requested_timeout(
        arguments.get("timeout_s"), _timeout, DEFAULT_TIMEOUT_S, EXECUTION_TIMEOUT_S,
        getattr(context, "limits", None),
    )
    stdin = _stdin(arguments.get("stdin"))
    env = command_environment(arguments.get("env"))
    encoding = _output_encoding(arguments.get("output_encoding"))
    cwd, cwd_display = _cwd(arguments.get("cwd"), context.workdir)
    shell = isinstance(command, str)
    argv = ["/bin/sh", "-c", command] if isinstance(command, str) else command
    env.setdefault("PWD", cwd)
    call_left = context.seconds_left()
    limit_s, by_call = within_call(timeout_s, call_left)
    stdout_cap, stderr_cap = fitted_caps(getattr(context, "limits", None))
    try:
        completed = run_process(
            argv,
            cwd=cwd,
            env=env,
            stdin=stdin,
            timeout_s=limit_s,
            stdout_caps=_caps(stdout_cap, encoding),
            stderr_caps=_caps(stderr_cap, "text"),
            discard_limit=DISCARD_LIMIT_BYTES,
            # Long runs report their latest output line about once a second (MCP progress).
            on_output=LineProgress(context.emit),
        )
    except (OSError, ValueError, UnicodeError) as exc:
        raise _start_failure(exc, argv) from None
    result = describe(completed, encoding)
    if completed.timed_out and by_call:
        raise ToolFailure(
            ErrorCode.TIMEOUT,
            # The call's limit also counts its time in the category's queue and the sandbox's
            # start: blaming "the deployment" alone misled a command that had waited 5 s of an
            # 8 s limit behind another one and was told it had been given 2.3 s.
            f"the command was stopped after {limit_s:.3g} s, when this call's time limit was "
            f"about to run out ({whose_limit('shell_exec', 'command', timeout_s, deployed)} "
            "or which the call had partly spent waiting in its queue behind other calls and for "
            "its sandbox: "
            f"{max(call_left or 0.0, 0.0):.3g} s of it were left when the command started); it "
            "and the processes it started were killed",
            suggestion=(
                "A larger timeout_s does not help here: run a quicker command, or split the work "
                "into shorter steps (the output so far is in details.partial). If other commands "
                "were running at the same time, this one waited for them: try it again alone."
            ),
            details={"timeout_s": timeout_s, "effective_timeout_s": round(limit_s, 3),
                     "seconds_left_at_start": round(max(call_left or 0.0, 0.0), 3),
                     "limited_by": "call deadline", "deployment_timeout": deployed,
                     "partial": result},
        )
    if completed.timed_out:
        raise ToolFailure(
            ErrorCode.TIMEOUT,
            f"the command did not finish within {timeout_s:g} s; it and the processes it "
            "started were killed",
            suggestion=(
                f"Pass a larger timeout_s (at most {MAX_TIMEOUT_S:g}) if the command needs "
                "longer, or run a quicker one. A program waiting for input never finishes: "
                "pass stdin or use its non-interactive options."
            ),
            details={"timeout_s": timeout_s, "partial": result},
        )
    result["cwd"] = cwd_display
    result["shell"] = shell
    if completed.output_overflow:
        result["output_limit_exceeded"] = True
    notes = _notes(completed, result, shell)
    if notes:
        result["note"] = "; ".join(notes)
    return result
