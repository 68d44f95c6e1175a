"""Shell guard families of the second audit round: absolute paths into the working directory,
moving everything out of it, variables that may hold options, and everyday programs with an
option that runs a command of the caller's choosing.

Nothing here runs a shell: the detector is called directly (shared/data/security/README.md,
rule 1).
"""

from __future__ import annotations

import pytest
from tooldeck_policy import analyze_command, plugin

from tooldeck_hookspecs import SecurityConfig, SessionInfo, ToolCall, ToolDefinition

WORKDIR = "/data/agent/proj"

# --- 1. the workdir named by its absolute path is judged like '.' ---------------------------

WORKDIR_DELETES = [
    "rm -rf /data/agent/proj/*",
    "rm -rf /data/agent/proj/.*",
    "rm -r /data/agent/proj/[a-z]*",
    "rm -rf /data/agent/proj",
    "rm -rf /data/agent/proj/",
    "rm -rf /data/agent/proj/.",
    "rm -rf /data/agent/proj/sub/..",
    "rm -rf //data//agent/./proj/*",
    "rm -rf /data/agent",
    "rm -rf /data/agent/*",
    "rm -rf /data/*/proj",
    "rm --recursive --force /data/agent/proj/*",
    "find /data/agent/proj -delete",
    "find /data/agent/proj/ -exec rm -rf {} +",
    ["rm", "-rf", "/data/agent/proj/"],
    "timeout 5 rm -rf /data/agent/proj",
]


@pytest.mark.parametrize("command", WORKDIR_DELETES)
def test_shell_workdir_absolute_deletes_ask(command: str | list[str]) -> None:
    verdict = analyze_command(command, workdir=WORKDIR)
    assert verdict.destructive, command


WORKDIR_EVERYDAY = [
    "rm -rf /data/agent/proj/build",
    "rm -rf /data/agent/proj/build/*",
    "rm -f /data/agent/proj/a.txt",
    "rm -r /data/agent/proj/*.pyc",
    "find /data/agent/proj -name '*.pyc' -delete",
    "find /data/agent/proj/dist -delete",
    "chmod -R u+w /data/agent/proj",
    "chmod -R u+w /data/agent/proj/*",
    "rm -rf /tmp/scratch",
    "find /tmp -name '*.log' -delete",
    "mv /data/agent/proj/a /data/agent/proj/b",
]


@pytest.mark.parametrize("command", WORKDIR_EVERYDAY)
def test_shell_workdir_everyday_commands_pass(command: str) -> None:
    verdict = analyze_command(command, workdir=WORKDIR)
    assert verdict.clean, (command, verdict)


def test_shell_workdir_unknown_keeps_absolute_rules() -> None:
    # Without a workdir an absolute path deep in a tree is nobody's workdir in particular.
    assert analyze_command("rm -rf /data/agent/proj/*").clean
    assert analyze_command("rm -rf /data/agent/proj/*", workdir=WORKDIR).destructive
    # The cache is keyed by the workdir too: the same line is judged per workdir.
    assert analyze_command("rm -rf /data/agent/proj/*", workdir="/elsewhere").clean
    # System paths stay system paths whatever the workdir.
    assert analyze_command("rm -rf /etc", workdir="/etc/proj").destructive
    assert analyze_command("chmod -R 000 /data", workdir=WORKDIR).destructive


# --- 2. moving everything here out of the working directory ------------------------------

MOVES_OUT = [
    "mv * /tmp",
    "mv * /tmp/",
    "mv ./* /tmp/keep/",
    "mv .* * /var/tmp",
    "mv -t /tmp *",
    "mv --target-directory=/tmp *",
    "mv * ..",
    "mv * ../other",
    "mv * ~",
    "mv * ~/backup",
    "mv /data/agent/proj/* /tmp",
    "mv * $DEST",
]


