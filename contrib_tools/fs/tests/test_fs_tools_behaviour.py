"""file_read, file_write and list_dir: content, caps, atomicity, symlinks, odd names."""

from __future__ import annotations

import base64
import errno
import os

import pytest
from tooldeck_tools_fs import (
    DEFAULT_READ_BYTES,
    MAX_READ_BYTES,
    MAX_WRITE_BYTES,
    _safepath,
    definitions,
    file_read,
    file_write,
    list_dir,
    locate,
    open_beneath,
)
from tooldeck_tools_fs._safepath import Target

from tooldeck_hookspecs import ErrorCode, ToolContext, ToolFailure


def _fails(code: ErrorCode, call, arguments, context) -> ToolFailure:
    with pytest.raises(ToolFailure) as info:
        call(arguments, context)
    assert info.value.code == code, info.value.message
    return info.value


def _temp_files(directory) -> list[str]:
    return [n for n in os.listdir(directory) if n.startswith(".tooldeck-")]


# --- reading and writing -------------------------------------------------------------------


def test_write_then_read_text_roundtrip(sandbox, resolve_mode):
    ctx = sandbox.context
    out = file_write({"path": "notes/todo.txt", "content": "héllo\n", "create_dirs": True}, ctx)
    assert out == {"path": "notes/todo.txt", "bytes_written": 7, "created": True}
    got = file_read({"path": "notes/todo.txt"}, ctx)
    assert got["content"] == "héllo\n" and got["encoding"] == "utf-8"
    assert got["truncated"] is False and got["size"] == 7
    again = file_write({"path": "notes/todo.txt", "content": "bye"}, ctx)
    assert again["created"] is False
    assert (sandbox.allowed / "notes" / "todo.txt").read_text() == "bye"


def test_write_without_create_dirs_needs_the_parent(sandbox, resolve_mode):
    err = _fails(ErrorCode.EXECUTION_ERROR, file_write, {"path": "a/b/c.txt", "content": "x"},
                 sandbox.context)
    assert "create_dirs" in (err.suggestion or "")
    assert not (sandbox.allowed / "a").exists()


def test_binary_content_comes_back_as_base64(sandbox, resolve_mode):
    blob = bytes(range(256)) * 4
    (sandbox.allowed / "blob.bin").write_bytes(blob)
    got = file_read({"path": "blob.bin"}, sandbox.context)
    assert got["encoding"] == "base64" and base64.b64decode(got["content"]) == blob
    _fails(ErrorCode.EXECUTION_ERROR, file_read, {"path": "blob.bin", "encoding": "utf-8"},
           sandbox.context)
    # NUL bytes mean binary even when they decode as UTF-8.
    (sandbox.allowed / "nul.bin").write_bytes(b"abc\x00def")
    assert file_read({"path": "nul.bin"}, sandbox.context)["encoding"] == "base64"
    # Invalid UTF-8 text (latin-1) is returned faithfully too.
    (sandbox.allowed / "latin.txt").write_bytes("café".encode("latin-1"))
    got = file_read({"path": "latin.txt"}, sandbox.context)
    assert base64.b64decode(got["content"]) == "café".encode("latin-1")


def test_base64_write_roundtrip_and_bad_base64(sandbox, resolve_mode):
    blob = os.urandom(3000)
    ctx = sandbox.context
    out = file_write({"path": "r.bin", "content": base64.b64encode(blob).decode(),
                      "encoding": "base64"}, ctx)
    assert out["bytes_written"] == 3000
    assert (sandbox.allowed / "r.bin").read_bytes() == blob
    _fails(ErrorCode.INVALID_ARGUMENTS, file_write,
           {"path": "r.bin", "content": "not base64!", "encoding": "base64"}, ctx)
    assert (sandbox.allowed / "r.bin").read_bytes() == blob


def test_read_cap_truncates_explicitly_and_pages(sandbox):
    data = b"a" * (DEFAULT_READ_BYTES + 10)
    (sandbox.allowed / "big.txt").write_bytes(data)
    got = file_read({"path": "big.txt"}, sandbox.context)
    assert got["truncated"] is True and got["bytes_read"] == DEFAULT_READ_BYTES
    assert got["next_offset"] == DEFAULT_READ_BYTES and "offset=" in got["note"]
    rest = file_read({"path": "big.txt", "offset": got["next_offset"]}, sandbox.context)
    assert rest["content"] == "a" * 10 and rest["truncated"] is False
    _fails(ErrorCode.INVALID_ARGUMENTS, file_read,
           {"path": "big.txt", "max_bytes": MAX_READ_BYTES + 1}, sandbox.context)


