"""shell_exec through the real deck: schema, policy, runner with bubblewrap, the tool itself."""

from __future__ import annotations

import os
import shutil
import socket
import sys
import time

import pytest
import trio

tooldeck_testing = pytest.importorskip("tooldeck.testing")

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap not installed")

PY = "python3"  # the system interpreter, inside the sandbox's read-only /usr


def _deck():
    return tooldeck_testing.make_deck(
        load_entry_points=["schema", "runner", "policy", "shell"],
        config={"runner": {"sandbox": "bubblewrap"}},
    )


def _approver(log: list[str]):
    async def confirm(request) -> bool:
        log.append(request.call.name)
        return True

    return confirm


async def test_every_call_needs_approval_then_runs_the_argv_without_a_shell(workdir):
    async with _deck() as deck:
        assert deck.catalog.get("shell_exec").plugin == "shell"
        session = deck.session(workdir=workdir)
        # ';' inside an argv element is a literal byte of a file name, not a second command.
        args = {"command": ["touch", "a;touch b", "made.txt"]}
        asked = await session.call("shell_exec", args)
        assert not asked.success and asked.error.code == "CONFIRMATION_REQUIRED"
        assert not (workdir / "made.txt").exists()  # nothing ran before the approval
        ran = await session.resume(asked.error.details["approval_id"])
        assert ran.success, ran.error
        assert ran.data["exit_code"] == 0 and ran.data["shell"] is False
        assert ran.metadata["isolation"] == "bubblewrap"
    # The workdir is mounted writable for this tool.
    assert sorted(p.name for p in workdir.iterdir()) == ["a;touch b", "made.txt"]


async def test_injection_in_a_command_line_is_refused_and_nothing_runs(workdir):
    asked: list[str] = []
    async with _deck() as deck:
        session = deck.session(workdir=workdir, confirm=_approver(asked))
        for line in (
            "touch marker1; touch marker2",
            "touch marker1 && touch marker2",
            "echo $(touch marker1)",
            "echo hi > marker1",
            "ls | tee marker1",
            "touch marker1\ntouch marker2",
        ):
            result = await session.call("shell_exec", {"command": line})
            assert not result.success and result.error.code == "COMMAND_INJECTION", line
        # A nested shell in an argv list is seen through too.
        nested = await session.call("shell_exec", {"command": ["sh", "-c", "touch marker1"]})
        assert nested.error.code == "COMMAND_INJECTION"
        # One plain command line runs (through /bin/sh: the glob is expanded).
        (workdir / "x.py").write_text("")
        plain = await session.call("shell_exec", {"command": "ls *.py"})
        assert plain.success and plain.data["stdout"] == "x.py\n" and plain.data["shell"] is True
    assert not (workdir / "marker1").exists() and not (workdir / "marker2").exists()
    assert asked == ["shell_exec"]  # refused calls never even reached the user


async def test_destructive_command_asks_even_when_the_tool_is_always_allowed(workdir):
    async with _deck() as deck:
        session = deck.session(workdir=workdir)
        session.always_allow("shell_exec")
        ok = await session.call("shell_exec", {"command": ["true"]})
        assert ok.success and ok.data["exit_code"] == 0
        risky = await session.call("shell_exec", {"command": ["rm", "-rf", "/"]})
        assert not risky.success and risky.error.code == "CONFIRMATION_REQUIRED"
        assert "destructive" in risky.error.message
        denied = await session.resume(risky.error.details["approval_id"], approved=False)
        assert not denied.success and denied.error.code == "PERMISSION_DENIED"


