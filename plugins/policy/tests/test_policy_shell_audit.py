"""Shell guard bypasses found by an audit, by mechanism, with variants of our own.

Nothing here runs a shell: the detector is called directly (shared/data/security/README.md,
rule 1).
"""

from __future__ import annotations

import pytest
from tooldeck_policy import analyze_command
from tooldeck_policy._shell import _CODE_PREFIXES, _CODE_VARIABLES, code_bearing_env_name

# --- 1. unquoted $IFS splits the word it is in: refuse like ${IFS} -------------------------

IFS_SPLITS = [
    "timeout 5$IFS\"sh\" -c 'a; b'",
    "env X=1$IFS\"sh\" -c 'a; b'",
    "nice -n1$IFS\"sh\" -c 'a && b'",
    "git -c$IFS\"core.fsmonitor=touch x\" status",
    "rm -rf$IFS../*",
    "rm -r$IFS-f$IFS/",
    "ls$IFS-la",
    "echo a$IFS;b",
    "ls \"x\"$IFS",
    "rm -rf ${IFS}/",
    "rm -rf ${IFS:0:1}/",
    "rm -rf ${IFS%?}/",
]


@pytest.mark.parametrize("command", IFS_SPLITS)
def test_policy_shell_audit_unquoted_ifs_is_refused(command: str) -> None:
    assert analyze_command(command).injection, command


@pytest.mark.parametrize("command", ['echo "$IFS"', 'printf %s "a${HOME}b"', 'echo "x$IFS y"'])
def test_policy_shell_audit_quoted_ifs_is_not_a_split(command: str) -> None:
    verdict = analyze_command(command)
    assert not any("$IFS" in reason for reason in verdict.injection), verdict


# --- 2. a script or program file that is standard input ------------------------------------

STDIN_PATHS = ["/dev/stdin", "/dev/fd/0", "/proc/self/fd/0", "/proc/123/fd/0",
               "/proc/thread-self/fd/0", "/proc/self/task/1/fd/0", "/dev//stdin",
               "/dev/./fd/3", "/usr/../dev/stdin", "/dev/tty", "-"]


@pytest.mark.parametrize("shell", ["sh", "bash", "dash", "zsh"])
@pytest.mark.parametrize("path", STDIN_PATHS)
def test_policy_shell_audit_shell_script_from_stdin_is_refused(shell: str, path: str) -> None:
    assert analyze_command([shell, path]).injection, (shell, path)
    assert analyze_command([shell, "-e", path]).injection, (shell, path)
    assert analyze_command(["timeout", "5", shell, path]).injection, (shell, path)
    assert analyze_command(["env", shell, path]).injection, (shell, path)


INTERPRETERS_FROM_STDIN = [
    ["python3", "/dev/stdin"],
    ["python3", "/proc/self/fd/0"],
    ["python3.12", "-u", "/dev/fd/0"],
    ["perl", "/dev/fd/0"],
    ["perl", "-w", "/proc/self/fd/0"],
    ["node", "/dev/stdin"],
    ["ruby", "/dev/stdin"],
    ["awk", "-f", "/dev/stdin"],
    ["gawk", "--file=/dev/fd/0"],
    ["awk", "-f", "-"],
    ["mawk", "-W", "exec", "/dev/stdin"],
    ["make", "-f", "/dev/stdin"],
    ["make", "--file=/dev/stdin"],
    ["make", "-f-"],
    ["cmake", "-P", "/dev/stdin"],
]


@pytest.mark.parametrize("argv", INTERPRETERS_FROM_STDIN)
def test_policy_shell_audit_interpreter_program_from_stdin_asks(argv: list[str]) -> None:
    verdict = analyze_command(argv)
    assert verdict.destructive or verdict.injection, argv
    assert analyze_command(" ".join(argv)).destructive or analyze_command(" ".join(argv)).injection


@pytest.mark.parametrize("argv", [["sed", "-f", "/dev/stdin", "f"], ["sed", "-f-", "f"]])
def test_policy_shell_audit_sed_script_from_stdin_is_refused(argv: list[str]) -> None:
    assert analyze_command(argv).injection, argv


