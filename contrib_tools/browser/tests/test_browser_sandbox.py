"""The sandbox boundary around Chromium, checked on the real processes.

What a launch really looks like is read from ``/proc``: the uid of every Chromium process of this
test run, their command lines (no ``--no-sandbox`` or other weakening switch), and their
namespaces (a renderer lives in a user, pid and network namespace of its own, under seccomp).
Only processes descending from this test process are looked at, so browsers of other programs on
the machine do not count.
"""

from __future__ import annotations

import functools
import http.server
import os
import stat
import subprocess
import tempfile
import threading
from pathlib import Path
from typing import Any

import attrs
import pytest
import trio
from tooldeck_tools_browser import _engine, _sandbox, engine, find_executable
from tooldeck_tools_browser._sandbox import (
    DEFAULT_MEMORY_MB,
    DEFAULT_UID,
    ENV_MEMORY,
    ENV_SANDBOX,
    ENV_UID,
    PIDS_MAX,
    WEAKENING_SWITCHES,
    prepare_sandbox,
    requested_memory_mb,
    requested_mode,
    requested_uid,
)

from tooldeck.testing import make_deck
from tooldeck_hookspecs import ConfigError, ToolFailure
from tooldeck_hookspecs.cgroups import CgroupSupport, detect

ENTRY_POINTS = ["schema", "runner", "policy", "browser"]


# Skipped with the reason when Chromium is missing (conftest.py).
pytestmark = pytest.mark.chromium

AS_ROOT = os.geteuid() == 0
#: The uid Chromium must run as: nobody when the tests run as root, else our own.
EXPECTED_UID = DEFAULT_UID if AS_ROOT else os.geteuid()


@attrs.frozen
class Proc:
    pid: int
    args: tuple[str, ...]
    uids: tuple[int, ...]
    seccomp: int
    ns: dict[str, str]

    @property
    def type(self) -> str | None:
        for arg in self.args:
            if arg.startswith("--type="):
                return arg.split("=", 1)[1]
        return None


def _read_proc(pid: int) -> Proc | None:
    try:
        # Chromium rewrites its title into one NUL-free string: split on both.
        raw = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode("utf-8",
                                                                                      "replace")
        status = Path(f"/proc/{pid}/status").read_text()
        ns = {kind: os.readlink(f"/proc/{pid}/ns/{kind}") for kind in ("user", "pid", "net")}
    except OSError:  # gone meanwhile
        return None
    fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
    return Proc(pid=pid, args=tuple(raw.split()),
                uids=tuple(int(u) for u in fields["Uid"].split()),
                seccomp=int(fields.get("Seccomp", "0").strip()), ns=ns)


def _descendants(root: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                text = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            children.setdefault(int(text.rsplit(")", 1)[1].split()[1]), []).append(int(entry))
    found, stack = [], [root]
    while stack:
        for child in children.get(stack.pop(), []):
            found.append(child)
            stack.append(child)
    return found


def chromium_processes() -> list[Proc]:
    """Chromium processes started (directly or not) by this test process."""
    procs = [_read_proc(pid) for pid in _descendants(os.getpid())]
    return [p for p in procs if p is not None and p.args
            and os.path.basename(p.args[0]) == "chromium"]


def _weakening(args: tuple[str, ...]) -> list[str]:
    names = {f"--{n}" for n in WEAKENING_SWITCHES} | {f"-{n}" for n in WEAKENING_SWITCHES}
    return [a for a in args if a.split("=", 1)[0].lower() in names
            and not a.startswith("--user-data-dir=")]


#: Switches no process of a sandboxed browser may carry. (Chromium itself gives its second,
#: unsandboxed zygote --no-zygote-sandbox: that one is how the sandbox works, not a weakening.)
_NEVER = {"--no-sandbox", "--single-process", "--no-zygote", "--disable-namespace-sandbox",
          "--disable-seccomp-filter-sandbox", "--disable-setuid-sandbox"}


def _assert_sandboxed(procs: list[Proc]) -> Proc:
    """Every process unprivileged and unweakened; renderers in their own namespaces. Returns
    the browser process."""
    browsers = [p for p in procs if p.type is None]
    renderers = [p for p in procs if p.type == "renderer"]
    assert len(browsers) == 1 and renderers, [p.args[:2] for p in procs]
    browser = browsers[0]
    assert _weakening(browser.args) == []  # what the launcher let through
    for proc in procs:
        assert set(proc.uids) == {EXPECTED_UID}, (proc.type, proc.uids)
        assert not _NEVER & {a.split("=", 1)[0].lower() for a in proc.args}, proc.type
    for renderer in renderers:
        # Chromium's namespace sandbox: a user, pid and network namespace of the renderer's own.
        for kind in ("user", "pid", "net"):
            assert renderer.ns[kind] != browser.ns[kind], kind
        assert renderer.seccomp == 2  # seccomp-bpf filter mode
    return browser


@pytest.fixture
def no_sandbox_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ENV_SANDBOX, raising=False)
    monkeypatch.delenv(ENV_UID, raising=False)
    monkeypatch.delenv(ENV_MEMORY, raising=False)


