"""The ToolDefinitions of the fs pack: schemas and descriptions written for a model."""

from __future__ import annotations

from tooldeck_hookspecs import ExecutionConfig, SecurityConfig, SecurityLevel, ToolDefinition

from . import tools
from .tools import (
    DEFAULT_LIST_DEPTH,
    DEFAULT_LIST_ENTRIES,
    DEFAULT_READ_BYTES,
    MAX_LIST_DEPTH,
    MAX_LIST_ENTRIES,
    MAX_READ_BYTES,
    MAX_WRITE_BYTES,
)

__all__ = ["FILE_READ", "FILE_WRITE", "LIST_DIR", "definitions"]

_PATH = {
    "type": "string",
    "minLength": 1,
    "description": "Path of the file, relative to the working directory (e.g. 'src/app.py').",
}


def _security(level: SecurityLevel) -> SecurityConfig:
    return SecurityConfig(level=level, path_params=("path",), allowed_paths=("{workdir}",))


FILE_READ = ToolDefinition(
    name="file_read",
    version="1.0.0",
    category="filesystem",
    description=(
        "Read a file from the working directory and return its content. Use it to look at "
        "source code, configuration, logs or any text file before you change or discuss it. "
        "UTF-8 text comes back as text; binary files come back base64-encoded "
        "(encoding: 'base64'). Files larger than max_bytes (default "
        f"{DEFAULT_READ_BYTES // 1024} KiB) are returned in pieces: the result says "
        "truncated: true and gives next_offset to continue from."
    ),
    parameters={
        "type": "object",
        "properties": {
            "path": _PATH,
            "offset": {"type": "integer", "minimum": 0, "default": 0,
                       "description": "Byte offset to start reading at (for large files)."},
            "max_bytes": {"type": "integer", "minimum": 1, "maximum": MAX_READ_BYTES,
                          "default": DEFAULT_READ_BYTES,
                          "description": "Read at most this many bytes."},
            "encoding": {"type": "string", "enum": ["auto", "utf-8", "base64"],
                         "default": "auto",
                         "description": "'auto': text if the file is UTF-8, else base64."},
        },
        "required": ["path"],
        "additionalProperties": False,
    },
    security=_security(SecurityLevel.SAFE),
    # Results depend on the session's workdir and on the machine whose files they are: both are
    # part of the cache key (a Redis cache is shared by workers on several hosts). The TTL is
    # short because the file may change (file_write or anything else) after it was read.
    execution=ExecutionConfig(timeout_s=30.0, cacheable=True, cache_ttl_s=30.0,
                              cache_context=("workdir", "host"),
                              max_output_bytes=MAX_READ_BYTES * 4 // 3 + 65536),
    execute=tools.file_read,
    entrypoint="tooldeck_tools_fs.tools:file_read",
    call_style="mapping",
    tags=("read", "file", "open", "cat", "view"),
)

FILE_WRITE = ToolDefinition(
    name="file_write",
    version="1.0.0",
    category="filesystem",
    description=(
        "Create a file or replace its whole content in the working directory. Use it to save "
        "code, notes, configuration or generated output. The write is atomic: the file holds "
        "either the old or the new content, never a mix. Set create_dirs to true to create "
        "missing parent folders. For binary data send base64 with encoding: 'base64'. At most "
        f"{MAX_WRITE_BYTES // (1024 * 1024)} MiB per call. tooldeck.toml, pyproject.toml, "
        ".git/ and other host configuration files are protected and cannot be written; "
        "read-only files are not replaced."
    ),
    parameters={
        "type": "object",
        "properties": {
            "path": _PATH,
            "content": {"type": "string",
                        "description": "The complete new content of the file."},
            "create_dirs": {"type": "boolean", "default": False,
                            "description": "Create missing parent directories."},
            "encoding": {"type": "string", "enum": ["utf-8", "base64"], "default": "utf-8",
                         "description": "How content is encoded: text, or base64 bytes."},
        },
        "required": ["path", "content"],
        "additionalProperties": False,
    },
    security=_security(SecurityLevel.MODERATE),
    execution=ExecutionConfig(timeout_s=60.0, invalidates=("file_read", "list_dir")),
    execute=tools.file_write,
    entrypoint="tooldeck_tools_fs.tools:file_write",
    call_style="mapping",
    tags=("write", "save", "create", "file", "edit"),
)

LIST_DIR = ToolDefinition(
    name="list_dir",
    version="1.0.0",
    category="filesystem",
    description=(
        "List the files and folders in a directory of the working directory, with each "
        "entry's type (file, dir, symlink) and size in bytes. Use it to explore a project or "
        "to find the exact name of a file before reading it. Set recursive to true to include "
        "subfolders (up to max_depth levels). Long listings are cut at max_entries or max_depth "
        "and say truncated: true with truncated_by giving the reason."
    ),
    parameters={
        "type": "object",
        "properties": {
            "path": {"type": "string", "default": ".",
                     "description": "Directory to list, relative to the working directory "
                     "('.' is the working directory itself)."},
            "recursive": {"type": "boolean", "default": False,
                          "description": "Also list the contents of subdirectories."},
            "max_entries": {"type": "integer", "minimum": 1, "maximum": MAX_LIST_ENTRIES,
                            "default": DEFAULT_LIST_ENTRIES,
                            "description": "Stop after this many entries."},
            "max_depth": {"type": "integer", "minimum": 1, "maximum": MAX_LIST_DEPTH,
                          "default": DEFAULT_LIST_DEPTH,
                          "description": "With recursive: how many folder levels to list "
                          "(1 = only the entries of path itself)."},
        },
        "additionalProperties": False,
    },
    security=_security(SecurityLevel.SAFE),
    execution=ExecutionConfig(timeout_s=30.0),
    execute=tools.list_dir,
    entrypoint="tooldeck_tools_fs.tools:list_dir",
    call_style="mapping",
    tags=("ls", "list", "directory", "folder", "files", "tree"),
)


def definitions() -> tuple[ToolDefinition, ...]:
    """The three tools of the pack, in registration order."""
    return (FILE_READ, FILE_WRITE, LIST_DIR)