async def test_exit_codes_missing_programs_stdin_and_cwd(workdir):
    (workdir / "sub").mkdir()
    async with _deck() as deck:
        session = deck.session(workdir=workdir, confirm=_approver([]))
        failed = await session.call("shell_exec", {"command": ["ls", "no-such-file"]})
        assert failed.success, failed.error  # the model must see the exit code, not an error
        assert failed.data["exit_code"] == 2 and "no-such-file" in failed.data["stderr"]

        missing = await session.call("shell_exec", {"command": ["no-such-program-xyz", "-v"]})
        assert not missing.success and missing.error.code == "EXECUTION_ERROR"
        assert "no-such-program-xyz" in missing.error.message and missing.error.suggestion

        via_shell = await session.call("shell_exec", {"command": "no-such-program-xyz"})
        assert via_shell.success and via_shell.data["exit_code"] == 127
        assert "127" in via_shell.data["note"]

        piped = await session.call("shell_exec", {"command": ["cat"], "stdin": "héllo\n"})
        assert piped.data["stdout"] == "héllo\n"

        here = await session.call("shell_exec", {"command": ["pwd"], "cwd": "sub"})
        assert here.data["stdout"].strip() == str(workdir / "sub") and here.data["cwd"] == "sub"
        out = await session.call("shell_exec", {"command": ["pwd"], "cwd": "../"})
        assert not out.success and out.error.code == "PATH_NOT_ALLOWED"

        crashed = await session.call(
            "shell_exec", {"command": [PY, "-c", "import os, signal; os.kill(os.getpid(), 11)"]}
        )
        assert crashed.success and crashed.data["signal"] == "SIGSEGV"
        assert crashed.data["exit_code"] == 128 + 11


async def test_timeout_kills_the_whole_process_tree(workdir):
    # The command starts a grandchild that would create a file after 2 s; at the 1 s timeout the
    # whole tree must die, so the file never appears.
    script = (
        "import subprocess, sys, time; "
        "subprocess.Popen([sys.executable, '-c', "
        "'import time, pathlib; time.sleep(2); pathlib.Path(\"late.txt\").touch()']); "
        "print('started', flush=True); time.sleep(60)"
    )
    async with _deck() as deck:
        session = deck.session(workdir=workdir, confirm=_approver([]))
        result = await session.call("shell_exec", {"command": [PY, "-c", script], "timeout_s": 1})
        assert not result.success and result.error.code == "TIMEOUT"
        assert result.error.details["partial"]["stdout"] == "started\n"
        await trio.sleep(2.5)
    assert not (workdir / "late.txt").exists()


async def test_output_is_capped_and_a_flood_is_stopped(workdir):
    from tooldeck_tools_shell import STDOUT_CAP_BYTES

    async with _deck() as deck:
        session = deck.session(workdir=workdir, confirm=_approver([]))
        big = await session.call(
            "shell_exec", {"command": [PY, "-c", "print('a' * 400000, end=''); print('END')"]}
        )
        assert big.success, big.error
        data = big.data
        assert data["truncated_stdout"] is True and data["stdout_bytes"] == 400004
        assert data["stdout"].startswith("aaa") and data["stdout"].endswith("aEND\n")
        assert "bytes omitted" in data["stdout"] and len(data["stdout"]) < STDOUT_CAP_BYTES + 100
        assert "note" in data and data["exit_code"] == 0

        flood = await session.call("shell_exec", {"command": ["yes"], "timeout_s": 60})
        assert flood.success and flood.data["output_limit_exceeded"] is True
        assert flood.data["signal"] == "SIGKILL" and flood.data["truncated_stdout"]


async def test_binary_and_non_utf8_output_are_faithful(workdir):
    raw = "import sys; sys.stdout.buffer.write(b'ok \\xff\\xfe \\x00 end')"
    async with _deck() as deck:
        session = deck.session(workdir=workdir, confirm=_approver([]))
        text = await session.call("shell_exec", {"command": [PY, "-c", raw]})
        assert text.success and text.data["stdout_encoding"] == "utf-8 (with replacements)"
        assert text.data["stdout"] == "ok \ufffd\ufffd \x00 end"
        exact = await session.call(
            "shell_exec", {"command": [PY, "-c", raw], "output_encoding": "base64"}
        )
        import base64

        assert base64.b64decode(exact.data["stdout"]) == b"ok \xff\xfe \x00 end"
        assert exact.data["stdout_encoding"] == "base64"


async def test_no_network_and_no_host_secrets_inside(workdir, loopback_server, host_secret):
    # Control: the server answers on the host.
    socket.create_connection(("127.0.0.1", loopback_server), timeout=2).close()
    connect = f"import socket; socket.create_connection(('127.0.0.1', {loopback_server}), 2)"
    async with _deck() as deck:
        session = deck.session(workdir=workdir, confirm=_approver([]))
        net = await session.call("shell_exec", {"command": [PY, "-c", connect]})
        assert net.success and net.data["exit_code"] != 0
        assert "ConnectionRefusedError" in net.data["stderr"] or "unreachable" in net.data["stderr"]
        env = await session.call("shell_exec", {"command": ["env"], "env": {"MY_FLAG": "1"}})
        assert env.success and "MY_FLAG=1" in env.data["stdout"]
        assert host_secret not in env.data["stdout"]
        assert "TOOLDECK_TEST_HOST_MARKER" not in env.data["stdout"]
        # Not through the process tree either: the sandbox's first process is a clean worker.
        init = await session.call("shell_exec", {"command": ["cat", "/proc/1/environ"]})
        assert host_secret not in init.data["stdout"] + init.data["stderr"]


