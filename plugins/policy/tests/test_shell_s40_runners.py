"""Audit s40 of the shell guard: programs that run another program, a string or code.

Every command below was plain (no confirmation, not refused) before this round:

1. Wrappers the guard did not know, or misread: ``runcon``, ``perf stat|record|trace -- CMD``,
   ``setarch``, ``bwrap``, ``chpst``/``setuidgid``/``softlimit``/``envdir``, ``proot``,
   ``schroot``, ``sshpass``, ``entr -s``, ``nq``, ``tsp``, ``daemonize``, ``run-one``,
   ``heaptrack``, ``kcov``, ``memusage``, ``systemd-cat``, ``flatpak-spawn --host``,
   ``ip netns exec``, ``py-spy record --``, ``rr record``, ``R CMD``, ``start-stop-daemon
   --exec``, qemu's user-mode emulators; ``unbuffer -p`` took the program for -p's value.
2. Wrappers that start a shell reading standard input (the tool's ``stdin``, written by the
   model): ``sudo -s``/``-i``, ``doas -s``, ``systemd-run -S``, and ``chroot DIR``,
   ``unshare``, ``nsenter``, ``firejail``, ``setarch`` with no command.
3. node's package managers running a program named on the line: ``npx CMD``, ``npm exec``,
   ``pnpm exec|dlx``, ``pnpm CMD``, ``yarn dlx``, ``yarn node``, ``bunx``, ``bun x``; shell
   strings: ``npm explore -- CMD``, ``yarn exec``, ``bun exec``; inline code: ``bun -e``,
   ``deno eval``. package.json scripts (``npm test``, ``npm run build``) stay plain: they are
   the project's own code, like a Makefile.
4. Sessions and loops that run shell strings: ``tmux``, ``screen``, ``dtach``, ``hyperfine``,
   ``watchexec``, ``nodemon --exec``.
5. Interpreters: ``R -e``, ``julia -e``, ``expect -c``, ``octave --eval``, ``ipython -c '!id'``,
   ``gnuplot -e``, ``dc -e '!id'``, ``emacs --eval``, PowerShell ``-Command``; prompts that read
   code from stdin: ``python -i``, ``python -m code|pdb``, ``perl -d``, ``lua -i``, ``m4``,
   ``gdb`` without ``-batch``; ``python -m timeit STMT`` is inline code.
6. Database clients: ``psql -c '\\! id'``, ``psql -o '|id'``, ``mysql -e 'system id'``,
   ``mysql --pager``, and both reading commands from stdin.

Nothing here is run: the analyser is called directly, on shell lines and on argv lists.
"""

from __future__ import annotations

import shlex

import pytest
from tooldeck_policy._shell import analyze_command, code_bearing_env_name


def _spellings(line: str) -> list[str | list[str]]:
    """The line as a shell line and as an argv list."""
    return [line, shlex.split(line)]


def _asks(command: str | list[str]) -> bool:
    verdict = analyze_command(command)
    return bool(verdict.injection or verdict.destructive)


def _home_deletion(command: str | list[str]) -> bool:
    return any("home" in reason for reason in analyze_command(command).destructive)


# --- 1. wrappers -------------------------------------------------------------------------

WRAPPERS = [
    "runcon -t unconfined_t", "runcon system_u:system_r:unconfined_t:s0", "/usr/bin/runcon -u u",
    "perf stat", "perf stat -e cycles --", "perf stat -x ,", "perf stat -r 5 -e cycles",
    "perf record -g --", "/usr/bin/perf record -o perf.data", "perf trace", "perf ftrace -T f",
    "perf mem record", "perf kvm stat", "perf script syscall-counts",
    "setarch x86_64", "setarch x86_64 -R --", "linux64", "/usr/bin/linux32 --uname-2.6",
    "bwrap --bind / / --dev /dev", "bwrap --ro-bind / / --", "chpst -u nobody", "setuidgid nobody",
    "softlimit -m 1000000", "fakechroot", "proot -0", "proot -r / -b /dev", "schroot -c x --",
    "sshpass -p pw", "sshpass -e", "nq", "tsp", "daemonize", "daemonize -c /tmp",
    "run-one", "run-this-one", "heaptrack", "heaptrack -o out", "kcov out",
    "kcov --include-path=. out", "memusage", "memusage -p a.png", "systemd-cat -t x",
    "dbus-launch", "prime-run", "flatpak-spawn --host", "flatpak-spawn --host --env=A=1",
    "ip netns exec ns", "ip vrf exec red", "ip -all netns exec", "py-spy record --",
    "py-spy record -o out.svg --", "rr record", "R CMD", "unbuffer -p", "unbuffer",
    "qemu-x86_64", "qemu-aarch64-static -L /usr/aarch64-linux-gnu",
]


