"""The sandbox boundary around Chromium: an unprivileged uid, Chromium's own sandbox, bubblewrap.

The model picks the pages the browser renders, so the browser is the most exposed process of a
deck. Chromium's own sandbox (a user + pid + network namespace per renderer, plus seccomp-bpf)
is what browser vendors rely on, but it refuses to start as root, and the pack used to launch it
as root with ``--no-sandbox``. Now Playwright launches a small generated launcher script instead
of Chromium (``executable_path``); the launcher

1. drops every argument that would weaken Chromium's sandbox (``--no-sandbox``, ``--no-zygote``,
   ``--single-process``, ... in any spelling Chromium accepts: one or two dashes, ``=value``);
2. replaces Playwright's root-owned profile folder by one owned by the browser's uid;
3. clears the environment (no host secrets reach the browser);
4. when running as root, drops to an unprivileged uid/gid with ``setpriv`` (no supplementary
   groups, no capabilities, ``no_new_privs``);
5. in ``bwrap`` mode, enters bubblewrap (new user, pid, ipc, uts and cgroup namespaces; the
   network is shared because the guarding proxy listens on the host's 127.0.0.1): ``/usr`` and
   ``/etc`` read-only, a private ``/tmp`` and ``/dev/shm``, the profile folder, nothing of
   ``/root``, ``/home`` or the workdirs;
6. execs Chromium with its own namespace sandbox on (Playwright is told ``chromium_sandbox``).

Playwright's pipe (fds 3 and 4) survives every ``exec`` on the way, so nothing else changes:
screenshots still come back over the pipe and are written by the pack (:mod:`._files`).

Modes (``[tool.tooldeck.browser] sandbox = ...``, or ``TOOLDECK_BROWSER_SANDBOX``):

``auto`` (default)
    ``bwrap`` when bubblewrap works here, else ``user``; the result metadata says which, and why
    bubblewrap was not used.
``bwrap``
    all layers; fails closed when bubblewrap or user namespaces are missing.
``user``
    unprivileged uid + Chromium's sandbox, no bubblewrap; fails closed without user namespaces.
``none``
    the old behaviour (Chromium started directly, ``--no-sandbox`` when root): an explicit
    opt-out for hosts that cannot do better. Reported as such in every result.

The uid (``[tool.tooldeck.browser] uid``, or ``TOOLDECK_BROWSER_UID``; default 65534, ``nobody``)
matters only when tooldeck runs as root; otherwise Chromium keeps tooldeck's own uid. ``nobody`` is
shared by other daemons on many hosts: give the browser a uid of its own where that matters (its
profile folder is readable by that uid).

**Memory and threads.** Chromium and every process it starts (renderers, GPU, network service)
share one cgroup beneath the deck's own, with ``memory_mb`` (``[tool.tooldeck.browser]``, or
``TOOLDECK_BROWSER_MEMORY_MB``; default 2048, 0 for none) and a cap on processes and threads.
Without it a page's script could take every byte of the host (``new Uint8Array(512 << 20)``
eight times took 4 GB in seconds). Over the cap the
kernel kills a process of the browser, a renderer first (Chromium marks them so): that page is
reported crashed (``details.memory_limit_mb``) and the others go on. Where no cgroup can be made
(not root, no cgroup controllers) the browser starts without the cap and every result's
``metadata["browser_sandbox"]["memory_note"]`` says why.

Before each launch a probe runs the exact launcher prefix on ``unshare --user --pid --net
--fork true`` (what Chromium's zygote does), so a missing kernel feature is a clear structured
error (``EXECUTION_ERROR`` with ``details.sandbox``) rather than a browser that dies at start. It
costs about 40 ms per launch (not per call: one browser serves the process).
"""

from __future__ import annotations

import os
import shlex
import shutil
import stat
import subprocess
import tempfile
import time
from collections.abc import Mapping
from typing import Any

import attrs

from tooldeck_hookspecs import ErrorCode, ToolFailure, host_which
from tooldeck_hookspecs.cgroups import BROWSER_PREFIX, Cgroup, detect, remove_stale

from ._limits import SANDBOX_MODES