@pytest.fixture
def alone() -> None:
    """No browser of an earlier test is running: the processes a test sees are its own."""
    _engine.shutdown()


@pytest.fixture
def allow_loopback(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TOOLDECK_URL_ALLOW", "127.0.0.1")


def _session(deck: Any, workdir: Path, **kw: Any) -> Any:
    kw.setdefault("grants", {"browser"})
    return deck.session(workdir=str(workdir), max_level="moderate", **kw)


async def test_auto_runs_chromium_as_nobody_inside_its_own_sandbox(
    site, allow_loopback, no_sandbox_env, alone, tmp_path
):
    async with make_deck(config={"browser": {"sandbox": "auto"}},
                         load_entry_points=ENTRY_POINTS) as deck:
        result = await _session(deck, tmp_path).call("browser_navigate", {"url": site.url("/")})
        # The page came through the guarding proxy on the host's 127.0.0.1: network shared.
        assert result.success, result.error
        assert result.data["title"] == "Tooldeck Test Home"
        meta = result.metadata["browser_sandbox"]
        assert meta["requested"] == "auto" and meta["mode"] in ("bwrap", "user")
        assert meta["uid"] == EXPECTED_UID and meta["layers"][-1] == "chromium-sandbox"
        browser = _assert_sandboxed(chromium_processes())
        sandbox = engine().sandbox
        assert sandbox is not None and sandbox.root and sandbox.profile_dir
        if meta["mode"] == "bwrap":
            assert meta["layers"] == ["unprivileged-uid", "bubblewrap", "chromium-sandbox"]
            assert browser.ns["user"] != os.readlink("/proc/self/ns/user")
            assert browser.ns["net"] == os.readlink("/proc/self/ns/net")  # the proxy's network
            # Its file system: /usr yes; the session's workdir, /root and /home no.
            view = f"/proc/{browser.pid}/root"
            assert os.path.isdir(f"{view}/usr/lib")
            assert not os.path.exists(f"{view}{tmp_path}")
            assert not os.path.exists(f"{view}/root") or os.listdir(f"{view}/root") == []
        # The profile is the browser's alone, in a folder nobody else may list.
        info = os.stat(sandbox.profile_dir)
        assert info.st_uid == EXPECTED_UID and stat.S_IMODE(info.st_mode) == 0o700
        assert stat.S_IMODE(os.stat(sandbox.root).st_mode) == 0o711
    engine().shutdown()
    assert not os.path.exists(sandbox.root)  # profile removed with the browser
    assert chromium_processes() == []


def test_the_launcher_drops_weakening_switches_whoever_passes_them(no_sandbox_env, alone):
    """Playwright told to add --no-sandbox, plus every hostile spelling: Chromium still runs
    with its sandbox, because the launcher removes them all."""
    from playwright.sync_api import sync_playwright

    hostile = ["--no-sandbox", "-no-sandbox", "--no-sandbox=1", "--NO-SANDBOX", "--no-zygote",
               "-single-process", "--disable-setuid-sandbox", "--disable-namespace-sandbox",
               "--disable-seccomp-filter-sandbox=", "--renderer-cmd-prefix=/bin/sh",
               "--disable-web-security", "--utility-cmd-prefix=/bin/sh"]
    # (--remote-debugging-port is dropped too, but Playwright would then wait for the port's
    # banner: see the spelling test below.)
    sandbox = prepare_sandbox(find_executable(), "auto")
    try:
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=sandbox.executable, headless=True,
                                         chromium_sandbox=False, args=hostile, timeout=60_000)
            try:
                page = browser.new_page()
                page.set_content("<p id=x>still works</p>")
                assert page.inner_text("#x") == "still works"
                procs = chromium_processes()
                _assert_sandboxed(procs)
                main = next(p for p in procs if p.type is None)
                assert f"--user-data-dir={sandbox.profile_dir}" in main.args
            finally:
                browser.close()
    finally:
        sandbox.cleanup()