EVERYDAY_SCRIPTS = [
    ["sh", "script.sh"],
    ["bash", "-e", "scripts/build.sh", "--fast"],
    ["python3", "script.py"],
    ["python3", "-m", "pytest", "-q"],
    ["perl", "tools/fix.pl", "/dev/stdin"],
    ["awk", "-f", "prog.awk", "data.txt"],
    ["sed", "-f", "edits.sed", "file.txt"],
    ["make", "-f", "Makefile.ci", "test"],
    ["node", "dist/index.js"],
    ["cmake", "-P", "cmake/script.cmake"],
]


@pytest.mark.parametrize("argv", EVERYDAY_SCRIPTS)
def test_policy_shell_audit_script_files_still_pass(argv: list[str]) -> None:
    assert analyze_command(argv).clean, (argv, analyze_command(argv))


# --- 3. environment names that decide which code runs -------------------------------------

@pytest.mark.parametrize("name", sorted(_CODE_VARIABLES))
def test_policy_shell_audit_code_bearing_env_names(name: str) -> None:
    assert code_bearing_env_name(name)
    assert analyze_command(f"{name}=x git status").injection


@pytest.mark.parametrize(
    "name",
    ["GIT_CONFIG_KEY_0", "GIT_CONFIG_VALUE_0", "LD_PRELOAD", "BASH_FUNC_x%%", "SUDO_ASKPASS",
     "MY_ASKPASS", "npm_config_script_shell", "NPM_CONFIG_NODE_OPTIONS", "GIT_PAGER",
     "GIT_EXTERNAL_DIFF", "RSYNC_RSH", "PERL5DB", "PYTHONBREAKPOINT", "MANOPT", "LESSKEYIN"],
)
def test_policy_shell_audit_more_code_bearing_env_names(name: str) -> None:
    assert code_bearing_env_name(name)


# HOME is not plain: it chooses ~/.gitconfig and ~/.config (test_audit_s39_env_config.py).
@pytest.mark.parametrize("name", ["LANG", "CI", "RUST_LOG", "GIT_AUTHOR_NAME", "TZ",
                                  "PYTHONUNBUFFERED", "NO_COLOR", "TERM", "CARGO_TARGET_DIR"])
def test_policy_shell_audit_plain_env_names(name: str) -> None:
    assert not code_bearing_env_name(name)


def test_policy_shell_audit_prefix_table() -> None:
    assert {"GIT_CONFIG_KEY_", "GIT_CONFIG_VALUE_", "LD_"} <= set(_CODE_PREFIXES)


@pytest.mark.parametrize("command", ["MAKEFLAGS=-j8 make", "make MAKEFLAGS=-j4 all",
                                     "MAKEFLAGS='-k -j 4' make test"])
def test_policy_shell_audit_plain_makeflags_pass(command: str) -> None:
    assert not analyze_command(command).injection, command


@pytest.mark.parametrize("command", ["MAKEFLAGS=--eval=x make", "make MAKEFLAGS='-E $(x)'"])
def test_policy_shell_audit_makeflags_with_code_refused(command: str) -> None:
    assert analyze_command(command).injection, command


# --- 4. long option abbreviations, broad globs, find tests that do not narrow ----------------

RM_ABBREVIATED = [
    "rm --r -f ../*", "rm --re -f /", "rm --rec /", "rm --recursiv -f /", "rm --recursive -f /",
    "rm -f --recu ~", "rm --no-preserve -rf /", "xargs rm --rec",
]


@pytest.mark.parametrize("command", RM_ABBREVIATED)
def test_policy_shell_audit_rm_long_option_prefixes(command: str) -> None:
    assert analyze_command(command).destructive, command


def test_policy_shell_audit_rm_no_preserve_root_prefix_is_named() -> None:
    reasons = analyze_command("rm --no-pres -rf /tmp/x").destructive
    assert any("no-preserve-root" in reason for reason in reasons), reasons


@pytest.mark.parametrize("command", ["chmod --rec 777 /", "chown --recurs u /usr",
                                     "rsync -a --del empty/ ../", "rsync -a --delete-e e/ /"])
def test_policy_shell_audit_other_long_option_prefixes(command: str) -> None:
    assert analyze_command(command).destructive, command