__all__ = [
    "DEFAULT_MEMORY_MB",
    "DEFAULT_UID",
    "ENV_MEMORY",
    "ENV_SANDBOX",
    "ENV_UID",
    "PIDS_MAX",
    "SANDBOX_MODES",
    "WEAKENING_SWITCHES",
    "BrowserSandbox",
    "configure_sandbox",
    "prepare_sandbox",
    "requested_memory_mb",
    "requested_mode",
    "requested_uid",
]

#: Environment variable choosing the sandbox mode (wins over the configuration).
ENV_SANDBOX = "TOOLDECK_BROWSER_SANDBOX"
#: Environment variable choosing the uid Chromium runs as when tooldeck runs as root.
ENV_UID = "TOOLDECK_BROWSER_UID"
#: Environment variable setting the browser's memory cap in MiB (wins over the configuration).
ENV_MEMORY = "TOOLDECK_BROWSER_MEMORY_MB"
#: ``nobody`` on Debian; its group ``nogroup`` has the same number.
DEFAULT_UID = 65534
#: The memory of Chromium and all its processes together, in MiB: a few busy sessions of five
#: pages each fit; one page's script cannot take the host's memory.
DEFAULT_MEMORY_MB = 2048
#: Processes and threads of the browser together (the pids controller counts threads): a
#: renderer runs about 20, so 32 sessions of five pages fit. A backstop: a page creating 6,000
#: Web Workers peaked at 524 tasks (Chromium runs few at once).
PIDS_MAX = 4096
#: The largest cap the setting takes (1 TiB): above that it is a typo, not a cap.
_MAX_MEMORY_MB = 1 << 20

#: Chromium switches that switch a sandbox layer off or run code outside it. The launcher
#: removes them whatever passed them (Playwright adds ``--no-sandbox`` unless told otherwise).
WEAKENING_SWITCHES = (
    "no-sandbox",
    "no-zygote",
    "single-process",
    "in-process-gpu",
    "disable-namespace-sandbox",
    "disable-seccomp-filter-sandbox",
    "disable-setuid-sandbox",
    "disable-gpu-sandbox",
    "no-zygote-sandbox",
    "renderer-cmd-prefix",
    "utility-cmd-prefix",
    "gpu-launcher",
    "browser-subprocess-path",
    "zygote-cmd-prefix",
    "allow-sandbox-debugging",
    "remote-debugging-port",
    "remote-debugging-address",
    "user-data-dir",
    # Not sandbox layers, but they let one page read another site's data.
    "disable-web-security",
    "disable-site-isolation-trials",
    # Debian's /usr/bin/chromium wrapper: gdb with --single-process, and a profile of its own.
    "debug",
    "g",
    "temp-profile",
)

_PROBE_TIMEOUT_S = 10.0

_configured_mode: str | None = None
_configured_uid: int | None = None
_configured_memory_mb: int | None = None


def configure_sandbox(
    *, mode: str | None = None, uid: int | None = None, memory_mb: int | None = None
) -> None:
    """Set the sandbox mode, uid and memory cap (MiB, 0 for none) programmatically (the
    environment and configuration win)."""
    global _configured_mode, _configured_uid, _configured_memory_mb
    if mode is not None:
        _check_mode(mode, "configure_sandbox(mode=...)")
    if memory_mb is not None:
        _check_memory(memory_mb, "configure_sandbox(memory_mb=...)")
    _configured_mode, _configured_uid, _configured_memory_mb = mode, uid, memory_mb


def _whole_number(raw: object) -> int:
    """``raw`` as a whole number (an int, or a string of digits from the environment), else -1.

    Only whole numbers: int() would also take 1.9 or True and turn them into some value."""
    if isinstance(raw, str) and raw.strip().isdigit():
        return int(raw.strip())
    if isinstance(raw, int) and not isinstance(raw, bool):
        return raw
    return -1


def _check_memory(raw: object, where: str) -> int:
    value = _whole_number(raw)
    if not 0 <= value <= _MAX_MEMORY_MB:
        raise ToolFailure(
            ErrorCode.EXECUTION_ERROR,
            f"the browser memory cap {raw!r} (from {where}) is not a number of MiB between 0 "
            f"(no cap) and {_MAX_MEMORY_MB}",
            suggestion="Tell the user to fix [tool.tooldeck.browser] memory_mb (or "
            f"{ENV_MEMORY}); the browser does not start with it.",
        )
    return value