def _argv_printer(folder: Path) -> str:
    script = folder / "print-argv"
    script.write_text('#!/bin/sh\nid -u\nenv | sort | sed "s/^/ENV /"\n'
                      'for a do printf "ARG %s\\n" "$a"; done\n')
    script.chmod(0o755)
    return str(script)


def test_every_spelling_is_dropped_and_nothing_else(tmp_path):
    printer = _argv_printer(tmp_path)
    launcher = tmp_path / "launch"
    launcher.write_text(_sandbox._launcher_script([], printer, "/profile"))
    launcher.chmod(0o700)
    dropped = []
    for name in WEAKENING_SWITCHES:
        dropped += [f"--{name}", f"-{name}", f"--{name}=x", f"-{name}=", f"--{name.upper()}",
                    f"--{name.title()}=1"]
    kept = ["--no-sandboxes", "--headless", "--lang=en US", "about:blank", "-", "--",
            "--disable-gpu", "x--no-sandbox", "--remote-debugging-pipe"]
    out = subprocess.run([str(launcher), *dropped, *kept], capture_output=True, text=True,
                         check=True, timeout=30).stdout
    args = [line[4:] for line in out.splitlines() if line.startswith("ARG ")]
    assert args == ["--user-data-dir=/profile", *kept]


@pytest.mark.skipif(not AS_ROOT, reason="dropping root needs root")
def test_user_mode_drops_root_and_clears_the_environment(no_sandbox_env, monkeypatch):
    monkeypatch.setenv("TOOLDECK_TEST_SECRET", "hunter2")
    folder = Path(tempfile.mkdtemp(prefix="tooldeck-argv-"))
    try:
        folder.chmod(0o755)  # nobody must be able to run the printer
        sandbox = prepare_sandbox(_argv_printer(folder), "user")
        try:
            assert sandbox.mode == "user" and sandbox.layers == ("unprivileged-uid",
                                                                 "chromium-sandbox")
            out = subprocess.run([sandbox.executable, "--no-sandbox", "--headless"],
                                 capture_output=True, text=True, check=True, timeout=30).stdout
        finally:
            sandbox.cleanup()
    finally:
        subprocess.run(["rm", "-rf", str(folder)], check=True)
    lines = out.splitlines()
    assert lines[0] == str(DEFAULT_UID)
    env = dict(line[4:].split("=", 1) for line in lines if line.startswith("ENV "))
    assert "TOOLDECK_TEST_SECRET" not in env and env["HOME"] == sandbox.profile_dir
    assert [line[4:] for line in lines if line.startswith("ARG ")] == [
        f"--user-data-dir={sandbox.profile_dir}", "--headless"]
    assert not os.path.exists(sandbox.root)


def _browser_dirs() -> set[str]:
    return {n for n in os.listdir(tempfile.gettempdir()) if n.startswith("tooldeck-browser-")}


def test_an_unavailable_boundary_fails_closed(tmp_path, no_sandbox_env):
    chromium = find_executable()
    before = _browser_dirs()
    for bwrap in (str(tmp_path / "no-such-bwrap"), "/bin/false"):
        with pytest.raises(ToolFailure) as info:
            prepare_sandbox(chromium, "bwrap", bwrap=bwrap)
        assert info.value.code == "EXECUTION_ERROR" and info.value.details["sandbox"] == "bwrap"
        assert "does not start without it" in info.value.message
        assert 'sandbox = "none"' in (info.value.suggestion or "")
    if AS_ROOT:
        with pytest.raises(ToolFailure) as info:
            prepare_sandbox(chromium, "user", setpriv=str(tmp_path / "no-setpriv"))
        assert "setpriv" in info.value.message
    with pytest.raises(ToolFailure):
        prepare_sandbox(chromium, "sometimes")
    assert _browser_dirs() == before  # nothing left behind