TAR_PROGRAMS = [
    "tar -xIid -f x.tar", "tar -cvIid -f x.tar .", "tar -cf x.tar -Iid .", "tar cIf id x.tar .",
    "tar -I id -xf x", "tar -xF id -f x", "tar --use-compress=id -cf x.tar .",
    "tar --use=id -cf x.tar .", "tar --to-c=id -xf x.tar", "tar --to-command id -xf x",
    "tar --checkpoint=1 --checkpoint-act=exec=id -cf x.tar .", "tar --info-scr=id -xf x",
    "tar --new-vol=id -xf x", "zip -TTid x.zip f", "zip x.zip f -T --unz=id",
]


@pytest.mark.parametrize("command", TAR_PROGRAMS)
def test_policy_shell_audit_tar_program_options(command: str) -> None:
    assert analyze_command(command).injection, command


@pytest.mark.parametrize("command", ["tar -xzf x.tar.gz", "tar -cf x.tar -C dir .",
                                     "tar xvf x.tar", "tar --checkpoint=100 -cf x.tar .",
                                     "tar -tf x.tar", "tar --exclude=.git -czf out.tgz src",
                                     "zip -r out.zip src", "tar -cf out.tar -T list.txt"])
def test_policy_shell_audit_everyday_tar_passes(command: str) -> None:
    assert analyze_command(command).clean, (command, analyze_command(command))


BROAD_GLOBS = ["rm -rf [!.]*", "rm -rf [a-zA-Z0-9]*", "rm -rf ?", "rm -rf *[!.]",
               "rm -rf .[!.]*", "rm -rf [^.]*", "rm -rf ./*", "rm -r ?*", "rm -rf ./[a-z]*"]


@pytest.mark.parametrize("command", BROAD_GLOBS)
def test_policy_shell_audit_broad_globs_count_as_everything(command: str) -> None:
    assert analyze_command(command).destructive, command


@pytest.mark.parametrize("command", ["rm -r build/", "rm -rf [abc]", "rm -rf *.o",
                                     "rm -rf dist/*", "rm -r test_[0-9]*", "rm file.txt"])
def test_policy_shell_audit_narrow_globs_pass(command: str) -> None:
    assert analyze_command(command).clean, (command, analyze_command(command))


FIND_NOT_NARROWING = [
    "find . -regex '.*' -delete", "find . -iregex '.*' -delete", "find . -name '?*' -delete",
    "find . -name '[!.]*' -delete", "find . -path './*' -delete",
    "find . -size -99999999k -delete", "find . -mmin -99999999 -delete",
    "find . -mtime +1 -delete", "find . -user me -delete",
    "find . -regex './.*' -exec rm -rf {} +",
]


@pytest.mark.parametrize("command", FIND_NOT_NARROWING)
def test_policy_shell_audit_find_tests_that_do_not_narrow(command: str) -> None:
    assert analyze_command(command).destructive, command


@pytest.mark.parametrize("command", [
    "find . -name '*.pyc' -delete", "find . -regex '.*\\.o' -delete", "find . -mmin -5 -delete",
    "find . -size +100M -delete", "find . -empty -delete", "find . -size -1k -delete",
    "find build -type f -delete", "find . -name __pycache__ -exec rm -rf {} +",
])
def test_policy_shell_audit_find_narrow_tests_pass(command: str) -> None:
    assert not analyze_command(command).destructive, (command, analyze_command(command))


# --- 5. sed, awk, perl, python, node spellings ----------------------------------------------

SED_EXEC = ["sed 'sQhiQtouch xQe' f", "sed 's x y e' f", "sed 'sAxAidAe' f",
            "sed -e 'sQxQidQe' f", "sed '1,3sQxQidQe' f", "sed '/a/sQxQidQge' f",
            "sed -n '$!{sQxQidQe}' f", "sed 'a\\\ntext\ne' f"]


@pytest.mark.parametrize("command", SED_EXEC)
def test_policy_shell_audit_sed_exec_any_delimiter(command: str) -> None:
    assert analyze_command(command).injection, command