def requested_memory_mb(settings: Mapping[str, Any] | None) -> int:
    """The memory cap asked for, in MiB (0: none): ``TOOLDECK_BROWSER_MEMORY_MB``, the
    plugin's settings, :func:`configure_sandbox`, :data:`DEFAULT_MEMORY_MB`."""
    env = os.environ.get(ENV_MEMORY)
    if env:
        return _check_memory(env, ENV_MEMORY)
    value = (settings or {}).get("memory_mb")
    if value is not None:
        return _check_memory(value, "[tool.tooldeck.browser] memory_mb")
    if _configured_memory_mb is not None:
        return _configured_memory_mb
    return DEFAULT_MEMORY_MB


def _check_mode(mode: object, where: str) -> str:
    if not isinstance(mode, str) or mode.strip().lower() not in SANDBOX_MODES:
        raise ToolFailure(
            ErrorCode.EXECUTION_ERROR,
            f"the browser sandbox mode {mode!r} (from {where}) is not one of "
            + ", ".join(SANDBOX_MODES),
            suggestion="Tell the user to fix the browser's sandbox setting; the browser does not "
            "start with an unknown sandbox mode.",
        )
    return mode.strip().lower()


def requested_mode(settings: Mapping[str, Any] | None) -> str:
    """The mode asked for: ``TOOLDECK_BROWSER_SANDBOX``, the plugin's settings, configure, auto."""
    env = os.environ.get(ENV_SANDBOX)
    if env:
        return _check_mode(env, ENV_SANDBOX)
    value = (settings or {}).get("sandbox")
    if value is not None:
        return _check_mode(value, "[tool.tooldeck.browser] sandbox")
    return _configured_mode or "auto"


def requested_uid(settings: Mapping[str, Any] | None) -> int:
    """The uid Chromium runs as when tooldeck is root (never 0)."""
    # Explicit None checks: ``uid = 0`` is a mistake to report, not a reason to use the default.
    raw: Any = os.environ.get(ENV_UID) or None
    if raw is None:
        raw = (settings or {}).get("uid")
    if raw is None:
        raw = _configured_uid
    if raw is None:
        return DEFAULT_UID
    uid = _whole_number(raw)
    if not 0 < uid < 2**32 - 1:  # 2**32 - 1 is (uid_t) -1, "no uid"
        raise ToolFailure(
            ErrorCode.EXECUTION_ERROR,
            f"the browser uid {raw!r} is not a non-root uid",
            suggestion="Tell the user to set [tool.tooldeck.browser] uid (or TOOLDECK_BROWSER_UID)"
            " to an unprivileged uid such as 65534.",
        )
    return uid


@attrs.frozen
class BrowserSandbox:
    """The boundary a launched browser runs in, and the files that set it up."""

    #: The mode asked for (``auto``, ``bwrap``, ``user`` or ``none``).
    requested: str
    #: The mode in use: ``bwrap``, ``user`` or ``none``.
    mode: str
    #: The layers in use, outermost first, e.g. ``("unprivileged-uid", "bubblewrap",
    #: "chromium-sandbox")``; empty for ``none``.
    layers: tuple[str, ...]
    #: The uid Chromium runs as.
    uid: int
    #: What Playwright launches (the generated launcher, or Chromium itself for ``none``).
    executable: str
    #: The Chromium behind the launcher.
    chromium: str
    #: The private folder of this launch (launcher and profile), removed by :meth:`cleanup`.
    root: str | None = None
    #: The browser profile folder, owned by :attr:`uid`.
    profile_dir: str | None = None
    #: Why ``auto`` did not get every layer (None when it did, or for an explicit mode).
    fallback: str | None = None
    #: The memory cap in force for the browser's processes together, in MiB (None: no cap).
    memory_mb: int | None = None
    #: Why there is no memory cap although one was asked for.
    memory_note: str | None = None
    #: The cgroup holding every process of the browser (None without a cap).
    cgroup: Cgroup | None = attrs.field(default=None, repr=False)

    @property
    def chromium_sandbox(self) -> bool:
        """Whether Playwright must leave Chromium's own sandbox on."""
        return self.mode != "none"

    def metadata(self) -> dict[str, Any]:
        """What results report in ``metadata["browser_sandbox"]``."""
        out: dict[str, Any] = {"mode": self.mode, "requested": self.requested,
                               "layers": list(self.layers), "uid": self.uid}
        if self.fallback:
            out["fallback"] = self.fallback
        out["memory_mb"] = self.memory_mb
        if self.memory_note:
            out["memory_note"] = self.memory_note
        if self.mode == "none":
            # Said in words too: a reader of a log should not have to know what "none" implies.
            out["note"] = ("unsandboxed: Chromium runs without its own sandbox"
                           + (" (--no-sandbox), as root" if self.uid == 0 else "")
                           + ", by the explicit setting sandbox = \"none\"")
        return out

    def oom_kills(self) -> int:
        """How many of the browser's processes the kernel killed at the memory cap so far."""
        return self.cgroup.oom_kills() if self.cgroup is not None else 0

    def cleanup(self) -> None:
        """Remove the launch's private folder and cgroup (after the browser has exited; any
        process of it still there is killed)."""
        if self.cgroup is not None:
            _remove_cgroup(self.cgroup)
        if self.root:
            shutil.rmtree(self.root, ignore_errors=True)