async def test_the_tools_fail_closed_and_auto_reports_its_fallback(
    site, allow_loopback, no_sandbox_env, alone, tmp_path, monkeypatch
):
    # bubblewrap that always fails: "bwrap" must refuse to start the browser at all, "auto"
    # must fall back to the unprivileged uid + Chromium's sandbox and say why.
    eng = _engine.BrowserEngine(prepare=functools.partial(prepare_sandbox, bwrap="/bin/false"))
    monkeypatch.setattr(_engine, "_ENGINE", eng)
    try:
        async with make_deck(config={"browser": {"sandbox": "bwrap"}},
                             load_entry_points=ENTRY_POINTS) as deck:
            refused = await _session(deck, tmp_path).call("browser_navigate",
                                                          {"url": site.url("/")})
        assert refused.error.code == "EXECUTION_ERROR"
        assert "sandbox (bwrap)" in refused.error.message
        assert refused.error.details["sandbox"] == "bwrap"
        assert eng.launches == 0 and chromium_processes() == []  # no unsandboxed fallback
        async with make_deck(config={"browser": {"sandbox": "auto"}},
                             load_entry_points=ENTRY_POINTS) as deck:
            result = await _session(deck, tmp_path).call("browser_navigate",
                                                         {"url": site.url("/")})
            assert result.success, result.error
            meta = result.metadata["browser_sandbox"]
            assert meta["mode"] == "user" and "bubblewrap not used" in meta["fallback"]
            _assert_sandboxed(chromium_processes())
    finally:
        await trio.to_thread.run_sync(eng.shutdown)


async def test_none_is_explicit_and_reported(
    site, allow_loopback, no_sandbox_env, alone, tmp_path
):
    async with make_deck(config={"browser": {"sandbox": "none"}},
                         load_entry_points=ENTRY_POINTS) as deck:
        session = _session(deck, tmp_path)
        result = await session.call("browser_navigate", {"url": site.url("/")})
        assert result.success, result.error
        meta = result.metadata["browser_sandbox"]
        assert meta["mode"] == "none" and meta["layers"] == [] and "unsandboxed" in meta["note"]
        closed = await session.call("browser_close", {"page_id": result.data["page_id"]})
        assert closed.metadata["browser_sandbox"]["mode"] == "none"
        main = next(p for p in chromium_processes() if p.type is None)
        if AS_ROOT:  # the opt-out really is the old behaviour
            assert main.uids[0] == 0 and "--no-sandbox" in main.args
        # ... but for the memory cap, which the opt-out keeps where cgroups can be made.
        group = engine().sandbox.cgroup  # type: ignore[union-attr]
        if group is not None:
            assert meta["memory_mb"] == DEFAULT_MEMORY_MB and main.pid in group.members()
        else:
            assert meta["memory_mb"] is None and "no memory cap" in meta["memory_note"]
    async with make_deck(load_entry_points=ENTRY_POINTS) as deck:  # no setting: auto again
        result = await _session(deck, tmp_path).call("browser_navigate", {"url": site.url("/")})
        assert result.success, result.error and result.error.message
        assert result.metadata["browser_sandbox"]["mode"] in ("bwrap", "user")
        _assert_sandboxed(chromium_processes())


async def test_settings_are_validated(site, allow_loopback, no_sandbox_env, tmp_path,
                                      monkeypatch):
    for table in ({"sandbox": "off"}, {"uid": 0}, {"uid": "65534"}, {"sandbox": "auto",
                                                                     "sanbox": "none"}):
        with pytest.raises(ConfigError) as info:
            make_deck(config={"browser": table}, load_entry_points=ENTRY_POINTS)
        assert "browser" in str(info.value)
    # The environment wins over the configuration, and is checked as strictly.
    monkeypatch.setenv(ENV_SANDBOX, "None")
    assert requested_mode({"sandbox": "bwrap"}) == "none"
    monkeypatch.setenv(ENV_SANDBOX, "bogus")
    async with make_deck(load_entry_points=ENTRY_POINTS) as deck:
        result = await _session(deck, tmp_path).call("browser_navigate",
                                                      {"url": site.url("/")})
    assert result.error.code == "EXECUTION_ERROR" and ENV_SANDBOX in result.error.message
    monkeypatch.delenv(ENV_SANDBOX)
    assert requested_uid({}) == DEFAULT_UID and requested_uid({"uid": 1000}) == 1000
    monkeypatch.setenv(ENV_UID, "1234")
    assert requested_uid({"uid": 1000}) == 1234
    for bad in ("0", "-1", "1.5", "nobody", "4294967295"):
        monkeypatch.setenv(ENV_UID, bad)
        with pytest.raises(ToolFailure):
            requested_uid({})
    monkeypatch.delenv(ENV_UID)
    for bad_value in (0, True, 1.5):
        with pytest.raises(ToolFailure):
            requested_uid({"uid": bad_value})