def test_truncation_keeps_whole_utf8_characters(sandbox):
    (sandbox.allowed / "e.txt").write_text("é" * 10)  # 2 bytes each
    got = file_read({"path": "e.txt", "max_bytes": 5}, sandbox.context)
    assert got["encoding"] == "utf-8" and got["content"] == "éé"
    assert got["bytes_read"] == 4 and got["next_offset"] == 4 and got["truncated"] is True


def test_write_cap_refuses_before_touching_the_disk(sandbox, resolve_mode):
    ctx = sandbox.context
    (sandbox.allowed / "keep.txt").write_text("old")
    err = _fails(ErrorCode.TOO_LARGE, file_write,
                 {"path": "keep.txt", "content": "x" * (MAX_WRITE_BYTES + 1)}, ctx)
    assert err.details["limit_bytes"] == MAX_WRITE_BYTES
    # Multi-byte text: characters under the cap, bytes over it.
    _fails(ErrorCode.TOO_LARGE, file_write,
           {"path": "new.txt", "content": "é" * (MAX_WRITE_BYTES // 2 + 1)}, ctx)
    big = base64.b64encode(b"\0" * (MAX_WRITE_BYTES + 3)).decode()
    _fails(ErrorCode.TOO_LARGE, file_write,
           {"path": "new.bin", "content": big, "encoding": "base64"}, ctx)
    assert (sandbox.allowed / "keep.txt").read_text() == "old"
    assert not (sandbox.allowed / "new.txt").exists() and not (sandbox.allowed / "new.bin").exists()
    assert _temp_files(sandbox.allowed) == []
    # Exactly at the cap is fine.
    out = file_write({"path": "edge.txt", "content": "y" * MAX_WRITE_BYTES}, ctx)
    assert out["bytes_written"] == MAX_WRITE_BYTES


def test_directories_fifos_and_missing_files_are_clear_errors(sandbox, resolve_mode):
    ctx = sandbox.context
    (sandbox.allowed / "d").mkdir()
    assert "list_dir" in (_fails(ErrorCode.EXECUTION_ERROR, file_read, {"path": "d"}, ctx)
                          .suggestion or "")
    _fails(ErrorCode.EXECUTION_ERROR, file_read, {"path": "missing.txt"}, ctx)
    _fails(ErrorCode.EXECUTION_ERROR, file_write, {"path": "d", "content": "x"}, ctx)
    os.mkfifo(sandbox.allowed / "pipe")
    # O_NONBLOCK: the read must not hang waiting for a writer; the FIFO is refused.
    _fails(ErrorCode.EXECUTION_ERROR, file_read, {"path": "pipe"}, ctx)
    _fails(ErrorCode.EXECUTION_ERROR, file_write, {"path": "pipe", "content": "x"}, ctx)
    _fails(ErrorCode.EXECUTION_ERROR, list_dir, {"path": "missing"}, ctx)


def test_wrong_argument_types_are_invalid_arguments(sandbox):
    ctx = sandbox.context
    _fails(ErrorCode.INVALID_ARGUMENTS, file_read, {"path": 3}, ctx)
    _fails(ErrorCode.INVALID_ARGUMENTS, file_read, {}, ctx)
    _fails(ErrorCode.INVALID_ARGUMENTS, file_read, {"path": "a", "offset": -1}, ctx)
    _fails(ErrorCode.INVALID_ARGUMENTS, file_read, {"path": "a", "encoding": "latin-1"}, ctx)
    _fails(ErrorCode.INVALID_ARGUMENTS, file_write, {"path": "a", "content": 5}, ctx)
    _fails(ErrorCode.INVALID_ARGUMENTS, file_write, {"path": "a", "content": "\udcff"}, ctx)
    _fails(ErrorCode.INVALID_ARGUMENTS, list_dir, {"recursive": "yes"}, ctx)


# --- atomic writes -------------------------------------------------------------------------


def test_failed_rename_leaves_old_content_and_no_temp_file(sandbox, resolve_mode, monkeypatch):
    target = sandbox.allowed / "config.json"
    target.write_text('{"v": 1}')

    def broken_replace(*args, **kwargs):
        raise OSError(errno.EIO, "simulated crash during rename")

    monkeypatch.setattr(os, "replace", broken_replace)
    _fails(ErrorCode.EXECUTION_ERROR, file_write, {"path": "config.json", "content": '{"v": 2}'},
           sandbox.context)
    assert target.read_text() == '{"v": 1}'
    assert _temp_files(sandbox.allowed) == []


def test_write_keeps_file_mode(sandbox):
    target = sandbox.allowed / "script.sh"
    target.write_text("echo 1")
    target.chmod(0o750)
    file_write({"path": "script.sh", "content": "echo 2"}, sandbox.context)
    assert target.stat().st_mode & 0o777 == 0o750


# Killing a write (SIGKILL at every stage, and from outside): test_fs_tempfiles.py.


# --- symlinks and containment --------------------------------------------------------------


def test_symlinks_inside_the_root_work(sandbox, resolve_mode):
    a = sandbox.allowed
    (a / "real").mkdir()
    (a / "real" / "f.txt").write_text("inside")
    os.symlink("real", a / "rel_dir")
    os.symlink(str(a / "real" / "f.txt"), a / "abs_file")  # absolute, but inside the root
    os.symlink("real/new.txt", a / "dangling_in")
    ctx = sandbox.context
    assert file_read({"path": "rel_dir/f.txt"}, ctx)["content"] == "inside"
    assert file_read({"path": "abs_file"}, ctx)["content"] == "inside"
    assert [e["name"] for e in list_dir({"path": "rel_dir"}, ctx)["entries"]] == ["f.txt"]
    file_write({"path": "abs_file", "content": "through link"}, ctx)
    assert (a / "real" / "f.txt").read_text() == "through link"
    assert os.path.islink(a / "abs_file")  # the link is followed, not replaced
    file_write({"path": "dangling_in", "content": "created"}, ctx)
    assert (a / "real" / "new.txt").read_text() == "created"


def test_symlinks_pointing_out_are_refused(sandbox, resolve_mode):
    a, ctx = sandbox.allowed, sandbox.context
    os.symlink(str(sandbox.canary), a / "abs_out")
    os.symlink("../outside/canary.txt", a / "rel_out")
    os.symlink("../outside", a / "dir_out")
    os.symlink("/proc/self/root", a / "magic")
    os.symlink("/proc/self/fd", a / "fds")
    os.symlink("loop2", a / "loop1")
    os.symlink("loop1", a / "loop2")
    before = sandbox.canary.read_bytes()
    for path in ("abs_out", "rel_out", "dir_out/canary.txt", "magic" + str(sandbox.canary),
                 "fds/0", "real/../rel_out"):
        _fails(ErrorCode.PATH_NOT_ALLOWED, file_read, {"path": path}, ctx)
        _fails(ErrorCode.PATH_NOT_ALLOWED, file_write, {"path": path, "content": "pwn"}, ctx)
    _fails(ErrorCode.PATH_NOT_ALLOWED, list_dir, {"path": "dir_out"}, ctx)
    _fails(ErrorCode.PATH_NOT_ALLOWED, file_write,
           {"path": "dir_out/new.txt", "content": "x", "create_dirs": True}, ctx)
    _fails(ErrorCode.EXECUTION_ERROR, file_read, {"path": "loop1"}, ctx)  # ELOOP, not a hang
    assert sandbox.canary.read_bytes() == before
    assert sandbox.files_outside_allowed() == {"outside", "outside/canary.txt"}


def test_recursive_listing_does_not_follow_symlinks(sandbox, resolve_mode):
    a = sandbox.allowed
    (a / "src" / "pkg").mkdir(parents=True)
    (a / "src" / "pkg" / "m.py").write_text("x = 1\n")
    os.symlink("../outside", a / "escape")
    got = list_dir({"path": ".", "recursive": True}, sandbox.context)
    names = {e["name"]: e for e in got["entries"]}
    assert set(names) == {"escape", "src", "src/pkg", "src/pkg/m.py"}
    assert names["escape"]["type"] == "symlink" and names["src"]["type"] == "dir"
    assert names["src/pkg/m.py"] == {"name": "src/pkg/m.py", "type": "file", "size": 6}
    assert got["truncated"] is False


def test_listing_cap_is_stated(sandbox):
    for i in range(30):
        (sandbox.allowed / f"f{i:02d}").write_text("")
    got = list_dir({"max_entries": 10}, sandbox.context)
    assert got["count"] == 10 and got["truncated"] is True and "max_entries" in got["note"]
    assert list_dir({"max_entries": 30}, sandbox.context)["truncated"] is False


def test_non_utf8_names(sandbox, resolve_mode):
    raw = b"caf\xe9.txt"
    fd = os.open(os.fsencode(str(sandbox.allowed)) + b"/" + raw, os.O_WRONLY | os.O_CREAT, 0o644)
    os.write(fd, b"latin name")
    os.close(fd)
    got = list_dir({}, sandbox.context)
    (entry,) = got["entries"]
    assert entry["name"] == "caf\\xe9.txt" and entry["name_not_utf8"] is True
    name = os.fsdecode(raw)  # what a Python caller holds for such a name
    assert file_read({"path": name}, sandbox.context)["content"] == "latin name"
    file_write({"path": name, "content": "rewritten"}, sandbox.context)
    assert open(os.fsencode(str(sandbox.allowed)) + b"/" + raw, "rb").read() == b"rewritten"


def test_nul_bytes_proc_and_escapes_are_refused_before_io(sandbox):
    ctx = sandbox.context
    for path in ("a\x00b", "/proc/self/environ", "/proc/1/root/etc/passwd", "/proc",
                 "../outside/canary.txt", "/etc/passwd", "a/../../x"):
        _fails(ErrorCode.PATH_NOT_ALLOWED, file_read, {"path": path}, ctx)
    # Absolute paths inside the root are fine.
    (sandbox.allowed / "ok.txt").write_text("ok")
    assert file_read({"path": str(sandbox.allowed / "ok.txt")}, ctx)["content"] == "ok"


def test_empty_allowed_paths_means_the_workdir(sandbox):
    (sandbox.allowed / "x.txt").write_text("x")
    ctx = ToolContext(session_id="s", workdir=str(sandbox.allowed))
    assert file_read({"path": "x.txt"}, ctx)["content"] == "x"
    _fails(ErrorCode.PATH_NOT_ALLOWED, file_read, {"path": str(sandbox.canary)}, ctx)


def test_several_roots(sandbox):
    other = sandbox.base / "shared"
    other.mkdir()
    (other / "s.txt").write_text("shared")
    ctx = ToolContext(session_id="s", workdir=str(sandbox.allowed),
                      allowed_paths=(str(sandbox.allowed), str(other)))
    assert file_read({"path": str(other / "s.txt")}, ctx)["content"] == "shared"
    assert file_read({"path": "../shared/s.txt"}, ctx)["content"] == "shared"
    _fails(ErrorCode.PATH_NOT_ALLOWED, file_read, {"path": str(sandbox.canary)}, ctx)


# --- the two resolvers ---------------------------------------------------------------------


def test_kernel_and_walk_refuse_escapes_the_lexical_check_never_saw(sandbox, resolve_mode):
    # Bypass locate(): hand the opener a target that climbs out, as if the lexical layer had a
    # bug. The kernel (RESOLVE_BENEATH) or the walk must still refuse.
    target = Target(display="x", root=str(sandbox.allowed), rel=("..", "outside", "canary.txt"))
    with pytest.raises(ToolFailure) as info:
        open_beneath(target, os.O_RDONLY)
    assert info.value.code == "PATH_NOT_ALLOWED"


def test_fallback_when_openat2_is_missing(sandbox, monkeypatch):
    def enosys(*args, **kwargs):
        raise OSError(errno.ENOSYS, "Function not implemented")

    monkeypatch.setattr(_safepath, "MODE", "auto")
    monkeypatch.setattr(_safepath, "_openat2_ok", True)
    monkeypatch.setattr(_safepath, "_openat2", enosys)
    _safepath.STATS.clear()
    (sandbox.allowed / "f.txt").write_text("via walk")
    assert file_read({"path": "f.txt"}, sandbox.context)["content"] == "via walk"
    assert _safepath.STATS["openat2->walk:ENOSYS"] == 1 and _safepath.STATS["walk"] == 1
    assert _safepath._openat2_ok is False  # not tried again
    file_read({"path": "f.txt"}, sandbox.context)
    assert _safepath.STATS["openat2->walk:ENOSYS"] == 1 and _safepath.STATS["walk"] == 2
    os.symlink("../outside/canary.txt", sandbox.allowed / "out")
    _fails(ErrorCode.PATH_NOT_ALLOWED, file_read, {"path": "out"}, sandbox.context)


def test_locate_is_lexical():
    target = locate("a/./b//c", "/nonexistent/work")
    assert target.rel == ("a", "b", "c") and target.root == "/nonexistent/work"


# --- definitions ---------------------------------------------------------------------------


def test_definitions_are_complete_and_valid():
    tools = {t.name: t for t in definitions()}
    assert set(tools) == {"file_read", "file_write", "list_dir"}
    for tool in tools.values():
        assert tool.category == "filesystem" and tool.call_style == "mapping"
        assert tool.security.path_params == ("path",)
        assert tool.security.allowed_paths == ("{workdir}",)
        module, _, name = tool.entrypoint.partition(":")
        assert module == "tooldeck_tools_fs.tools" and file_read.__globals__[name].__name__ == name
    assert tools["file_read"].security.level == "safe"
    assert tools["list_dir"].security.level == "safe"
    assert tools["file_write"].security.level == "moderate"
    assert tools["file_read"].execution.cacheable
    assert tools["file_read"].execution.cache_context == ("workdir", "host")
    tooldeck_schema = pytest.importorskip("tooldeck_schema")
    for tool in tools.values():
        assert tooldeck_schema.validate_definition(tool) == []
