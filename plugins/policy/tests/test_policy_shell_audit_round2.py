"""The shell guard, second audit: hidden words, xargs input, option prefixes, missing programs,
inline-code evasions, quadratic paths and destructive commands that passed clean.

Nothing here runs a shell: the analyzer is called directly (shared/data/security/README.md,
rule 1). Work is bounded by counting calls, never by timing.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable
from typing import Any

import pytest
from tooldeck_policy import _shell
from tooldeck_policy._authorize import authorize
from tooldeck_policy._shell import analyze_command

from tooldeck_hookspecs import (
    Decision,
    SecurityConfig,
    SecurityLevel,
    SessionInfo,
    ToolCall,
    ToolDefinition,
)


def _flagged(command: str | list[str]) -> bool:
    verdict = analyze_command(command)
    return bool(verdict.injection or verdict.destructive)


def _clean(command: str | list[str]) -> bool:
    return analyze_command(command).clean


# --- 1. a variable in a place where it can be an option or code ---------------------------

HIDDEN_CODE = [
    'python3 "$X"',
    "python3 $X",
    'python3 -B "$X"',
    "sh $X",
    'bash "$X"',
    'dash -e "$X"',
    'awk "$X"',
    'gawk -f prog.awk "$X"',
    'sed "$X" f',
    'sed -n p "$F"',
    'perl "$X"',
    'node "$X"',
    'ruby "$X"',
    'python3 -c "print($X)"',
    'perl -e "print $X"',
    "sed \"s/a/$B/\" f",
    'git -c "$X" status',
    'git "$X" status',
    'git fetch "$X" origin',
    'tar "$X" -cf x .',
    'make "$TARGET"',
    'rsync "$X" a b',
    'sort "$X" f',
]


@pytest.mark.parametrize("command", HIDDEN_CODE)
def test_a_variable_where_an_option_or_code_goes_is_destructive(command: str) -> None:
    assert analyze_command(command).destructive, command


HIDDEN_BENIGN = [
    "echo $X",
    'ls "$X"',
    'python3 script.py "$X"',
    'bash script.sh "$X"',
    'python3 -c "import sys; print(sys.argv)" "$X"',
    'awk -v x="$X" "{print x}"',
    "awk '{print $1}' f",
    'git commit -m "$MSG"',
    'git -C "$DIR" status',
    'tar -xf "$ARCHIVE"',
    'tar -C "$DIR" -xf a.tar',
    "python3 $HOME/x.py",
    'grep -r "$PATTERN" .',
]


@pytest.mark.parametrize("command", HIDDEN_BENIGN)
def test_a_variable_as_data_stays_clean(command: str) -> None:
    assert _clean(command), analyze_command(command)


def _shell_tool() -> ToolDefinition:
    return ToolDefinition(
        name="shell_exec",
        description="d",
        category="shell",
        security=SecurityConfig(level=SecurityLevel.DANGEROUS, command_params=("command",)),
    )


@pytest.mark.parametrize(
    ("command", "env"),
    [
        ('python3 "$X"', {"X": "-c__import__('os').system('rm -rf ~')"}),
        ("sh $X", {"X": "-c id"}),
        ('git -c "$X" status', {"X": "core.pager=sh -c id"}),
        ('awk "$X"', {"X": 'BEGIN{system("id")}'}),
    ],
)
def test_code_set_through_shell_exec_env_is_not_allowed_unseen(
    command: str, env: dict[str, str]
) -> None:
    session = SessionInfo(session_id="s", workdir="/tmp/w", always_allow={"shell_exec"})
    call = ToolCall(name="shell_exec", arguments={"command": command, "env": env})
    decision = authorize(call, _shell_tool(), session)
    assert isinstance(decision, Decision) and decision.action in ("ask", "deny"), decision


# --- 2. xargs adds words the guard does not see --------------------------------------------

XARGS = [
    ["xargs", "-0", "python3", "-c"],
    "xargs -0 python3 -c",
    "xargs -0 perl -e",
    "xargs -0 node -e",
    "xargs -0 sed -e",
    "xargs -0 git -c",
    "xargs -0 rm",
    "xargs rm -f",
    "xargs -0 tar",
    "xargs -0 sh",
    "xargs python3",
    "xargs -n1 awk",
    "xargs -I{} python3 -c {}",
    "xargs -0 timeout 5 perl -e",
]


@pytest.mark.parametrize("command", XARGS)
def test_xargs_input_that_completes_code_or_a_deletion_is_destructive(
    command: str | list[str],
) -> None:
    assert analyze_command(command).destructive, command


XARGS_BENIGN = [
    "xargs grep -l foo",
    "xargs echo",
    "xargs -0 wc -l",
    "xargs -I{} cp {} dir/",
    "xargs -0 python3 script.py",
    "xargs -n1 basename",
    ["xargs", "-0", "ls", "-l"],
]


@pytest.mark.parametrize("command", XARGS_BENIGN)
def test_xargs_of_ordinary_programs_stays_clean(command: str | list[str]) -> None:
    assert _clean(command), analyze_command(command)


# --- 3. GNU long options by their unambiguous prefixes ------------------------------------

PREFIXES = [
    "sed --e='1e id' f",
    "sed --ex '1e id' f",
    "env --s='sh -c id'",
    "env --split 'sh -c id'",
    "git rebase --exe 'rm -rf ~' HEAD~1",
    "git ls-remote --upload-pa='touch /tmp/x' .",
    "git fetch --upload-p 'touch x' origin",
    "git push --receive-p=x origin",
    "git archive --ex=x --remote=r HEAD",
    "git difftool --extc=x",
    "git grep --open-files f",
    "su --comm id root",
    "flock f --comm id",
    "rsync --rs='sh -c id' a b",
]


@pytest.mark.parametrize("command", PREFIXES)
def test_abbreviated_long_options_that_run_code_are_caught(command: str) -> None:
    assert _flagged(command), command


PREFIX_BENIGN = [
    "sed --exp='s/a/b/' f",
    "git fetch --rec origin",
    "git log --oneline",
    "git rebase -i HEAD~2",
    "env --ch /tmp ls",
    "env --chdir=/tmp ls",
    "git push --tags origin",
    "rsync -avz --exclude x a b",
]


@pytest.mark.parametrize("command", PREFIX_BENIGN)
def test_abbreviated_ordinary_long_options_stay_clean(command: str) -> None:
    assert _clean(command), analyze_command(command)


# --- 4. programs and options that run commands ---------------------------------------------

RUNS_COMMANDS = [
    "sqlite3 :memory: '.shell id'",
    "sqlite3 -cmd '.system id' :memory:",
    "sqlite3 db.sqlite '.sh id'",
    "sqlite3 db.sqlite '.once |id' 'select 1'",
    "sqlite3 db.sqlite \"select edit('x')\"",
    "sqlite3 db.sqlite",
    "rsync -e'sh -c id' a localhost:b",
    "rsync -avze'sh -c id' a localhost:b",
    "setpriv --pdeathsig KILL rm -rf ~",
    "setpriv --reuid 1000 rm -rf /",
    "strace --trace open rm -rf ~",
    "strace -O 5 rm -rf ~",
    "ed",
    "ed notes.txt",
    "ex notes.txt",
    "vim -es notes.txt",
]


@pytest.mark.parametrize("command", RUNS_COMMANDS)
def test_programs_that_run_commands_are_caught(command: str) -> None:
    assert _flagged(command), command


RUNS_BENIGN = [
    "sqlite3 db.sqlite 'select * from t'",
    "sqlite3 db.sqlite .tables",
    "sqlite3 -header -csv db.sqlite 'select 1;'",
    "sqlite3 --version",
    "rsync -avz a b",
    "setpriv --reuid 1000 ls",
    "strace -f -e trace=open ls",
    "strace --trace=open ls",
    "vim notes.txt",
]


@pytest.mark.parametrize("command", RUNS_BENIGN)
def test_ordinary_uses_of_those_programs_stay_clean(command: str) -> None:
    assert _clean(command), analyze_command(command)


# --- 5. inline code that hides how it starts a program -------------------------------------

EVASIONS = [
    "python3 -c \"import asyncio; asyncio.run(asyncio.create_subprocess_shell('id'))\"",
    "python3 -c \"import operator,os; operator.attrgetter('sys'+'tem')(os)('id')\"",
    "python3 -c \"import operator,os; operator.methodcaller('sys'+'tem', 'id')(os)\"",
    "python3 -c \"import os; os.__getattribute__('sys'+'tem')('id')\"",
    "python3 -c \"().__class__.__base__.__subclasses__()\"",
    "perl -e 'print readpipe q(id)'",
    "perl -e 'open(F,q(|id))'",
    "perl -e 'open(my $f, \"-|\", \"id\")'",
    "perl -e 'my $f = \"sys\" . \"tem\"; &$f(\"id\")'",
    "node -e 'process.getBuiltinModule(\"child_\"+\"process\").execSync(\"id\")'",
    "node -e 'const m = \"child_\" + \"process\"; globalThis[m]'",
    "awk 'BEGIN{c=\"sh\";s=\"id\";printf(\"%s;\\n\", s) | c}'",
    "awk 'BEGIN{c=\"sh\"; print \"id;\" | c}'",
    "awk 'BEGIN{c=\"id\"; c | getline x; print x}'",
]


@pytest.mark.parametrize("command", EVASIONS)
def test_inline_code_evasions_are_destructive(command: str) -> None:
    assert analyze_command(command).destructive, command


EVASION_BENIGN = [
    "python3 -c \"import os; print(os.listdir('.'))\"",
    "python3 -c \"print('.'.join(['a', 'b']))\"",
    "python3 -c \"print('a' * 3)\"",
    "perl -ne 'print if /foo|bar/'",
    "perl -e 'open(my $fh, \"<\", \"f\") || die; print <$fh>'",
    "node -e 'console.log([1, 2].map(x => x * 2))'",
    "awk '/foo|bar/ {print $1}'",
    "awk '{ if ($1 > 2 || $2 < 1) print }'",
    "awk '{ gsub(/a|b/, \"x\"); print }'",
    "awk '{print $1 / 2}'",
    "awk -F'|' '{print $2}'",
]


@pytest.mark.parametrize("command", EVASION_BENIGN)
def test_ordinary_inline_code_stays_clean(command: str) -> None:
    assert _clean(command), analyze_command(command)


# --- 6. quadratic paths: work counted, not timed -------------------------------------------


def _count_calls(monkeypatch: pytest.MonkeyPatch, name: str) -> list[int]:
    calls = [0]
    real: Callable[..., Any] = getattr(_shell, name)

    def counting(*args: Any, **kwargs: Any) -> Any:
        calls[0] += 1
        return real(*args, **kwargs)

    monkeypatch.setattr(_shell, name, counting)
    return calls


@pytest.mark.parametrize(
    "build",
    [
        lambda n: "pnpm " + "-c " * n,
        lambda n: ["pnpm", *["-c"] * n],
        lambda n: "pnpm " + "--shell-mode " * n,
        lambda n: ["pnpm", *["--shell"] * n],
        lambda n: ["timeout", "5", "pnpm", *["-c"] * n],
    ],
)
def test_repeated_joining_options_are_analysed_once(
    monkeypatch: pytest.MonkeyPatch, build: Callable[[int], str | list[str]]
) -> None:
    # 'pnpm -c -c -c ...': each -c joins the rest into one command; the rest was re-joined and
    # re-analysed for every -c (39 s for 16 KB).
    calls = _count_calls(monkeypatch, "_analyze_line")
    counts = []
    for n in (200, 800):
        _shell._analyze_string.cache_clear()
        calls[0] = 0
        analyze_command(build(n))
        counts.append(calls[0])
    assert counts[1] <= counts[0] + 2 and counts[1] <= 8, counts


def _delimiters(count: int) -> list[str]:
    # Characters GNU sed (and the old pattern) take as an 's' delimiter: no word character,
    # no space, no backslash; punctuation and symbols from all of Unicode.
    out = []
    for code in range(0xA1, 0x30000):
        char = chr(code)
        if unicodedata.category(char)[0] in "PS" and re.fullmatch(r"[^\w\s\\]", char):
            out.append(char)
            if len(out) == count:
                break
    return out


@pytest.mark.parametrize(
    "build",
    [
        lambda d: ["sed", "-e", "".join("s" + c for c in d)],
        lambda d: ["sed", *[x for _ in range(3) for x in ("-e", "".join("s" + c for c in d))]],
        lambda d: ["sed", "".join("y" + c for c in d), "f"],
        # A backslash both escapes and is a plain character to such a pattern: each '\\x' of
        # an 's' (or a '\\%...%' address) that never closes doubled the work (exponential:
        # 22 pairs took 0.7 s, 40 would take days). Kept short so the old code ends.
        lambda d: ["sed", "s/" + "\\x" * 16],
        lambda d: ["sed", "-n", "\\%" + "\\x" * 16 + "p"],
    ],
)
def test_sed_scripts_are_read_in_one_pass(
    monkeypatch: pytest.MonkeyPatch, build: Callable[[list[str]], list[str]]
) -> None:
    # 's' + a delimiter that never closes, 4,000 times: a pattern that scans to the end of
    # the script for each one is quadratic (2.6 s for one 16 KB script, 40 s for 60). Any
    # pattern of the guard that scans for a back-referenced delimiter is recorded: none may
    # read a sed script; the one-pass reader does, once per script.
    scanned: list[str] = []

    class Recording:
        def __init__(self, pattern: re.Pattern[str]) -> None:
            self.pattern = pattern

        def __getattr__(self, attr: str) -> Any:
            method = getattr(self.pattern, attr)

            def recorded(*args: Any, **kwargs: Any) -> Any:
                scanned.extend(a[:40] for a in args if isinstance(a, str))
                return method(*args, **kwargs)

            return recorded

    for name, value in list(vars(_shell).items()):
        if isinstance(value, re.Pattern) and re.search(r"\(\?!\\\d\)", value.pattern):
            monkeypatch.setattr(_shell, name, Recording(value))
    reader = _count_calls(monkeypatch, "_sed_parse_runs")
    command = build(_delimiters(4000))
    verdict = analyze_command(command)
    assert verdict.injection or verdict.destructive  # an unreadable script fails closed
    assert not scanned, scanned
    assert 1 <= reader[0] <= command.count("-e") + 1


def test_sed_text_over_many_lines_is_read_in_one_pass(monkeypatch: pytest.MonkeyPatch) -> None:
    # 'a\' text continued over thousands of lines: each line's check copied the script so far.
    copies: list[int] = []
    real = _shell._sed_parse_runs

    class Script(str):
        def __getitem__(self, key: Any) -> Any:
            part = str.__getitem__(self, key)
            if isinstance(key, slice) and len(part) > 100:
                copies.append(len(part))
            return part

    monkeypatch.setattr(_shell, "_sed_parse_runs", lambda script: real(Script(script)))
    assert not _shell._sed_runs("a\\\n" + "x\\\n" * 3000 + "x")
    assert sum(copies) < 10_000, (len(copies), sum(copies))


# --- 7. destructive commands that passed clean ---------------------------------------------

FIND_DELETES_ALL = [
    "find . ! -name keep -delete",
    "find . -not -name keep -delete",
    "find . -name keep -o -delete",
    "find . -name keep -or -delete",
    "find . -delete -name '*.o'",
    "find . -name '*.o' -o -exec rm {} +",
    "find . ! \\( -name a -o -name b \\) -delete",
    "find . -name a , -delete",
]


@pytest.mark.parametrize("command", FIND_DELETES_ALL)
def test_find_deletions_whose_test_is_negated_or_ored_are_destructive(command: str) -> None:
    assert analyze_command(command).destructive, command


FIND_BENIGN = [
    "find . -name '*.o' -delete",
    "find . -type f -name '*.pyc' -delete",
    "find . \\( -name '*.o' -o -name '*.a' \\) -delete",
    "find . -name '*.pyc' -exec rm {} +",
    "find . -type d -empty -delete",
    "find . -mmin -5 -type f -delete",
    "find . ! -name keep -print",
]


@pytest.mark.parametrize("command", FIND_BENIGN)
def test_find_deletions_narrowed_by_a_test_stay_clean(command: str) -> None:
    assert _clean(command), analyze_command(command)


KILL_ALL = ["kill -9 -1 1234", "kill -KILL 1234 -1", "kill -s KILL -1 5", "kill -9 -- -1 7"]
KILL_BENIGN = ["kill -1 1234", "kill -9 1234", "kill 1234 5678", "kill -TERM 1234", "kill -l"]


@pytest.mark.parametrize("command", KILL_ALL)
def test_kill_of_every_process_anywhere_in_the_targets_is_destructive(command: str) -> None:
    assert analyze_command(command).destructive, command


@pytest.mark.parametrize("command", KILL_BENIGN)
def test_kill_of_named_processes_stays_clean(command: str) -> None:
    assert _clean(command), analyze_command(command)


SOCKET_SHELLS = [
    "ncat --exec /bin/sh -l 4444",
    "ncat --sh-exec id -l 4444",
    "ncat --lua-exec x.lua -l 4444",
    "ncat --ex /bin/sh -l 4444",
    "nc -c sh -l 4444",
    "socat TCP-LISTEN:4444 EXEC:/bin/sh",
    "socat TCP-LISTEN:4444 SYSTEM:id",
]


@pytest.mark.parametrize("command", SOCKET_SHELLS)
def test_a_shell_on_a_socket_is_destructive(command: str) -> None:
    assert analyze_command(command).destructive, command


@pytest.mark.parametrize("command", ["nc -l 4444", "ncat -v 127.0.0.1 80",
                                     "socat - TCP:127.0.0.1:80"])
def test_plain_sockets_stay_clean(command: str) -> None:
    assert _clean(command), analyze_command(command)


DEVICES = [
    "dd if=/dev/zero of=/dev/block/8:0",
    "cp disk.img /dev/block/259:0",
    "dd if=/dev/zero of=/dev/char/1:1",
    "tee /dev/sg0",
    "dd if=x of=/dev/bsg/0:0:0:0",
    "dd if=x of=/dev/ram0",
    "dd if=x of=/dev/zram0",
    "dd if=x of=/dev/pmem0",
]


@pytest.mark.parametrize("command", DEVICES)
def test_writes_to_disks_by_any_device_name_are_destructive(command: str) -> None:
    assert analyze_command(command).destructive, command


@pytest.mark.parametrize("command", ["dd if=/dev/zero of=out.img bs=1M count=1",
                                     "cp /dev/null x", "cat /dev/fd/0",
                                     "dd if=/dev/block/8:0 of=disk.img"])
def test_device_reads_and_ordinary_files_stay_clean(command: str) -> None:
    assert _clean(command), analyze_command(command)