class _Recorder(http.server.BaseHTTPRequestHandler):
    hits: list[str] = []

    def log_message(self, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        type(self).hits.append(self.path)
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()


async def test_a_host_port_allowance_opens_that_port_only(site, no_sandbox_env, tmp_path,
                                                          monkeypatch):
    monkeypatch.delenv("TOOLDECK_URL_ALLOW", raising=False)
    other = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Recorder)
    threading.Thread(target=other.serve_forever, daemon=True).start()
    _Recorder.hits = []
    other_port = other.server_address[1]
    try:
        async with make_deck(load_entry_points=ENTRY_POINTS) as deck:
            session = _session(deck, tmp_path,
                               attributes={"url_allow": f"127.0.0.1:{site.port}"})
            page = await session.call("browser_navigate",
                                      {"url": site.url(f"/img-port?port={other_port}")})
            assert page.success, page.error
            blocked = page.data.get("blocked_requests", [])
            assert any(b["host"] == "127.0.0.1" for b in blocked), blocked
            direct = await session.call("browser_navigate",
                                        {"url": f"http://127.0.0.1:{other_port}/"})
            assert direct.error.code == "URL_NOT_ALLOWED"
        assert _Recorder.hits == []  # the other port of the allowed host was never reached
    finally:
        other.shutdown()
        other.server_close()


def _peak_bytes(group: Any) -> int | None:
    """The most memory the group ever held (v1 ``memory.max_usage_in_bytes``, v2
    ``memory.peak``), or None where the kernel does not keep it."""
    base = group.dirs.get("memory") or group.dirs.get("unified")
    for name in ("memory.max_usage_in_bytes", "memory.peak"):
        try:
            return int(Path(base, name).read_text().split()[0])
        except (OSError, ValueError, IndexError):
            continue
    return None


async def test_a_page_over_the_memory_cap_is_killed_and_the_browser_goes_on(
    site, allow_loopback, no_sandbox_env, alone, tmp_path
):
    support = detect()
    if not support.available:  # never serve the hog to a browser without a cap
        pytest.skip(f"no cgroup for the cap here: {support.reason}")
    cap = 768
    async with make_deck(config={"browser": {"memory_mb": cap}},
                         load_entry_points=ENTRY_POINTS) as deck:
        session = _session(deck, tmp_path)
        plain = await session.call("browser_navigate", {"url": site.url("/")})
        assert plain.success, plain.error and plain.error.message  # the whole message
        assert plain.metadata["browser_sandbox"]["memory_mb"] == cap
        group = engine().sandbox.cgroup  # type: ignore[union-attr]
        assert group is not None and group.pids_max == PIDS_MAX
        # Every process of the browser was born in the cgroup (the launcher joins first).
        members = set(group.members())
        procs = chromium_processes()
        assert procs and all(p.pid in members for p in procs), (members, procs)
        hog = await session.call("browser_navigate", {"url": site.url("/memory-hog")})
        assert hog.success, hog.error
        with trio.fail_after(60):  # not a timing figure: without the cap it would take 8 GiB
            while True:
                probe = await session.call("browser_click", {"page_id": hog.data["page_id"],
                                                             "selector": "p"})
                if not probe.success:
                    break
                await trio.sleep(0.2)
        assert probe.error.code == "EXECUTION_ERROR", probe.error
        assert probe.error.details == {"crashed": True, "memory_limit_mb": cap}, probe.error
        assert "memory cap" in probe.error.message and "closed" in probe.error.message
        peak = _peak_bytes(group)
        assert peak is None or peak <= cap << 20, peak
        # The browser goes on: a new page loads and reads.
        again = await session.call("browser_navigate", {"url": site.url("/")})
        assert again.success and again.data["title"] == "Tooldeck Test Home", again.error
        dirs = list(group.dirs.values())
    await trio.to_thread.run_sync(engine().shutdown)
    assert not any(os.path.exists(d) for d in dirs)  # the cgroup went with the browser