@pytest.mark.parametrize("wrapper", WRAPPERS)
def test_s40_wrapped_deletion_asks(wrapper: str) -> None:
    for command in _spellings(f"{wrapper} rm -rf ~"):
        assert _home_deletion(command), command
    assert _home_deletion(f"{wrapper} /bin/rm -rf ~")


@pytest.mark.parametrize("wrapper", WRAPPERS)
def test_s40_wrapped_shell_refused(wrapper: str) -> None:
    for line in (f"{wrapper} sh", f"{wrapper} bash -c 'id; id'", f"{wrapper} /bin/sh -c id"):
        for command in _spellings(line):
            assert analyze_command(command).injection, command


@pytest.mark.parametrize("wrapper", [w for w in WRAPPERS if w not in ("R CMD",)])
def test_s40_wrapped_plain_command_passes(wrapper: str) -> None:
    for command in _spellings(f"{wrapper} ls -la"):
        assert not _asks(command), command


@pytest.mark.parametrize("command", [
    "envdir ./env ls", "chpst -e ./env ls", "bwrap --setenv LD_PRELOAD ./x.so --bind / / ls",
    "bwrap --args 3 ls", "daemonize -E LD_PRELOAD=./x.so /bin/ls", "qemu-x86_64 -E LD_PRELOAD=x ls",
    "flatpak-spawn --host --env=LD_PRELOAD=./x.so ls", "entr -s 'rm -rf ~'",
    "perf stat --pre 'rm -rf ~' ls", "perf stat --post=id ls",
])
def test_s40_wrapper_environment_and_strings_refused(command: str) -> None:
    for spelled in _spellings(command):
        assert analyze_command(spelled).injection, spelled


@pytest.mark.parametrize("command", [
    "start-stop-daemon --start --exec /bin/rm -- -rf ~",
    "start-stop-daemon -S -x /bin/rm -- -rf ~",
    "start-stop-daemon --start --startas /bin/rm --exec /bin/true -- -rf ~",
])
def test_s40_start_stop_daemon_program_checked(command: str) -> None:
    for spelled in _spellings(command):
        assert _home_deletion(spelled), spelled


@pytest.mark.parametrize("command", ["perf report", "perf list", "perf script",
                                     "perf script -s x.py", "perf record -g ./bench",
                                     "ip addr", "ip netns list", "R CMD BATCH x.R",
                                     "start-stop-daemon --status --pidfile x.pid",
                                     "py-spy dump --pid 1", "setarch --list"])
def test_s40_runner_everyday_uses_pass(command: str) -> None:
    for spelled in _spellings(command):
        assert not _asks(spelled), spelled


def test_s40_perf_script_from_stdin_asks() -> None:
    assert analyze_command("perf script -s /dev/stdin").destructive
    assert analyze_command(["perf", "script", "-s", "-"]).destructive


# --- 2. shells reading standard input ----------------------------------------------------

@pytest.mark.parametrize("command", [
    "sudo -s", "sudo -i", "sudo --shell", "sudo --login", "sudo -u root -s", "/usr/bin/sudo -i",
    "doas -s", "doas -u root -s", "systemd-run -S", "systemd-run --shell", "chroot /",
    "chroot --userspec=x /srv", "unshare -r", "unshare --mount --", "nsenter -t 1 -a",
    "firejail", "setarch x86_64", "linux64", "proot -0", "schroot -c x",
])
def test_s40_shell_reading_stdin_refused(command: str) -> None:
    for spelled in _spellings(command):
        assert analyze_command(spelled).injection, spelled


@pytest.mark.parametrize("wrapper", ["sudo -s", "sudo -i", "chroot /srv", "unshare -r",
                                     "sudo", "sudo -u www", "doas", "setarch x86_64"])
def test_s40_shell_wrappers_with_a_command_judged_by_it(wrapper: str) -> None:
    for spelled in _spellings(f"{wrapper} ls -la"):
        assert not _asks(spelled), spelled
    for spelled in _spellings(f"{wrapper} rm -rf ~"):
        assert _home_deletion(spelled), spelled


# --- 3. node's package managers ----------------------------------------------------------

NODE_RUNNERS = ["npx", "npx -y", "npx --package=x --", "npx -p x", "/usr/bin/npx --",
                "npm exec --", "npm x --", "npm --loglevel silent exec --", "npm exec -y --",
                "pnpm exec", "pnpm -r exec", "pnpm --filter web exec", "pnpm dlx", "pnpx",
                "yarn dlx", "bunx", "bun x", "/usr/local/bin/bunx --bun"]