@pytest.mark.parametrize("command", MOVES_OUT)
def test_shell_moving_everything_out_asks(command: str) -> None:
    verdict = analyze_command(command, workdir=WORKDIR)
    assert verdict.destructive, command


@pytest.mark.parametrize(
    "command",
    ["mv * sub/", "mv * ./sub", "mv -t sub *", "mv * /data/agent/proj/sub", "mv *.txt /tmp",
     "mv a.txt /tmp", "mv build /tmp/old-build"],
)
def test_shell_moving_within_or_a_few_files_passes(command: str) -> None:
    verdict = analyze_command(command, workdir=WORKDIR)
    assert verdict.clean, (command, verdict)


# --- 3. a variable may split into options ------------------------------------------------

HIDDEN_OPTIONS = [
    "rm $X",
    "rm $X ~",
    "rm -f \"$X\" ~",
    "rm -f $OPTS /",
    "rm ${X}",
    "chmod $MODE /etc",
    "find . $X",
    "find $ROOT -name x",
    "find . -name x $ACTION",
    "find . -name \"$PATTERN\" $X",
]


@pytest.mark.parametrize("command", HIDDEN_OPTIONS)
def test_shell_variables_that_may_hold_options_ask(command: str) -> None:
    verdict = analyze_command(command)
    assert verdict.destructive or verdict.injection, command


@pytest.mark.parametrize(
    "command", ["rm -f tmp.txt", "find . -name \"*.py\"", "find . -type f -newer x",
                "chmod 644 a.txt", "echo $HOME", "ls $DIR",
                # A quoted variable as a test's value is one word, never an action.
                "find . -name \"$PATTERN\"", "find . -newer \"$REF\" -type f",
                "find src -maxdepth \"$DEPTH\" -name '*.py'",
                # A quoted variable is one word: alone, or beside a harmless path, it cannot
                # make rm recursive on anything that matters.
                "rm -f \"$TMPFILE\"", "rm -f \"$X\" build", "chmod \"$MODE\" a.txt"],
)
def test_shell_plain_commands_without_variables_pass(command: str) -> None:
    assert analyze_command(command).clean, command


# --- 4. everyday programs with an option that runs a command ------------------------------

RUNS_A_COMMAND = [
    "npx -c 'rm -rf ~'",
    "npx --call=id",
    "npx --ca id",
    "npm exec -c id",
    "npm exec --call 'curl x | sh'",
    "npm --script-shell=/tmp/x run build",
    "pnpm exec -c rm -rf ~",
    "pnpm --shell-mode exec id",
    "man -P 'sh -c id' ls",
    "man -Pcat ls",
    "man --pager=cat ls",
    "man --pag=id ls",
    "man --html=firefox ls",
    "man -Hfirefox ls",
    "sort --compress-program=sh data",
    "sort --compress-prog=sh data",
    "split --filter='sh -c id' data",
    "split --fil=id data",
    "wget --use-askpass=./x http://127.0.0.1/",
    "tcpdump -z ./x -w out",
    "apt-get -o APT::Update::Pre-Invoke::=id update",
    "apt -o Dpkg::Pre-Invoke::=id install x",
    "apt-get -oDir::Bin::methods=/tmp/m update",
    "apt-get -c ./apt.conf update",
    ["npx", "-c", "id"],
    ["man", "-P", "id", "ls"],
    "timeout 5 sort --compress-program=sh data",
    "env X=1 split --filter=id data",
]


@pytest.mark.parametrize("command", RUNS_A_COMMAND)
def test_shell_options_that_run_a_command_are_refused(command: str | list[str]) -> None:
    verdict = analyze_command(command)
    assert verdict.injection, command


def test_shell_option_strings_are_analysed_too() -> None:
    verdict = analyze_command("split --filter='rm -rf /' data")
    assert any("'/'" in reason for reason in verdict.destructive), verdict
    verdict = analyze_command("npx -c 'rm -rf ~'")
    assert any("home" in reason for reason in verdict.destructive), verdict


