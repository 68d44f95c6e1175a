"""Run the traversal corpus through file_write in a child process (see test_fs_traversal_corpus).

Usage: python fs_corpus_child.py BASE MODE PAYLOADS_JSON. The parent runs this inside bubblewrap
with '/' read-only and only BASE writable, so even a broken guard cannot write outside BASE.
Prints one JSON object: per corpus file, how many payloads were tried, blocked, accepted...
"""

from __future__ import annotations

import collections
import json
import sys

from tooldeck_tools_fs import _safepath, file_write

from tooldeck_hookspecs import ToolContext, ToolFailure


def main() -> None:
    base, mode, payload_file = sys.argv[1], sys.argv[2], sys.argv[3]
    _safepath.MODE = mode  # type: ignore[assignment]
    allowed = f"{base}/allowed"
    context = ToolContext(session_id="corpus", workdir=allowed, allowed_paths=(allowed,))
    with open(payload_file, encoding="utf-8") as fh:
        payloads: list[list[str]] = json.load(fh)
    counts: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
    escaped_fs: list[str] = []
    for source, payload in payloads:
        counts[source]["tried"] += 1
        try:
            file_write({"path": payload, "content": "corpus-write", "create_dirs": True},
                       context)
        except ToolFailure as exc:
            outcome = "blocked" if exc.code == "PATH_NOT_ALLOWED" else f"error:{exc.code}"
            # EROFS can only come from outside BASE: the guard let a write through.
            if "Read-only file system" in exc.message or "EROFS" in exc.message:
                escaped_fs.append(payload)
        except Exception as exc:  # a crash is a finding too: report it, do not hide it
            outcome = f"crash:{type(exc).__name__}"
        else:
            outcome = "written_inside"
        counts[source][outcome] += 1
    print(json.dumps({"counts": counts, "escaped": escaped_fs, "stats": _safepath.STATS}))


if __name__ == "__main__":
    main()