def _remove_cgroup(group: Cgroup, timeout_s: float = 5.0) -> None:
    # On cgroup v1 there is no atomic kill: kill what is there until the group is empty, which
    # converges (a process being killed cannot fork). Bounded: a group that will not empty is
    # left for the next deck's stale sweep rather than holding up a close.
    deadline = time.monotonic() + timeout_s
    while not group.remove():
        if time.monotonic() > deadline:
            return
        group.kill()
        time.sleep(0.02)


def _launcher_prefix(
    mode: str, uid: int, profile: str, *, setpriv: str | None, bwrap: str | None
) -> list[str]:
    """The argv that runs a program as the sandboxed browser would be run (without Chromium)."""
    env = host_which("env") or "/usr/bin/env"
    prefix = [env, "-i", "PATH=/usr/bin:/bin", f"HOME={profile}",
              f"XDG_CONFIG_HOME={profile}/.config", f"XDG_CACHE_HOME={profile}/.cache",
              "LANG=C.UTF-8"]
    if setpriv is not None:
        # no_new_privs and an empty bounding set: nothing the browser runs can regain root.
        prefix += [setpriv, f"--reuid={uid}", f"--regid={uid}", "--clear-groups",
                   "--inh-caps=-all", "--bounding-set=-all", "--no-new-privs", "--"]
    if mode == "bwrap":
        assert bwrap is not None
        prefix += [bwrap, "--unshare-user", "--unshare-pid", "--unshare-ipc", "--unshare-uts",
                   "--unshare-cgroup-try", "--share-net", "--die-with-parent", "--new-session",
                   "--ro-bind", "/usr", "/usr", "--ro-bind", "/etc", "/etc"]
        for top in ("bin", "sbin", "lib", "lib32", "lib64", "libx32"):
            host = "/" + top
            if os.path.islink(host):
                prefix += ["--symlink", os.readlink(host), host]
            elif os.path.isdir(host):
                prefix += ["--ro-bind", host, host]
        prefix += ["--ro-bind-try", "/var/cache/fontconfig", "/var/cache/fontconfig",
                   "--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp", "--tmpfs", "/dev/shm",
                   "--bind", profile, profile, "--chdir", profile, "--"]
    return prefix


def _any_case(name: str) -> str:
    # Chromium on Linux reads switch names case-sensitively; matching every case costs nothing
    # and leaves no doubt (nor a future platform change) to rely on.
    return "".join(f"[{c.lower()}{c.upper()}]" if c.isalpha() else c for c in name)


def _switch_patterns() -> str:
    # Chromium accepts "-switch" as well as "--switch", each with or without "=value".
    patterns = []
    for name in WEAKENING_SWITCHES:
        spelled = _any_case(name)
        patterns += [f"-{spelled}", f"--{spelled}", f"-{spelled}=*", f"--{spelled}=*"]
    return "|".join(patterns)


def _join_lines(procs_files: list[str]) -> str:
    # First, before anything else runs (and while still root, before setpriv): everything the
    # launcher starts is born in the cgroup. A failed join starts nothing (exit 125).
    return "".join(f"echo $$ > {shlex.quote(path)} || exit 125\n" for path in procs_files)


