"""The path guard: unit cases and the path-traversal corpora.

The corpus test follows the corpora README: ``{FILE}`` becomes a canary inside this test's own tmp
dir written relative to ``/``; the allowed root is three levels deep; a payload the guard lets
through is really written (as a file_write tool would), but only after an independent containment
check, so a guard bug can never write outside the tmp dir. Then the canary must be unchanged and
no file may have appeared outside ``allowed/``.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from tooldeck_policy import check_path, resolve_path

# $TOOLDECK_SECURITY_DATA, else shared/ beside the repository (how CI lays it out).
CORPUS = (
    Path(os.environ.get("TOOLDECK_SECURITY_DATA")
         or Path(__file__).resolve().parents[4] / "shared" / "data" / "security")
    / "path-traversal"
)
MARKER = "CANARY-7f3a9c"


def _lines(name: str) -> list[str]:
    text = (CORPUS / name).read_text(encoding="utf-8")
    return [line.rstrip("\r\n") for line in text.splitlines() if line.strip()]


@pytest.fixture
def root() -> Iterator[Path]:
    """``/tmp/pol-xxxx`` with ``allowed/`` (three levels, as the corpora README asks) and
    ``outside/``; pytest's own tmp_path is too deep for the ``..`` chains to overshoot to ``/``."""
    base = Path(tempfile.mkdtemp(prefix="pol-", dir="/tmp"))
    (base / "allowed").mkdir()
    (base / "outside").mkdir()
    yield base
    shutil.rmtree(base, ignore_errors=True)


def test_policy_relative_inside_is_allowed(root: Path) -> None:
    workdir = str(root / "allowed")
    assert check_path("notes/todo.txt", workdir) is None
    assert check_path("./a/../b.txt", workdir) is None
    assert check_path(str(root / "allowed" / "x.txt"), workdir) is None
    assert check_path("", workdir) is None  # the workdir itself


def test_policy_traversal_and_absolute_refused(root: Path) -> None:
    workdir = str(root / "allowed")
    reason = check_path("../outside/secret.txt", workdir)
    assert reason is not None
    assert "outside the allowed paths" in reason and "relative path" in reason
    assert check_path("/etc/passwd", workdir) is not None
    assert check_path("a/../../outside", workdir) is not None


def test_policy_containment_is_by_components_not_prefix(root: Path) -> None:
    (root / "allowedshop").mkdir()
    workdir = str(root / "allowed")
    assert check_path(str(root / "allowedshop" / "x"), workdir) is not None
    assert check_path("../allowedshop/x", workdir) is not None


def test_policy_nul_and_tilde_and_types(root: Path) -> None:
    workdir = str(root / "allowed")
    assert "NUL" in (check_path("a\x00.txt", workdir) or "")
    assert check_path("~/.ssh/id_rsa", workdir) is not None
    assert check_path(42, workdir) is not None
    assert check_path("a.txt", "relative/workdir") is not None


def test_policy_symlink_out_caught_for_missing_file(root: Path) -> None:
    workdir = root / "allowed"
    (workdir / "escape").symlink_to(root / "outside")
    # The file does not exist yet, the link on its prefix does.
    reason = check_path("escape/new.txt", str(workdir))
    assert reason is not None and str(root / "outside" / "new.txt") in reason
    (workdir / "inner").mkdir()
    (workdir / "ok").symlink_to(workdir / "inner")
    assert check_path("ok/new.txt", str(workdir)) is None


@pytest.mark.parametrize(
    "spelling",
    [
        "missing/../escape/new.txt",
        "missing/../escape/secret.txt",
        "a/b/../../escape/new.txt",
        "missing/./../escape",
        "missing/../inner/../escape/x",
        "inner/missing/../../escape/new.txt",
        "missing/../missing2/../escape/x",
    ],
)
def test_policy_link_after_dotdot_out_of_a_missing_folder_is_followed(
    root: Path, spelling: str
) -> None:
    # The kernel refuses 'missing/../x' (ENOENT), but a tool that normalises the path first
    # (os.path.abspath, pathlib's resolve(strict=False)) reaches the link and follows it.
    workdir = root / "allowed"
    (workdir / "inner").mkdir()
    (workdir / "escape").symlink_to(root / "outside")
    (root / "outside" / "secret.txt").write_text(MARKER)
    reason = check_path(spelling, str(workdir))
    assert reason is not None and "outside the allowed paths" in reason, spelling
    assert resolve_path(str(workdir / spelling))[0].startswith(str(root / "outside"))


def test_policy_dotdot_out_of_a_missing_folder_stays_lexical_below_missing(root: Path) -> None:
    workdir = root / "allowed"
    (workdir / "inner").mkdir()
    assert check_path("missing/../inner/new.txt", str(workdir)) is None
    assert check_path("a/b/../c/new.txt", str(workdir)) is None
    assert resolve_path(str(workdir / "a" / "b" / ".." / "c"))[0] == str(workdir / "a" / "c")


