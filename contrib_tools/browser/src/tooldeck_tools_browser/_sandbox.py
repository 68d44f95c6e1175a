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
from collections.abc import Mapping
from typing import Any

import attrs

from tooldeck_hookspecs import ErrorCode, ToolFailure, host_which

__all__ = [
    "DEFAULT_UID",
    "ENV_SANDBOX",
    "ENV_UID",
    "SANDBOX_MODES",
    "WEAKENING_SWITCHES",
    "BrowserSandbox",
    "configure_sandbox",
    "prepare_sandbox",
    "requested_mode",
    "requested_uid",
]

#: Environment variable choosing the sandbox mode (wins over the configuration).
ENV_SANDBOX = "TOOLDECK_BROWSER_SANDBOX"
#: Environment variable choosing the uid Chromium runs as when tooldeck runs as root.
ENV_UID = "TOOLDECK_BROWSER_UID"
#: ``nobody`` on Debian; its group ``nogroup`` has the same number.
DEFAULT_UID = 65534
SANDBOX_MODES = ("auto", "bwrap", "user", "none")

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


def configure_sandbox(*, mode: str | None = None, uid: int | None = None) -> None:
    """Set the sandbox mode and uid programmatically (the environment and configuration win)."""
    global _configured_mode, _configured_uid
    if mode is not None:
        _check_mode(mode, "configure_sandbox(mode=...)")
    _configured_mode, _configured_uid = mode, uid


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
    # Only whole numbers: int() would also take 1.9 or True and turn them into some uid.
    if isinstance(raw, str) and raw.strip().isdigit():
        uid = int(raw.strip())
    elif isinstance(raw, int) and not isinstance(raw, bool):
        uid = raw
    else:
        uid = -1
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
        if self.mode == "none":
            # Said in words too: a reader of a log should not have to know what "none" implies.
            out["note"] = ("unsandboxed: Chromium runs without its own sandbox"
                           + (" (--no-sandbox), as root" if self.uid == 0 else "")
                           + ", by the explicit setting sandbox = \"none\"")
        return out

    def cleanup(self) -> None:
        """Remove the launch's private folder (after the browser has exited)."""
        if self.root:
            shutil.rmtree(self.root, ignore_errors=True)


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


def _launcher_script(prefix: list[str], chromium: str, profile: str) -> str:
    command = " ".join(shlex.quote(part) for part in [*prefix, chromium])
    return (
        "#!/bin/sh\n"
        "# Generated by tooldeck-tools-browser: runs Chromium inside its sandbox boundary.\n"
        "# Arguments that would weaken the sandbox are dropped, whoever passed them.\n"
        'for arg do\n  shift\n  case "$arg" in\n'
        f"    {_switch_patterns()}) ;;\n"
        '    *) set -- "$@" "$arg" ;;\n  esac\ndone\n'
        f'exec {command} --user-data-dir={shlex.quote(profile)} "$@"\n'
    )


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
) -> BrowserSandbox:
    """Set up the boundary for one launch of ``chromium``: probe it, write the launcher.

    Blocking (it runs the probe): call it from a worker thread. Raises ``ToolFailure``
    (``EXECUTION_ERROR``, ``details.sandbox``) when the mode asked for cannot be had.

    :param bwrap: the bubblewrap binary (default: ``bwrap`` on PATH).
    :param setpriv: the setpriv binary (default: ``setpriv`` on PATH); used only as root.
    """
    mode = _check_mode(mode, "the browser sandbox mode")
    if mode == "none":
        return BrowserSandbox(requested="none", mode="none", layers=(), uid=os.geteuid(),
                              executable=chromium, chromium=chromium)
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
        launcher = os.path.join(root, "launch-chromium")
        fd = os.open(launcher, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o700)
        with os.fdopen(fd, "w") as out:
            out.write(_launcher_script(prefix, chromium, profile))
        os.chmod(launcher, stat.S_IRWXU)
        layers = (("unprivileged-uid",) + (("bubblewrap",) if chosen == "bwrap" else ())
                  + ("chromium-sandbox",))
        return BrowserSandbox(requested=mode, mode=chosen, layers=layers, uid=uid,
                              executable=launcher, chromium=chromium, root=root,
                              profile_dir=profile, fallback=fallback)
    except BaseException:
        shutil.rmtree(root, ignore_errors=True)
        raise