@pytest.mark.parametrize("command", ["sed 's/a/b/g' f", "sed -n '1,5p' f", "sed -i 's|x|y|' f",
                                     "sed '/^#/d' f", "sed 'y/abc/xyz/' f",
                                     "sed -e 's/e/E/g' -e '$a end' f", "sed '1i header' f",
                                     "sed 's/x/y/w out.txt' f", "sed 'sQxQyQg' f"])
def test_policy_shell_audit_everyday_sed_passes(command: str) -> None:
    assert analyze_command(command).clean, (command, analyze_command(command))


INTERPRETER_SPAWNS = [
    "awk 'BEGIN{x=\"sh\";y=\"id\";print y|x}'",
    "awk 'BEGIN{x=\"sh\";y=\"id\";print y |x}'",
    "awk -v x=sh 'BEGIN{print ENVIRON[\"X\"] | x}'",
    "gawk 'BEGIN{print \"id\" |& cmd}'",
    "awk --assign x=1 'BEGIN{system(\"id\")}'",
    "gawk -i inplace 'BEGIN{system(\"id\")}' f",
    "perl -i -e 'system(\"id\")' f",
    "perl -i -pe 'system(\"id\")' f",
    "perl -x -e 'system(\"id\")'",
    "perl -C -e 'system(\"id\")'",
    "perl -l -0 -e 'system(\"id\")'",
    "perl -e '$s=\"sys\".\"tem\"; &{\"CORE::GLOBAL::$s\"}'",
    "ruby -x -e 'system(\"id\")'",
    "python3 --check-hash-based-pycs always -c 'import os;os.system(\"id\")'",
    "python3 -c 'import os;os.posix_spawn(\"/bin/sh\",[\"sh\",\"-c\",\"id\"],{})'",
    "python3 -c 'import os;os.posix_spawnp(\"sh\",[\"sh\"],{})'",
    "python3 -c 'import os;vars(os)[\"sys\"+\"tem\"](\"id\")'",
    "python3 -c 'import os;os.__dict__[\"sys\"+\"tem\"](\"id\")'",
    "node --title x -e 'require(\"child_process\").execSync(\"id\")'",
    "node -e 'module.constructor._load(\"child_\"+\"process\").execSync(\"id\")'",
]


@pytest.mark.parametrize("command", INTERPRETER_SPAWNS)
def test_policy_shell_audit_interpreter_spawns_ask(command: str) -> None:
    verdict = analyze_command(command)
    assert verdict.destructive or verdict.injection, command


@pytest.mark.parametrize("command", [
    "awk '{print $1}' f", "awk -F, '{print $2 > \"out.csv\"}' f", "awk '/a|b/{n++} END{print n}' f",
    "awk '{ if (a || b) print $0 }' f", "perl -pi -e 's/a/b/' f", "perl -ne 'print if /x/' f",
    "perl -le 'print 1'", "python3 -c 'print(1)'", "python3 -W ignore script.py",
    "git commit -m 'msg'", "ls -la", "grep -rn foo .", "python3 script.py", "rm file.txt",
    "rm -r build/", "make -j8 test", "node --title svc server.js",
])
def test_policy_shell_audit_everyday_commands_pass(command: str) -> None:
    assert analyze_command(command).clean, (command, analyze_command(command))


# --- git: config keys through options with values, hooks, templates --------------------------

@pytest.mark.parametrize("command", [
    ["git", "config", "--file", ".git/config", "core.fsmonitor", "touch x"],
    ["git", "config", "-f", ".git/config", "core.fsmonitor", "touch x"],
    ["git", "config", "--type", "string", "core.fsmonitor", "touch x"],
    "git -c gpg.ssh.defaultKeyCommand=id commit -S -m x",
    "git -c hook.x.command=id -c hook.x.event=pre-commit commit -m x",
    "git init --template=t x",
    "git clone --templ=t src dst",
])
def test_policy_shell_audit_git_code_config(command: str | list[str]) -> None:
    assert analyze_command(command).injection, command


@pytest.mark.parametrize("command", [["git", "config", "--file", "x.cfg", "user.name", "me"],
                                     "git config --get user.email", "git init"])
def test_policy_shell_audit_git_everyday_config_passes(command: str | list[str]) -> None:
    assert analyze_command(command).clean, (command, analyze_command(command))
