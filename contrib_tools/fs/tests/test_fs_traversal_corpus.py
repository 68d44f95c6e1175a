"""Every line of every path-traversal corpus against file_read, list_dir and file_write.

Follows /work/shared/data/security/README.md: the canary lives in the test's own tmp dir, the
allowed root is three levels deep, ``{FILE}`` becomes the canary's path written relative to '/',
and writes run in bubblewrap with '/' read-only so that a broken guard cannot write outside the
test's tmp dir (lines without ``{FILE}`` aim at /etc/passwd, win.ini, ...).
"""

from __future__ import annotations

import collections
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from tooldeck_tools_fs import _safepath, file_read, file_write, list_dir

from tooldeck_hookspecs import ToolFailure


def _corpus_dir() -> Path:
    """$TOOLDECK_SECURITY_DATA, else shared/ beside the repository (as CI lays it out)."""
    repo = Path(__file__).resolve().parents[3]
    for candidate in (os.environ.get("TOOLDECK_SECURITY_DATA"),
                      repo.parent / "shared" / "data" / "security",
                      "/work/shared/data/security"):
        if candidate and Path(candidate).is_dir():
            return Path(candidate)
    return repo.parent / "shared" / "data" / "security"


CORPUS = _corpus_dir()
TRAVERSAL = CORPUS / "path-traversal"
CHILD = Path(__file__).with_name("fs_corpus_child.py")

pytestmark = pytest.mark.skipif(not TRAVERSAL.is_dir(), reason="security corpus not present")


def corpus_lines() -> list[tuple[str, str]]:
    """(file name, line) for every non-blank line of every corpus file (CRLF-safe)."""
    lines = []
    for path in sorted(TRAVERSAL.glob("*.txt")):
        for raw in path.read_text(encoding="utf-8").splitlines():
            line = raw.rstrip("\r\n")
            if line.strip():
                lines.append((path.name, line))
    return lines


def payloads(box, prefix: str = "") -> list[tuple[str, str]]:
    canary = box.canary_from_root()
    return [(name, prefix + line.replace("{FILE}", canary)) for name, line in corpus_lines()]


def escapes_lexically(allowed: Path, payload: str) -> bool:
    """True when the payload, taken literally, names something outside ``allowed``."""
    joined = os.path.normpath(os.path.join(str(allowed), payload.split("\x00")[0]))
    return not (joined == str(allowed) or joined.startswith(str(allowed) + os.sep))


def through_link(payload: str, prefix: str) -> bool:
    """True when ``prefix + payload`` still goes through the escaping symlink after lexical
    normalisation ('up/../x' cancels the link and is just 'x', inside the root)."""
    if not prefix:
        return False
    first = os.path.normpath(payload.split("\x00")[0]).split("/")[0]
    return first == prefix.rstrip("/")


def _summary(title: str, counts: dict[str, collections.Counter[str]]) -> str:
    total: collections.Counter[str] = collections.Counter()
    rows = [title]
    for name in sorted(counts):
        total.update(counts[name])
        rows.append(f"  {name:42s} " + ", ".join(f"{k}={v}" for k, v in sorted(
            counts[name].items())))
    rows.append(f"  {'TOTAL':42s} " + ", ".join(f"{k}={v}" for k, v in sorted(total.items())))
    return "\n".join(rows)


def _outcome(call, arguments, box) -> str:
    try:
        result = call(arguments, box.context)
    except ToolFailure as exc:
        assert box.marker not in repr(exc.__dict__)
        return "blocked" if exc.code == "PATH_NOT_ALLOWED" else f"error:{exc.code}"
    assert box.marker not in json.dumps(result, default=str)
    return "read_inside"


@pytest.mark.parametrize("prefix", ["", "up/", "abs/"])
def test_read_corpus_never_reaches_the_canary(sandbox, resolve_mode, prefix, record_property):
    box = sandbox
    # Symlinks inside the root that point out: the lexical check cannot see through them, so
    # these prefixes make the kernel (openat2) or the component walk do the refusing.
    os.symlink("..", box.allowed / "up")
    os.symlink("/", box.allowed / "abs")
    before = box.canary.read_bytes()
    counts: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
    for source, payload in payloads(box, prefix):
        counts[source]["tried"] += 1
        outcome = _outcome(file_read, {"path": payload}, box)
        counts[source][outcome] += 1
        if outcome != "blocked":
            # Whatever got through must be a literal name inside the root, not an escape.
            assert not escapes_lexically(box.allowed, payload), payload
            assert not through_link(payload, prefix), payload
        counts[source]["list:" + _outcome(list_dir, {"path": payload}, box)] += 1
    assert box.canary.read_bytes() == before
    summary = _summary(f"file_read/list_dir corpus [{resolve_mode}, prefix={prefix!r}]", counts)
    print("\n" + summary)  # shown with -s
    record_property("corpus_summary", summary)
    tried = sum(c["tried"] for c in counts.values())
    blocked = sum(c["blocked"] for c in counts.values())
    assert tried >= 2000
    if prefix:  # every payload that really goes through the escaping symlink is refused
        assert blocked == sum(through_link(p, prefix) or escapes_lexically(box.allowed, p)
                              for _, p in payloads(box, prefix))