async def test_bad_input_is_refused_before_anything_runs(workdir):
    async with _deck() as deck:
        session = deck.session(workdir=workdir, confirm=_approver([]))
        cases = [
            ({"command": 5}, "INVALID_ARGUMENTS"),
            ({"command": []}, "INVALID_ARGUMENTS"),
            ({"command": ["ls", 3]}, "INVALID_ARGUMENTS"),
            ({"command": ["ls"], "timeout_s": "soon"}, "INVALID_ARGUMENTS"),
            ({"command": ["ls"], "timeout_s": 10_000}, "INVALID_ARGUMENTS"),
            ({"command": ["ls"], "bogus": 1}, "INVALID_ARGUMENTS"),
            ({"command": "x" * 20_000}, "INVALID_ARGUMENTS"),
            ({"command": ["touch", "y"] + ["z"] * 5000}, "INVALID_ARGUMENTS"),
            ({"command": ["ls"], "stdin": "s" * (2 * 1024 * 1024)}, "INVALID_ARGUMENTS"),
            ({"command": ["touch", "marker"], "env": {"LD_PRELOAD": "/x.so"}}, "INVALID_ARGUMENTS"),
            ({"command": ["touch", "marker"], "env": {"PATH": "/tmp"}}, "INVALID_ARGUMENTS"),
            ({"command": ["touch", "marker"], "env": {"1BAD": "x"}}, "INVALID_ARGUMENTS"),
            ({"command": ["touch", "mark\x00er"]}, "COMMAND_INJECTION"),
        ]
        for arguments, code in cases:
            result = await session.call("shell_exec", arguments)
            assert not result.success and result.error.code == code, (arguments, result.error)
        # Over the total argv size: the tool's own limit answers TOO_LARGE.
        huge = ["touch", "marker", *(["a" * 60_000] * 10)]
        result = await session.call("shell_exec", {"command": huge})
        assert not result.success and result.error.code == "TOO_LARGE"
    assert not (workdir / "marker").exists()


@pytest.mark.skipif(sys.platform != "linux", reason="Linux only")
async def test_warm_shell_exec_latency_is_reported(workdir):
    """Figures, never asserted: cold first call, then warm calls spaced like a model's turns."""
    async with _deck() as deck:
        session = deck.session(workdir=workdir)
        session.always_allow("shell_exec")
        start = time.perf_counter()
        first = await session.call("shell_exec", {"command": ["true"]})
        cold_ms = (time.perf_counter() - start) * 1000
        warm = []
        for _ in range(15):
            await trio.sleep(0.2)  # think time, so the replacement worker is ready
            start = time.perf_counter()
            result = await session.call("shell_exec", {"command": ["true"]})
            warm.append((time.perf_counter() - start) * 1000)
            assert result.success
        warm.sort()
    assert first.success
    print(f"\nshell_exec ['true'] via deck+bwrap: cold {cold_ms:.0f} ms, warm p50 "
          f"{warm[len(warm) // 2]:.1f} ms, p90 {warm[int(len(warm) * 0.9)]:.1f} ms (n={len(warm)})")