def test_policy_symlink_chain_and_dotdot_after_link(root: Path) -> None:
    workdir = root / "allowed"
    (workdir / "deep" / "er").mkdir(parents=True)
    (workdir / "l1").symlink_to("deep/er")
    # l1/.. is deep (kernel semantics), still inside; l1/../../.. is outside.
    assert check_path("l1/../x", str(workdir)) is None
    assert resolve_path(str(workdir / "l1" / ".." / "x"))[0] == str(workdir / "deep" / "x")
    assert check_path("l1/../../../x", str(workdir)) is not None


def test_policy_symlink_loop_refused(root: Path) -> None:
    workdir = root / "allowed"
    (workdir / "a").symlink_to("b")
    (workdir / "b").symlink_to("a")
    assert "cannot be resolved" in (check_path("a/x", str(workdir)) or "")


def test_policy_proc_magic_links_refused_even_when_allowed(root: Path) -> None:
    workdir = str(root / "allowed")
    everything = ["/"]
    for path in (
        "/proc/self/root/etc/hostname",
        "/proc/self/cwd",
        "/proc/self/fd/0",
        "/proc/1/environ",
        "/proc/thread-self/root",
        "/proc/self/task/1/cwd",
        "/dev/fd/0",
        "/dev/stdin",
    ):
        reason = check_path(path, workdir, everything)
        assert reason is not None and "process link" in reason, path
    # A link inside the workdir to a magic link is caught through the resolution.
    (root / "allowed" / "sneaky").symlink_to("/proc/self/root")
    assert "process link" in (check_path("sneaky/etc/passwd", workdir, everything) or "")
    assert check_path("/proc/cpuinfo", workdir, everything) is None


def test_policy_allowed_path_templates(root: Path) -> None:
    workdir = str(root / "allowed")
    shared = root / "outside"
    assert check_path(str(shared / "f"), workdir, ["{workdir}", str(shared)]) is None
    assert check_path(str(shared / "f"), workdir, ["{workdir}/sub"]) is not None
    assert check_path(str(root / "allowed" / "sub" / "f"), workdir, ["{workdir}/sub"]) is None
    assert check_path(os.path.join(tempfile.gettempdir(), "x"), workdir, ["{tmp}"]) is None
    assert check_path(os.path.expanduser("~/x"), workdir, ["{home}"]) is None
    # An unknown placeholder allows nothing.
    assert check_path("x", workdir, ["{nope}"]) is not None


def test_policy_decodes_nothing(root: Path) -> None:
    workdir = str(root / "allowed")
    # Taken literally these are file names inside the root.
    for name in ("%2e%2e%2fetc%2fpasswd", "..%c0%af..%c0%afetc", "%252e%252e/x", "..\\..\\win.ini"):
        assert check_path(name, workdir) is None, name


@pytest.mark.parametrize(
    "name",
    [
        "directory_traversal.txt",
        "deep_traversal.txt",
        "traversals-8-deep-exotic-encoding.txt",
        "lfi-simple-check.txt",
    ],
)
def test_policy_traversal_corpus(root: Path, name: str) -> None:
    allowed = root / "allowed"
    canary = root / "outside" / "canary.txt"
    canary.write_text(MARKER)
    relative_canary = str(canary).lstrip("/")
    payloads = [line.replace("{FILE}", relative_canary) for line in _lines(name)]
    blocked = written = 0
    started = time.perf_counter()
    for payload in payloads:
        reason = check_path(payload, str(allowed))
        if reason is not None:
            blocked += 1
            continue
        target = os.path.realpath(os.path.join(allowed, payload))
        # Independent check before touching the disk.
        assert Path(target).is_relative_to(allowed), f"guard let {payload!r} out to {target}"
        try:
            os.makedirs(os.path.dirname(target), exist_ok=True)
            with open(target, "a", encoding="utf-8") as handle:
                handle.write("payload")
            written += 1
        except OSError:  # a directory, a too-long name: the tool would fail too
            pass
    per_call_us = (time.perf_counter() - started) / len(payloads) * 1e6
    assert canary.read_text() == MARKER
    outside = [p for p in root.rglob("*") if not p.is_relative_to(allowed)]
    assert sorted(outside) == sorted([root / "outside", canary])
    print(
        f"\n[policy] {name}: tried {len(payloads)}, refused {blocked}, "
        f"allowed as literal names inside the root {len(payloads) - blocked} "
        f"(written {written}), {per_call_us:.0f} us per check incl. writes"
    )


@pytest.mark.parametrize("name", ["linux-sensitive-files.txt", "proc-self-fd-check.txt"])
def test_policy_sensitive_files_all_refused(root: Path, name: str) -> None:
    payloads = _lines(name)
    refused = [p for p in payloads if check_path(p, str(root / "allowed")) is not None]
    print(f"\n[policy] {name}: tried {len(payloads)}, refused {len(refused)}")
    assert len(refused) == len(payloads)