def _launcher_script(
    prefix: list[str], chromium: str, profile: str, procs_files: list[str] | None = None
) -> str:
    command = " ".join(shlex.quote(part) for part in [*prefix, chromium])
    return (
        "#!/bin/sh\n"
        "# Generated by tooldeck-tools-browser: runs Chromium inside its sandbox boundary.\n"
        + _join_lines(procs_files or [])
        + "# Arguments that would weaken the sandbox are dropped, whoever passed them.\n"
        'for arg do\n  shift\n  case "$arg" in\n'
        f"    {_switch_patterns()}) ;;\n"
        '    *) set -- "$@" "$arg" ;;\n  esac\ndone\n'
        f'exec {command} --user-data-dir={shlex.quote(profile)} "$@"\n'
    )


def _plain_launcher_script(chromium: str, procs_files: list[str]) -> str:
    """The launcher of ``sandbox = "none"`` with a memory cap: joins the cgroup, runs Chromium
    with the arguments as given."""
    return (
        "#!/bin/sh\n"
        "# Generated by tooldeck-tools-browser: runs Chromium under its memory cap.\n"
        + _join_lines(procs_files)
        + f'exec {shlex.quote(chromium)} "$@"\n'
    )


def _memory_cgroup(memory_mb: int) -> tuple[Cgroup | None, str | None]:
    """A cgroup capped at ``memory_mb`` MiB and :data:`PIDS_MAX` tasks, or None and why not."""
    if memory_mb <= 0:
        return None, None
    support = detect()
    if not support.available:
        return None, f"no memory cap: {support.reason}"
    remove_stale(support)  # a killed deck's browser group, empty since
    try:
        group = support.create(pids_max=PIDS_MAX, prefix=BROWSER_PREFIX)
    except OSError as exc:
        return None, f"no memory cap: cannot create a cgroup: {exc.strerror or exc}"
    try:
        group.set_memory(memory_mb << 20)
    except OSError as exc:
        _remove_cgroup(group)
        return None, f"no memory cap: cannot set it: {exc.strerror or exc}"
    return group, None


def _write_launcher(root: str, text: str) -> str:
    launcher = os.path.join(root, "launch-chromium")
    fd = os.open(launcher, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o700)
    with os.fdopen(fd, "w") as out:
        out.write(text)
    os.chmod(launcher, stat.S_IRWXU)
    return launcher


