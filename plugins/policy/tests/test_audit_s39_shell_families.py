"""Audit s39 of the shell guard: families a prompt-injected model could still use.

1. Variables that choose *where configuration is read* (``HOME`` is ``XDG_CONFIG_HOME``'s
   parent: ``HOME=x git status`` ran ``x/.config/git/config``'s ``core.fsmonitor``),
   ``KUBECONFIG``, ``WGETRC``, and runtime options read from the environment
   (``JDK_JAVA_OPTIONS``, ``GOFLAGS``, ``RUSTC_WRAPPER``, ``LUA_INIT``, cargo's keys).
2. Wrappers the guard did not know hid the command they run: ``eatmydata rm -rf ~`` and
   ``uv run rm -rf ~`` were plain, ``rlwrap sh`` (a shell reading stdin) passed.
3. Options and configuration files that make an everyday program run another one, of the
   families already refused (``wget --use-askpass``, ``git -c core.pager``): ``wget -e
   use_askpass=``, ``wget --config``, ``rg --pre``, ``kubectl --kubeconfig``, ``cargo
   --config``, ``go -toolexec``/``-exec``/``-vettool``; ``perl -M'...; system ...'`` is inline
   code; ``fd -x rm`` deletes like ``find -exec rm``.

Nothing here is run: the analyser is called directly.
"""

from __future__ import annotations

import pytest
from tooldeck_policy._shell import analyze_command, code_bearing_env_name

CONFIG_VARIABLES = ["HOME", "KUBECONFIG", "WGETRC", "AWS_CONFIG_FILE", "CARGO_HOME", "GOENV",
                    "GNUPGHOME", "OPENSSL_CONF", "PHPRC", "R_PROFILE_USER", "PSQLRC",
                    "BUNDLE_GEMFILE", "GEM_PATH", "RUSTUP_TOOLCHAIN", "JDK_JAVA_OPTIONS",
                    "MAVEN_OPTS", "CLASSPATH", "GOFLAGS", "RUSTC_WRAPPER", "RUSTFLAGS",
                    "LUA_INIT", "LUA_INIT_5_4", "LUA_PATH_5_4", "CARGO_BUILD_RUSTC_WRAPPER",
                    "CARGO_TARGET_X86_64_UNKNOWN_LINUX_GNU_RUNNER", "CARGO_ALIAS_B"]


@pytest.mark.parametrize("name", CONFIG_VARIABLES)
@pytest.mark.parametrize("template", ["{name}=x git status", "env {name}=x git status",
                                      "export {name}=x", "sudo {name}=x ls",
                                      "make {name}=x all"])
def test_audit_s39_config_variables_refused(name: str, template: str) -> None:
    assert code_bearing_env_name(name)
    command = template.format(name=name)
    assert analyze_command(command).injection, command


@pytest.mark.parametrize("command", ["CARGO_TARGET_DIR=out cargo build", "TZ=UTC date",
                                     "CARGO_BUILD_JOBS=2 cargo build", "CI=1 pytest -q",
                                     "LANG=C sort f"])
def test_audit_s39_plain_variables_pass(command: str) -> None:
    assert not analyze_command(command).injection, command


WRAPPERS = ["rlwrap", "faketime 1", "eatmydata", "cpulimit -l 50 --", "cpulimit -l 50",
            "xvfb-run -a", "ssh-agent", "chronic", "ifne", "proxychains -q", "proxychains4",
            "torsocks", "tini --", "dumb-init", "trickle -d 10", "lckdo lockfile",
            "uv run", "uv run --with rich -p 3.12", "uv --quiet run", "poetry run",
            "poetry -C sub run", "pdm run", "pipenv run", "hatch run", "rye run", "pixi run",
            "pixi exec", "conda run -n env", "mamba run --no-capture-output -n env",
            "micromamba run -n env", "bundle exec", "mise exec --", "mise x node@20",
            "asdf exec", "direnv exec .", "nix develop -c", "nix shell nixpkgs#hello -c"]