@pytest.mark.parametrize("runner", NODE_RUNNERS)
def test_s40_node_runner_command_checked(runner: str) -> None:
    for spelled in _spellings(f"{runner} rm -rf ~"):
        assert _home_deletion(spelled), spelled
    for spelled in _spellings(f"{runner} sh -c id"):
        assert analyze_command(spelled).injection, spelled
    for spelled in _spellings(f"{runner} node -e 'require(\"child_process\").execSync(\"id\")'"):
        assert analyze_command(spelled).destructive, spelled


@pytest.mark.parametrize("runner", NODE_RUNNERS)
def test_s40_node_runner_tool_passes(runner: str) -> None:
    for spelled in _spellings(f"{runner} tsc --noEmit"):
        assert not _asks(spelled), spelled


@pytest.mark.parametrize("command", [
    "npx", "npm exec", "npm x --", "npx -y --", "npm explore lodash", "pnpm sh",
    "pnpm bash -c id", "npm explore lodash -- rm -rf ~", "npm explore lodash -- ls",
    "yarn exec 'rm -rf ~'", "yarn exec ls", "bun exec 'rm -rf ~'",
])
def test_s40_node_shells_and_strings_refused(command: str) -> None:
    for spelled in _spellings(command):
        assert analyze_command(spelled).injection, spelled


@pytest.mark.parametrize("command", [
    "pnpm node -e 'require(\"child_process\").execSync(\"id\")'",
    "yarn node -e 'require(\"child_process\").execSync(\"id\")'",
    "bun -e 'require(\"child_process\").execSync(\"id\")'",
    "bun --eval 'Bun.spawn([\"id\"])'", "deno eval 'new Deno.Command(\"id\").spawn()'",
    "deno eval -p 'Deno.run({cmd: [\"id\"]})'", "deno repl", "deno run -", "bun repl",
])
def test_s40_node_code_asks(command: str) -> None:
    for spelled in _spellings(command):
        verdict = analyze_command(spelled)
        assert verdict.destructive or verdict.injection, spelled


@pytest.mark.parametrize("command", [
    "npm --version", "npm test", "npm run build", "npm run-script lint -- --fix", "npm ci",
    "npm install", "npm --prefix web run build", "npm start", "pnpm install", "pnpm build",
    "pnpm run build", "pnpm test", "pnpm -r build", "yarn", "yarn build", "yarn run test",
    "yarn install --frozen-lockfile", "bun install", "bun test", "bun run build",
    "deno run main.ts", "deno task dev", "deno eval 'console.log(1)'", "npx --version",
])
def test_s40_node_everyday_uses_pass(command: str) -> None:
    for spelled in _spellings(command):
        assert not _asks(spelled), spelled


# --- 4. sessions and loops -----------------------------------------------------------------

@pytest.mark.parametrize("command", [
    "tmux new-session -d 'rm -rf ~'", "tmux new -d id", "tmux", "tmux -f ./x.conf ls",
    "tmux -c id", "tmux ls ';' run-shell id", "tmux send-keys -t 0 id Enter",
    "screen -dm id", "screen -dmS x sh -c id", "screen", "dtach -n sock id", "abduco -n s id",
    "hyperfine 'rm -rf ~'", "hyperfine ls", "watchexec -- id", "nodemon --exec 'rm -rf ~'",
    "nodemon -x id",
])
def test_s40_sessions_refused(command: str) -> None:
    for spelled in _spellings(command):
        assert analyze_command(spelled).injection, spelled


@pytest.mark.parametrize("command", ["tmux ls", "tmux list-sessions", "tmux -V",
                                     "tmux kill-server", "tmux capture-pane -p -t 0",
                                     "screen -ls", "nodemon app.js"])
def test_s40_session_listing_passes(command: str) -> None:
    for spelled in _spellings(command):
        assert not _asks(spelled), spelled


# --- 5. interpreters -----------------------------------------------------------------------

@pytest.mark.parametrize("command", [
    "R -e 'system(\"id\")'", "R --vanilla -e 'system(\"id\")'", "/usr/bin/R -e 'system(\"id\")'",
    "julia -e 'run(`id`)'", "julia --eval 'run(`id`)'", "expect -c 'spawn id'",
    "expect -c 'exec id'", "octave --eval 'system(\"id\")'", "ipython -c '!id'",
    "ipython -c 'x = !id'", "ipython -c '%system id'", "gnuplot -e 'system(\"id\")'",
    "gnuplot -e '!id'", "gnuplot -e \"plot '< id'\"", "dc -e '!id'", "dc --expression='!id'",
    "emacs --batch --eval '(shell-command \"id\")'", "emacs -batch -eval '(call-process \"id\")'",
    "emacs --eval='(funcall (intern \"shell-command\") \"id\")'",
    "python -m timeit '__import__(\"os\").system(\"id\")'",
    "python3 -m timeit -s 'import os; os.system(\"id\")' pass",
])
def test_s40_inline_code_asks(command: str) -> None:
    for spelled in _spellings(command):
        assert analyze_command(spelled).destructive, spelled