def _probe(prefix: list[str]) -> str | None:
    """Run what Chromium's zygote needs (new user, pid and net namespaces) under ``prefix``;
    the reason it fails, or None."""
    unshare = host_which("unshare")
    if unshare is None:  # no util-linux: Chromium's own start-up check is the only one left
        return None
    try:
        done = subprocess.run([*prefix, unshare, "--user", "--pid", "--net", "--fork", "true"],
                              capture_output=True, timeout=_PROBE_TIMEOUT_S, check=False,
                              stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"{type(exc).__name__}: {exc}"
    if done.returncode != 0:
        text = (done.stderr or done.stdout).decode("utf-8", "replace").strip()
        return (text.splitlines()[-1] if text else f"exit status {done.returncode}")[:300]
    return None


def _sandbox_error(mode: str, why: str) -> ToolFailure:
    return ToolFailure(
        ErrorCode.EXECUTION_ERROR,
        f"the browser's sandbox ({mode}) cannot be set up on this machine: {why}; the browser "
        "does not start without it",
        suggestion="The browser tools cannot work here; tell the user (they need unprivileged "
        "user namespaces and bubblewrap, or may opt out with [tool.tooldeck.browser] sandbox = "
        "\"none\") and use another tool.",
        details={"sandbox": mode, "reason": why},
    )


def prepare_sandbox(
    chromium: str,
    mode: str,
    *,
    uid: int = DEFAULT_UID,
    bwrap: str | None = None,
    setpriv: str | None = None,
    memory_mb: int = DEFAULT_MEMORY_MB,
) -> BrowserSandbox:
    """Set up the boundary for one launch of ``chromium``: probe it, make its cgroup, write
    the launcher.

    Blocking (it runs the probe): call it from a worker thread. Raises ``ToolFailure``
    (``EXECUTION_ERROR``, ``details.sandbox``) when the mode asked for cannot be had.

    :param bwrap: the bubblewrap binary (default: ``bwrap`` on PATH).
    :param setpriv: the setpriv binary (default: ``setpriv`` on PATH); used only as root.
    :param memory_mb: the memory cap of the browser's processes together, in MiB (0: none).
        Where no cgroup can be made the browser starts without it and
        :attr:`BrowserSandbox.memory_note` says why.
    """
    mode = _check_mode(mode, "the browser sandbox mode")
    memory_mb = _check_memory(memory_mb, "the browser memory cap")
    group, memory_note = _memory_cgroup(memory_mb)
    capped = memory_mb if group is not None else None
    if mode == "none":
        if group is None:
            return BrowserSandbox(requested="none", mode="none", layers=(), uid=os.geteuid(),
                                  executable=chromium, chromium=chromium,
                                  memory_note=memory_note)
        root = tempfile.mkdtemp(prefix="tooldeck-browser-")
        try:
            launcher = _write_launcher(root, _plain_launcher_script(chromium,
                                                                    group.procs_files()))
        except BaseException:
            shutil.rmtree(root, ignore_errors=True)
            _remove_cgroup(group)
            raise
        return BrowserSandbox(requested="none", mode="none", layers=(), uid=os.geteuid(),
                              executable=launcher, chromium=chromium, root=root,
                              memory_mb=capped, cgroup=group)
    try:
        return _prepare_sandboxed(chromium, mode, uid=uid, bwrap=bwrap, setpriv=setpriv,
                                  group=group, capped=capped, memory_note=memory_note)
    except BaseException:
        if group is not None:
            _remove_cgroup(group)
        raise


def _prepare_sandboxed(
    chromium: str,
    mode: str,
    *,
    uid: int,
    bwrap: str | None,
    setpriv: str | None,
    group: Cgroup | None,
    capped: int | None,
    memory_note: str | None,
) -> BrowserSandbox:
    as_root = os.geteuid() == 0
    if as_root:
        setpriv = setpriv or host_which("setpriv")
        if setpriv is None or not os.access(setpriv, os.X_OK):
            raise _sandbox_error(mode, "setpriv (util-linux) is not installed, so Chromium cannot "
                                 "drop root")
    else:
        setpriv, uid = None, os.geteuid()  # already unprivileged: nothing to drop
    bwrap = bwrap or host_which("bwrap")
    root = tempfile.mkdtemp(prefix="tooldeck-browser-")
    try:
        # The launch folder is root's (0711: the browser may pass through, not list it); the
        # profile inside belongs to the browser's uid alone.
        os.chmod(root, 0o711)
        profile = os.path.join(root, "profile")
        os.mkdir(profile, 0o700)
        if as_root:
            os.chown(profile, uid, uid)
        chosen, fallback = mode, None
        if mode in ("auto", "bwrap"):
            if bwrap is None or not os.access(bwrap, os.X_OK):
                problem: str | None = "bubblewrap (bwrap) is not installed"
            else:
                problem = _probe(_launcher_prefix("bwrap", uid, profile, setpriv=setpriv,
                                                  bwrap=bwrap))
            if problem is None:
                chosen = "bwrap"
            elif mode == "bwrap":
                raise _sandbox_error(mode, problem)
            else:
                chosen, fallback = "user", f"bubblewrap not used: {problem}"
        if chosen == "user":
            problem = _probe(_launcher_prefix("user", uid, profile, setpriv=setpriv, bwrap=None))
            if problem is not None:
                raise _sandbox_error(mode, "Chromium's namespace sandbox needs unprivileged user "
                                     f"namespaces: {problem}"
                                     + (f" ({fallback})" if fallback else ""))
        prefix = _launcher_prefix(chosen, uid, profile, setpriv=setpriv, bwrap=bwrap)
        launcher = _write_launcher(root, _launcher_script(
            prefix, chromium, profile, group.procs_files() if group is not None else None))
        layers = (("unprivileged-uid",) + (("bubblewrap",) if chosen == "bwrap" else ())
                  + ("chromium-sandbox",))
        return BrowserSandbox(requested=mode, mode=chosen, layers=layers, uid=uid,
                              executable=launcher, chromium=chromium, root=root,
                              profile_dir=profile, fallback=fallback,
                              memory_mb=capped, memory_note=memory_note, cgroup=group)
    except BaseException:
        shutil.rmtree(root, ignore_errors=True)
        raise