def test_absolute_and_proc_payloads_are_all_refused(sandbox):
    for name in ("linux-sensitive-files.txt", "proc-self-fd-check.txt"):
        lines = [line for source, line in corpus_lines() if source == name]
        assert lines
        for line in lines:
            with pytest.raises(ToolFailure) as info:
                file_read({"path": line}, sandbox.context)
            assert info.value.code == "PATH_NOT_ALLOWED", line


def _bwrap() -> str | None:
    exe = shutil.which("bwrap")
    if exe is None:
        return None
    probe = subprocess.run([exe, "--ro-bind", "/", "/", "--dev", "/dev", "true"],
                           capture_output=True, check=False)
    return exe if probe.returncode == 0 else None


@pytest.mark.parametrize("prefix", ["", "up/"])
def test_write_corpus_never_writes_outside(sandbox, resolve_mode, prefix, record_property):
    box = sandbox
    bwrap = _bwrap()
    if bwrap is None:
        pytest.skip("bubblewrap is needed to run write payloads with '/' read-only")
    os.symlink("..", box.allowed / "up")
    before = box.canary.read_bytes()
    lines = payloads(box, prefix)
    payload_file = box.base / "payloads.json"
    payload_file.write_text(json.dumps(lines))
    outside_before = box.files_outside_allowed()
    # '/' read-only, only the test's tmp dir writable: even a broken guard cannot write to /etc.
    cmd = [bwrap, "--ro-bind", "/", "/", "--bind", str(box.base), str(box.base),
           "--dev", "/dev", "--proc", "/proc", "--unshare-all", "--die-with-parent",
           sys.executable, str(CHILD), str(box.base), resolve_mode, str(payload_file)]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    counts = {k: collections.Counter(v) for k, v in report["counts"].items()}
    summary = _summary(f"file_write corpus [{resolve_mode}, prefix={prefix!r}]", counts)
    print("\n" + summary)  # shown with -s
    record_property("corpus_summary", summary)
    assert report["escaped"] == []
    assert box.canary.read_bytes() == before
    assert box.files_outside_allowed() == outside_before  # no new file next to the canary
    assert not any(k.startswith("crash:") for c in counts.values() for k in c)
    tried = sum(c["tried"] for c in counts.values())
    assert tried == len(lines) >= 2000
    if prefix:
        assert sum(c["blocked"] for c in counts.values()) == sum(
            through_link(p, prefix) or escapes_lexically(box.allowed, p) for _, p in lines)
    else:
        # The absolute and /proc files are refused line by line.
        for name in ("linux-sensitive-files.txt", "proc-self-fd-check.txt"):
            assert counts[name]["blocked"] == counts[name]["tried"]
    if resolve_mode == "openat2":
        assert sum(v for k, v in report["stats"].items() if k.startswith("openat2")) > 0


def test_corpus_stays_under_tmp_even_when_writing_in_process(sandbox, resolve_mode):
    """Without bubblewrap: the {FILE} templates only, written in-process (safe per the README,
    they resolve under /tmp even if the guard fails)."""
    if _bwrap() is not None:
        pytest.skip("covered by test_write_corpus_never_writes_outside under bubblewrap")
    box = sandbox
    before = box.canary.read_bytes()
    outside_before = box.files_outside_allowed()
    blocked = tried = 0
    for source, payload in payloads(box):
        if source not in ("deep_traversal.txt", "traversals-8-deep-exotic-encoding.txt"):
            continue
        tried += 1
        try:
            file_write({"path": payload, "content": "x", "create_dirs": True}, box.context)
        except ToolFailure as exc:
            blocked += exc.code == "PATH_NOT_ALLOWED"
            continue
        assert not escapes_lexically(box.allowed, payload), payload
    assert box.canary.read_bytes() == before
    assert box.files_outside_allowed() == outside_before
    assert tried == 887 * 2 and blocked > 0


def test_stats_show_which_resolver_ran(sandbox, resolve_mode):
    (sandbox.allowed / "a.txt").write_text("hi")
    _safepath.STATS.clear()
    file_read({"path": "a.txt"}, sandbox.context)
    if resolve_mode == "openat2":
        assert _safepath.STATS["openat2"] == 1 and _safepath.STATS["walk"] == 0
    else:
        assert _safepath.STATS["walk"] == 1 and _safepath.STATS["openat2"] == 0