@pytest.mark.parametrize("wrapper", WRAPPERS)
def test_audit_s39_wrapped_destruction_asks(wrapper: str) -> None:
    verdict = analyze_command(f"{wrapper} rm -rf ~")
    assert any("home" in reason for reason in verdict.destructive), (wrapper, verdict)


@pytest.mark.parametrize("wrapper", WRAPPERS)
def test_audit_s39_wrapped_stdin_shell_refused(wrapper: str) -> None:
    assert analyze_command(f"{wrapper} sh").injection, wrapper
    assert analyze_command(f"{wrapper} bash -c 'id; id'").injection, wrapper


@pytest.mark.parametrize("wrapper", WRAPPERS)
def test_audit_s39_wrapped_plain_command_passes(wrapper: str) -> None:
    verdict = analyze_command(f"{wrapper} ls -la")
    assert not verdict.injection and not verdict.destructive, (wrapper, verdict)


@pytest.mark.parametrize("command", ["nix-shell -p hello --run 'rm -rf ~'",
                                     "nix-shell --command='rm -rf ~'",
                                     "capsh -- -c 'rm -rf ~'", "capsh --caps=x -- -c 'rm -rf ~'",
                                     "rlwrap -z 'rm -rf ~' cat"])
def test_audit_s39_wrapper_strings_analysed(command: str) -> None:
    verdict = analyze_command(command)
    assert verdict.injection, command
    assert verdict.destructive, command


def test_audit_s39_capsh_shell_reading_stdin_refused() -> None:
    assert analyze_command("capsh --").injection


RUNS_PROGRAMS = [
    "wget -e use_askpass=./x http://127.0.0.1/", "wget -e useAskPass=./x http://127.0.0.1/",
    "wget --execute=use-askpass=./x http://127.0.0.1/", "wget --config=./rc http://127.0.0.1/",
    "wget --conf ./rc http://127.0.0.1/", "rg --pre ./x pattern", "rg --pre=./x pattern",
    "ag --pager ./x pattern", "bat --pager ./x file", "kubectl --kubeconfig=./kc get pods",
    "kubectl get pods --kubeconfig ./kc", "helm --kubeconfig ./kc list",
    "cargo --config 'target.x86_64-unknown-linux-gnu.runner=\"./x\"' run",
    "cargo --config build.rustc-wrapper=./x build", "cargo --config extra.toml build",
    "cargo --config 'alias.b=\"run\"' b", "go build -toolexec=./x .", "go test -exec ./x .",
    "go run --exec=./x .", "go vet -vettool=./x .", "go build -ldflags=-extld=./x .",
    "go build '-ldflags=-linkmode external -extld ./x' .",
]


@pytest.mark.parametrize("command", RUNS_PROGRAMS)
def test_audit_s39_options_that_run_programs_refused(command: str) -> None:
    assert analyze_command(command).injection, command


@pytest.mark.parametrize("command", [
    "wget -erobots=off http://127.0.0.1/", "wget -q http://127.0.0.1/", "rg --pre-glob '*.gz' x",
    "rg -z pattern", "kubectl get pods", "cargo --config net.offline=true build",
    "cargo build --release", "go build -ldflags='-s -w' .", "go test -run TestX ./...",
    "go build -o out .", "bat file", "ag pattern",
])
def test_audit_s39_everyday_options_pass(command: str) -> None:
    verdict = analyze_command(command)
    assert not verdict.injection and not verdict.destructive, (command, verdict)


@pytest.mark.parametrize("command", ["perl -M'strict; system q(id)' -e 1",
                                     "perl -M'x;system(1)' script.pl",
                                     "perl -m'POSIX; exec q(sh)' -e 1"])
def test_audit_s39_perl_module_option_is_inline_code(command: str) -> None:
    assert analyze_command(command).destructive, command


@pytest.mark.parametrize("command", ["perl -MData::Dumper -e 'print 1'", "perl -Mstrict x.pl",
                                     "perl -MList::Util=sum -e 'print sum(1,2)'"])
def test_audit_s39_perl_plain_modules_pass(command: str) -> None:
    assert not analyze_command(command).destructive, command


def test_audit_s39_perl_module_alone_still_reads_stdin() -> None:
    # -M is no program: perl still reads its code from stdin, which must still ask.
    assert analyze_command("perl -MData::Dumper").destructive