async def test_protected_paths_stay_read_only_and_new_ones_do_not_survive(workdir):
    import subprocess

    (workdir / ".git" / "hooks").mkdir(parents=True)
    (workdir / ".git" / "config").write_text("[core]\n")
    hook = workdir / ".git" / "hooks" / "pre-commit"
    hook.write_text("#!/bin/sh\nexit 0\n")
    hook.chmod(0o755)
    (workdir / "pyproject.toml").write_text("[project]\nname = 'demo'\n")
    marker = workdir.parent / f"{workdir.name}-marker"
    payload = f"touch {marker}\n"
    script = (
        "import sys\n"
        "path, text = sys.argv[1], sys.argv[2]\n"
        "try:\n"
        "    open(path, 'a').write(text)\n"
        "    print('written')\n"
        "except OSError as exc:\n"
        "    print('refused', exc.strerror)\n"
    )
    async with _deck() as deck:
        session = deck.session(workdir=workdir, confirm=_approver([]))
        for path, text in (
            (".git/config", "[core]\n\tfsmonitor = " + payload),
            (".git/hooks/pre-commit", payload),
            ("pyproject.toml", "[tool.tooldeck]\nplugins = ['evil']\n"),
        ):
            result = await session.call("shell_exec", {"command": [PY, "-c", script, path, text]})
            assert result.success, result.error
            assert result.data["stdout"] == "refused Read-only file system\n", (path, result.data)
        created = await session.call(
            "shell_exec", {"command": [PY, "-c", script, "tooldeck.toml", "[runner]\n"]}
        )
        assert not created.success and created.error.code == "PATH_NOT_ALLOWED", created
        assert "tooldeck.toml" in created.error.message
        # The sandbox's own check (the call ran, then what it created was removed).
        assert "was removed" in created.error.message
        link = ["ln", "-s", "/tmp", "tooldeck.toml"]
        linked = await session.call("shell_exec", {"command": link})
        assert not linked.success and linked.error.code == "PATH_NOT_ALLOWED", linked
    assert not os.path.lexists(workdir / "tooldeck.toml")
    assert (workdir / ".git" / "config").read_text() == "[core]\n"
    assert (workdir / "pyproject.toml").read_text() == "[project]\nname = 'demo'\n"
    # The hook the host would run is untouched: running it does not run the marker command.
    subprocess.run([str(hook)], check=True, cwd=workdir)
    assert not marker.exists()



async def test_bytecode_is_never_left_in_the_workdir(workdir):
    # Running the project's code writes no __pycache__ (PYTHONDONTWRITEBYTECODE is set), so the
    # call succeeds; bytecode written on purpose is a protected path (the host would import it
    # instead of the reviewed source) and does not survive the call.
    (workdir / "mod.py").write_text("VALUE = 41\n")
    (workdir / "pkg").mkdir()
    (workdir / "pkg" / "__init__.py").write_text("")
    (workdir / "pkg" / "inner.py").write_text("VALUE = 1\n")
    run = [PY, "-c", "import mod, pkg.inner; print(mod.VALUE + pkg.inner.VALUE)"]
    async with _deck() as deck:
        session = deck.session(workdir=workdir, confirm=_approver([]))
        ran = await session.call("shell_exec", {"command": run})
        assert ran.success, ran.error
        assert ran.data["stdout"] == "42\n"
        assert not list(workdir.rglob("__pycache__"))
        for command in (
            [PY, "-m", "py_compile", "mod.py"],  # __pycache__/mod.cpython-3X.pyc
            [PY, "-c", "import py_compile; py_compile.compile('pkg/inner.py', cfile='evil.pyc')"],
            ["env", "PYTHONDONTWRITEBYTECODE=", PY, "-c", "import mod"],
        ):
            result = await session.call("shell_exec", {"command": command})
            assert not result.success and result.error.code == "PATH_NOT_ALLOWED", (command,
                                                                                  result)
            assert "pyc" in result.error.message or "__pycache__" in result.error.message
            assert not list(workdir.rglob("*.pyc")), command
            assert not list(workdir.rglob("__pycache__")), command


async def test_planted_build_tool_configuration_does_not_survive(workdir):
    # Files npm, cargo, husky and pdb read from the project folder and run what they name: a
    # command that plants one fails PATH_NOT_ALLOWED and leaves nothing behind.
    async with _deck() as deck:
        session = deck.session(workdir=workdir, confirm=_approver([]))
        for path, text in (
            (".npmrc", "script-shell=/tmp/evil\n"),
            (".cargo/config.toml", "[build]\nrustc-wrapper = '/tmp/evil'\n"),
            (".husky/pre-commit", "#!/bin/sh\ntouch /tmp/pwned\n"),
            (".pdbrc", "import os; os.system('touch /tmp/pwned')\n"),
        ):
            script = (
                "import os, sys\n"
                "path, text = sys.argv[1], sys.argv[2]\n"
                "os.makedirs(os.path.dirname(path) or '.', exist_ok=True)\n"
                "open(path, 'w').write(text)\n"
            )
            result = await session.call("shell_exec", {"command": [PY, "-c", script, path, text]})
            assert not result.success and result.error.code == "PATH_NOT_ALLOWED", (path, result)
            assert not (workdir / path).exists(), path