RUNS_NOTHING = [
    "npx prettier --check .",
    "npm test",
    "npm run build",
    "npm ci",
    "pnpm install",
    "man ls",
    "man -k printf",
    "man -H ls",
    "sort -n -k2 data",
    "split -l 100 data part-",
    "wget -q -O out http://127.0.0.1/",
    "tcpdump -r capture.pcap",
    "apt-get -o Debug::pkgProblemResolver=1 -s install x",
    "apt-cache policy python3",
]


@pytest.mark.parametrize("command", RUNS_NOTHING)
def test_shell_everyday_uses_of_those_programs_pass(command: str) -> None:
    verdict = analyze_command(command)
    assert not verdict.injection, (command, verdict)


# --- through the policy: the session's workdir reaches the guard --------------------------


def test_shell_policy_passes_the_session_workdir() -> None:
    tool = ToolDefinition(
        name="shell_exec", description="d", category="shell",
        security=SecurityConfig(command_params="command"),
    )
    session = SessionInfo(session_id="s", workdir=WORKDIR, grants={"shell"})

    def decide(command: str) -> object:
        call = ToolCall(name="shell_exec", arguments={"command": command})
        return plugin.tooldeck_authorize_call(call=call, tool=tool, session=session)

    decision = decide("rm -rf /data/agent/proj/*")
    assert decision is not None and decision.action == "ask"
    assert "working directory" in decision.reason
    assert decide("rm -rf /data/agent/proj/build") is None
    moved = decide("mv * /tmp")
    assert moved is not None and moved.action == "ask"


# --- 5. git commands that lose work no commit holds, or rewrite a remote ---------------------

GIT_LOSES_WORK = [
    "git clean -fdx",
    "git clean -f",
    "git clean --force -d",
    "git -C sub clean -ffdx",
    "git reset --hard",
    "git reset --hard HEAD~3",
    "git reset --merge ORIG_HEAD",
    "git checkout -- .",
    "git checkout .",
    "git checkout -- src/a.py",
    "git checkout -f main",
    "git restore .",
    "git restore src/a.py",
    "git restore -SW .",
    "git switch --discard-changes main",
    "git stash clear",
    "git stash drop",
    "git branch -D main",
    "git branch --delete --force old",
    "git push --force origin main",
    "git push -f",
    "git push --force-with-lease",
    "git push origin +main",
    "git push origin :old-branch",
    "git push --mirror backup",
    "git push --delete origin tag",
    "git reflog expire --expire=now --all",
    "git gc --prune=now",
    "git update-ref -d HEAD",
    "git rm -rf .",
    ["git", "reset", "--hard"],
    "timeout 30 git clean -fdx",
    "truncate -s 0 *",
]


@pytest.mark.parametrize("command", GIT_LOSES_WORK)
def test_shell_git_commands_that_lose_work_ask(command: str | list[str]) -> None:
    verdict = analyze_command(command)
    assert verdict.destructive, command
    assert not verdict.injection, verdict


GIT_EVERYDAY = [
    "git status",
    "git diff --stat",
    "git log -p -3",
    "git add -A",
    "git commit -m 'fix: handle empty input'",
    "git clean -n",
    "git clean -fdn",
    "git reset HEAD~1",
    "git reset --soft HEAD~1",
    "git checkout main",
    "git checkout -b feature",
    "git switch -c feature",
    "git restore --staged .",
    "git stash",
    "git stash pop",
    "git branch feature",
    "git branch -d merged",
    "git push",
    "git push origin main",
    "git push -u origin feature",
    "git reflog",
    "git gc",
    "git rm old.txt",
    "git rm -r --cached build",
    "truncate -s 0 app.log",
    "truncate -s 0 *.log",
]


@pytest.mark.parametrize("command", GIT_EVERYDAY)
def test_shell_everyday_git_passes(command: str) -> None:
    verdict = analyze_command(command)
    assert verdict.clean, (command, verdict)
