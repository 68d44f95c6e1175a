"""file_read delivers what ``max_bytes`` (up to 8 MiB) promises, through the real deck.

The result's cap (``max_output_bytes``, 4/3 of 8 MiB: enough for base64) is measured on the
JSON-escaped result. Text with many quotes, tabs or newlines grows when escaped: a read of a TSV
of small numbers with ``max_bytes`` = 8 MiB was dropped whole with OUTPUT_TRUNCATED ("more than
its limit"). It now comes back cut to what fits, with ``truncated`` and ``next_offset``, like a
larger file.
"""

from __future__ import annotations

from pathlib import Path

import pytest

tooldeck_testing = pytest.importorskip("tooldeck.testing")

MIB = 1024 * 1024


@pytest.mark.parametrize(
    "name, line",
    [("numbers.tsv", "1\t2\t3\n"), ("controls.txt", "a\x01\x02\x03b\n"),
     ("quoted.json", '{"a":"\\u00e9"}\n')],
)
async def test_an_8_mib_read_of_escape_heavy_text_comes_back_in_pieces(
    tmp_path: Path, name: str, line: str
) -> None:
    text = (line * (8 * MIB // len(line) + 1))[: 8 * MIB]
    (tmp_path / name).write_text(text, encoding="utf-8")
    pieces: list[str] = []
    offset = 0
    async with tooldeck_testing.make_deck(
        load_entry_points=["schema", "runner", "policy", "fs"]
    ) as deck:
        session = deck.session(workdir=str(tmp_path), grants={"filesystem"})
        for _ in range(10):
            result = await session.call(
                "file_read", {"path": name, "offset": offset, "max_bytes": 8 * MIB}
            )
            assert result.success, result.error
            data = result.data
            assert data["encoding"] == "utf-8" and data["size"] == 8 * MIB
            pieces.append(data["content"])
            offset += data["bytes_read"]
            if not data["truncated"]:
                break
            assert data["next_offset"] == offset and "offset=" in data["note"]
    assert len(pieces) > 1  # the first answer was cut, not dropped
    assert "".join(pieces) == text


async def test_plain_text_of_8_mib_still_comes_back_whole(tmp_path: Path) -> None:
    text = ("tooldeck é " * (8 * MIB // 12 + 1)).encode()[: 8 * MIB - 1].decode("utf-8", "ignore")
    (tmp_path / "plain.txt").write_text(text, encoding="utf-8")
    async with tooldeck_testing.make_deck(
        load_entry_points=["schema", "runner", "policy", "fs"]
    ) as deck:
        session = deck.session(workdir=str(tmp_path), grants={"filesystem"})
        result = await session.call("file_read", {"path": "plain.txt", "max_bytes": 8 * MIB})
    assert result.success, result.error
    assert not result.data["truncated"] and result.data["content"] == text