def test_the_memory_cap_setting_is_checked_and_the_environment_wins(
    no_sandbox_env, monkeypatch
):
    assert requested_memory_mb({}) == DEFAULT_MEMORY_MB
    assert requested_memory_mb({"memory_mb": 0}) == 0  # no cap, by choice
    assert requested_memory_mb({"memory_mb": 4096}) == 4096
    for bad in (-1, True, 1.5, "lots", 1 << 40):
        with pytest.raises(ToolFailure) as info:
            requested_memory_mb({"memory_mb": bad})
        assert "memory_mb" in (info.value.suggestion or "")
    monkeypatch.setenv(ENV_MEMORY, "1024")
    assert requested_memory_mb({"memory_mb": 4096}) == 1024
    for bad_env in ("-5", "1g", "1.5", "99999999999"):
        monkeypatch.setenv(ENV_MEMORY, bad_env)
        with pytest.raises(ToolFailure):
            requested_memory_mb({})
    for table in ({"memory_mb": -1}, {"memory_mb": "2048"}, {"memory_mb": 2.5}):
        with pytest.raises(ConfigError) as config_info:
            make_deck(config={"browser": table}, load_entry_points=ENTRY_POINTS)
        assert "browser" in str(config_info.value)


def test_without_cgroups_the_browser_starts_uncapped_and_says_why(
    no_sandbox_env, monkeypatch
):
    chromium = find_executable()
    monkeypatch.setattr(_sandbox, "detect",
                        lambda: CgroupSupport("", reason="cgroup v1: no memory controller"))
    sandbox = prepare_sandbox(chromium, "user")
    try:
        assert sandbox.memory_mb is None and sandbox.cgroup is None
        meta = sandbox.metadata()
        assert meta["memory_mb"] is None
        assert meta["memory_note"] == "no memory cap: cgroup v1: no memory controller"
        assert "cgroup.procs" not in Path(sandbox.executable).read_text()
    finally:
        sandbox.cleanup()
    # memory_mb = 0 asks for no cap: no cgroup is made, and nothing is said to be missing.
    monkeypatch.setattr(_sandbox, "detect", lambda: pytest.fail("no cgroup was asked for"))
    uncapped = prepare_sandbox(chromium, "none", memory_mb=0)
    assert uncapped.executable == chromium and uncapped.metadata()["memory_mb"] is None
    assert "memory_note" not in uncapped.metadata()


def test_a_failed_launch_leaves_no_cgroup(no_sandbox_env, tmp_path):
    support = detect()
    if not support.available:
        pytest.skip(f"no cgroup here: {support.reason}")
    parents = list(support.parents.values())

    def ours() -> set[str]:
        return {os.path.normpath(os.path.join(p, n)) for p in parents for n in os.listdir(p)
                if n.startswith(f"tooldeck-browser-{os.getpid()}-")}

    before = ours()
    with pytest.raises(ToolFailure):  # bubblewrap that always fails, mode "bwrap"
        prepare_sandbox(find_executable(), "bwrap", bwrap="/bin/false")
    assert ours() == before
    sandbox = prepare_sandbox(find_executable(), "user", memory_mb=512)
    assert sandbox.cgroup is not None
    assert ours() == before | {os.path.normpath(d) for d in sandbox.cgroup.dirs.values()}
    text = Path(sandbox.executable).read_text()
    # The join comes first, before setpriv drops root: the launcher's first command.
    assert text.splitlines()[2].startswith("echo $$ > ") and "|| exit 125" in text
    sandbox.cleanup()
    assert ours() == before


def test_a_killed_decks_browser_cgroup_is_swept_at_the_next_launch(no_sandbox_env):
    support = detect()
    if not support.available:
        pytest.skip(f"no cgroup here: {support.reason}")
    gone = subprocess.Popen(["true"])
    gone.wait()  # a pid with no process: the deck that made the group was killed
    stale = [os.path.join(p, f"tooldeck-browser-{gone.pid}-0") for p in support.parents.values()]
    for path in stale:
        os.mkdir(path)
    sandbox = prepare_sandbox(find_executable(), "none", memory_mb=256)
    try:
        assert not any(os.path.exists(path) for path in stale)
        assert sandbox.cgroup is not None  # and its own group is there
        assert all(os.path.isdir(d) for d in sandbox.cgroup.dirs.values())
    finally:
        sandbox.cleanup()
        for path in stale:
            if os.path.exists(path):
                os.rmdir(path)