@pytest.mark.parametrize("command", [
    "python -i x.py", "python3 -i", "/usr/bin/python3.12 -i x.py", "python -m code",
    "python3 -m pdb x.py", "python -m asyncio", "perl -d x.pl", "lua -i x.lua", "R",
    "julia", "julia -L x.jl", "expect", "octave", "m4", "m4 -DX=1", "m4 -", "irb", "dc",
    "ipython", "gdb ./a.out", "gdb --args rm -rf ~", "gdb -p 1", "lldb ./a.out",
    "psql", "psql -d db", "psql -f -", "mysql", "mysql -u root db", "mariadb",
])
def test_s40_prompt_reading_stdin_asks(command: str) -> None:
    for spelled in _spellings(command):
        assert analyze_command(spelled).destructive, spelled


@pytest.mark.parametrize("command", [
    "pwsh -c id", "pwsh -Command 'Remove-Item -Recurse ~'", "pwsh -NoProfile -com id",
    "pwsh -EncodedCommand aQBkAA==", "pwsh -ec aQBkAA==", "pwsh", "pwsh -Command -",
    "powershell id", "powershell.exe -NoProfile -c id", "/opt/microsoft/powershell/7/pwsh -c id",
])
def test_s40_powershell_refused(command: str) -> None:
    for spelled in _spellings(command):
        assert analyze_command(spelled).injection, spelled


@pytest.mark.parametrize("command", [
    "python x.py", "python -m pytest -q", "python -m http.server", "python --version",
    "python -m timeit 'sum(range(10))'", "R -f x.R", "R --version", "Rscript x.R", "julia x.jl",
    "expect -f x.exp", "octave x.m", "m4 x.m4", "dc -e '2 3 + p'", "dc x.dc", "gnuplot plot.gp",
    "emacs --batch -l x.el", "emacs --batch --eval '(message \"hi\")'", "pwsh x.ps1",
    "pwsh -File x.ps1", "pwsh -NoProfile -File x.ps1", "ipython x.py", "ipython -c 'print(1)'",
    "gdb --version", "perl x.pl", "lua x.lua", "node --version",
])
def test_s40_interpreter_everyday_uses_pass(command: str) -> None:
    for spelled in _spellings(command):
        assert not _asks(spelled), spelled


# --- 6. database clients ---------------------------------------------------------------------

@pytest.mark.parametrize("command", [
    "psql -c '\\! id'", "psql -c '\\! rm -rf ~'", "psql -d db -c '\\o |id'",
    "psql --command='\\copy t to program '\"'\"'id'\"'\"''", "psql -c '\\setenv X 1'",
    "psql -o '|id' -c 'select 1'", "psql --output='|id' -c 'select 1'",
    "mysql -e 'system id'", "mysql -e '\\! id'", "mysql --execute='select 1; system id'",
    "mysql -e 'select 1 \\! id'", "mysql --pager=id -e 'select 1'",
    "mysql --plugin-dir=./p --default-auth=x -e 'select 1'", "mariadb --defaults-file=./x.cnf",
])
def test_s40_database_shell_commands_refused(command: str) -> None:
    for spelled in _spellings(command):
        assert analyze_command(spelled).injection, spelled


def test_s40_copy_program_asks() -> None:
    assert analyze_command("psql -c \"COPY t TO PROGRAM 'id'\"").destructive


@pytest.mark.parametrize("command", ["psql -c 'select 1'", "psql -l", "psql -c '\\dt'",
                                     "psql -c '\\d+ users'", "psql -f schema.sql",
                                     "psql -d db -f x.sql", "mysql -e 'select 1'",
                                     "mysql --version", "mysql -u root -e 'show tables' db"])
def test_s40_database_everyday_uses_pass(command: str) -> None:
    for spelled in _spellings(command):
        assert not _asks(spelled), spelled


@pytest.mark.parametrize("name", ["QEMU_SET_ENV", "QEMU_LD_PREFIX", "PSQL_PAGER", "PSQL_EDITOR"])
def test_s40_new_code_variables(name: str) -> None:
    assert code_bearing_env_name(name)
    assert analyze_command(f"{name}=x psql -c 'select 1'").injection


# --- harmless everyday uses around the changes -----------------------------------------------

@pytest.mark.parametrize("command", ["time ls", "git log", "git status", "find . -name '*.py'",
                                     "make test", "pytest -q", "nice -n 5 make",
                                     "timeout 10 pytest -q", "sudo ls /root"])
def test_s40_everyday_commands_stay_plain(command: str) -> None:
    for spelled in _spellings(command):
        assert not _asks(spelled), spelled