@pytest.mark.parametrize("command", ["fd -x rm -rf", "fd . / -x rm -rf", "fd -X rm -rf ~",
                                     "fd -t f . ~ -x rm", "fd -e pyc . / -x rm",
                                     "fdfind . .. --exec rm -rf"])
def test_audit_s39_fd_exec_rm_asks(command: str) -> None:
    assert analyze_command(command).destructive, command


@pytest.mark.parametrize("command", ["fd -e pyc -x rm", "fd __pycache__ -x rm -rf",
                                     "fd -x wc -l", "fd -e py", "fd -X ls -la"])
def test_audit_s39_fd_narrowed_or_harmless_passes(command: str) -> None:
    verdict = analyze_command(command)
    assert not verdict.injection and not verdict.destructive, (command, verdict)


def test_audit_s39_fd_exec_command_analysed() -> None:
    assert analyze_command("fd -x sh -c 'rm -rf ~'").injection


def test_audit_s39_argv_lists_are_looked_through_too() -> None:
    # shell_exec's recommended form: an argv list, never re-parsed, still checked.
    assert analyze_command(["uv", "run", "rm", "-rf", "/"]).destructive
    assert analyze_command(["eatmydata", "sh"]).injection
    assert analyze_command(["env", "HOME=x", "git", "status"]).injection
    assert analyze_command(["wget", "-e", "use_askpass=./x", "http://127.0.0.1/"]).injection


# --- 4. the program's name hides what runs ------------------------------------------------
# Measured through shell_exec: ["/proc/self/exe", "-c", CODE] ran the sandbox worker's Python
# with CODE, and the line '/proc/self/exe -c "echo $0"' ran /bin/sh -c: nested code that no rule
# saw, since 'exe' is no program the guard knows.

@pytest.mark.parametrize("command", [
    "/proc/self/exe -c 'rm -rf ~'", "/proc/thread-self/exe -c id", "/proc/1/exe",
    "/proc/self/task/1/exe -c id", "/proc/self//exe -c id", "/proc/./self/exe -c id",
    "../../../../../proc/self/exe -c id", "/dev/fd/3", "/proc/self/fd/0", "/dev/stdin",
    ["/proc/self/exe", "-c", "import os; os.system('id')"],
])
def test_audit_s39_process_link_programs_refused(command: str | list[str]) -> None:
    assert analyze_command(command).injection, command


@pytest.mark.parametrize("command", [
    "ld.so /bin/sh", "/lib64/ld-linux-x86-64.so.2 /bin/sh -c id",
    "/usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2 /bin/bash", "ld-musl-x86_64.so.1 /bin/sh",
    "ld-linux-aarch64.so.1 sh", "ld.so --preload ./x.so /bin/ls",
    "ld.so --library-path . /bin/ls", "ld.so --audit=./x.so /bin/ls",
])
def test_audit_s39_dynamic_loader_is_looked_through(command: str) -> None:
    assert analyze_command(command).injection, command


@pytest.mark.parametrize("command", ["/lib64/ld-linux-x86-64.so.2 /bin/rm -rf ~",
                                     "ld.so --argv0 ls /bin/rm -rf ~"])
def test_audit_s39_dynamic_loader_destruction_asks(command: str) -> None:
    assert analyze_command(command).destructive, command


@pytest.mark.parametrize("command", ["zsh5 -c id", "bash-static -c id", "zsh-static",
                                     "mksh-static -c id", "bash5.2 -c id", "lksh -c id",
                                     "sash"])
def test_audit_s39_shell_variant_names_are_shells(command: str) -> None:
    assert analyze_command(command).injection, command


@pytest.mark.parametrize("command", ["ld.so /bin/ls -la", "ld -o x y.o", "ldd /bin/ls",
                                     "zsh5 build.zsh", "ssh5 host", "/proc/self/root/bin/ls",
                                     "./exe", "python3.11 -c 'print(1)'"])
def test_audit_s39_program_names_that_stay_plain(command: str) -> None:
    verdict = analyze_command(command)
    assert not verdict.injection and not verdict.destructive, (command, verdict)
