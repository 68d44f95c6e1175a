"""The command line answers hostile or broken input with one line and exit 2, never a traceback,
a hang or silently wrong figures; plugins that break at start-up are named, not obeyed.

Found by an audit: ``tooldeck eval retrieval`` on a malformed dataset (a list, nulls, a query
without text, deep nesting, not UTF-8) printed tracebacks; ``--queries -1`` "evaluated" 0 queries
with exit 0; ``--limit 10**20`` crashed in the retriever's slicing; ``tooldeck tools --json |
true`` printed a BrokenPipeError traceback; ``@/dev/zero`` as arguments read until memory ran
out and ``@fifo`` blocked forever; a provider hook raising at start-up, and a pack calling
``sys.exit()`` at import, ended the command with a traceback or with the pack's own message.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

TOOLDECK = str(Path(sys.executable).with_name("tooldeck"))


def run(*args: str, cwd: Path, env: dict[str, str] | None = None,
        stdout: int | None = subprocess.PIPE) -> subprocess.CompletedProcess[str]:
    environ = {**os.environ, "HF_HUB_OFFLINE": "1", "TOOLDECK_HISTORY_FILE": "off",
               "TOOLDECK_TRUST_FILE": str(cwd / "trust.json")}
    environ.pop("TOOLDECK_CONFIG", None)
    environ.update(env or {})
    return subprocess.run([TOOLDECK, *args], cwd=cwd, env=environ, stdout=stdout,
                          stderr=subprocess.PIPE, text=True, timeout=180, check=False)


MALFORMED = {
    "list.json": "[]",
    "empty.json": "",
    "nulls.json": '{"tools": null, "queries": null}',
    "tools_str.json": '{"tools": "x", "queries": []}',
    "query_str.json": '{"tools": [], "queries": ["find a tool"]}',
    "no_query.json": '{"tools": [], "queries": [{"relevant": []}]}',
    "nameless.json": '{"tools": [{"description": "x"}], "queries": []}',
    "relevant_int.json": '{"tools": [], "queries": [{"query": "q", "relevant": [1]}]}',
    "deep.json": "[" * 100_000 + "]" * 100_000,
    "bignum.json": '{"tools": [], "queries": [], "n": ' + "9" * 5000 + "}",
}


@pytest.mark.parametrize("name", sorted(MALFORMED))
def test_a_malformed_dataset_is_one_line_and_exit_2(tmp_path: Path, name: str) -> None:
    (tmp_path / name).write_text(MALFORMED[name])
    done = run("eval", "retrieval", name, "--json", cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr
    assert f"dataset {name!r}" in done.stderr


def test_a_dataset_that_is_not_utf8_or_not_there_is_one_line(tmp_path: Path) -> None:
    (tmp_path / "latin.json").write_bytes(b'{"tools": [], "queries": [{"query": "caf\xe9"}]}')
    for name, words in (("latin.json", "not UTF-8"), ("missing.json", "not found")):
        done = run("eval", "retrieval", name, cwd=tmp_path)
        assert done.returncode == 2 and words in done.stderr and "Traceback" not in done.stderr


@pytest.mark.parametrize("count", ["-1", "0"])
def test_eval_refuses_a_query_count_below_one(tmp_path: Path, count: str) -> None:
    done = run("eval", "retrieval", "x.json", "--queries", count, cwd=tmp_path)
    assert done.returncode == 2 and "must be at least 1" in done.stderr


def test_select_with_a_limit_past_the_machines_integers_deals_the_catalog(tmp_path: Path) -> None:
    done = run("select", "read a file", "--limit", str(10**20), "--json", cwd=tmp_path,
               env={"TOOLDECK_PLUGINS": "schema,runner,policy,fs,faiss"})
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["tools"]


def test_a_closed_pipe_is_not_an_error(tmp_path: Path) -> None:
    reader = subprocess.Popen(["true"], stdin=subprocess.PIPE)
    reader.wait()
    assert reader.stdin is not None
    done = run("tools", "--json", cwd=tmp_path, stdout=reader.stdin.fileno())
    reader.stdin.close()
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr


def test_a_full_disk_is_one_line(tmp_path: Path) -> None:
    with open("/dev/full", "w") as full:
        done = run("tools", "--json", cwd=tmp_path, stdout=full.fileno())
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert "No space left" in done.stderr


def test_arguments_from_a_device_or_a_fifo_are_refused_at_once(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "pipe")
    for source in ("/dev/zero", str(tmp_path / "pipe")):
        done = run("call", "file_read", f"@{source}", cwd=tmp_path)
        assert done.returncode == 2 and "not a regular file" in done.stderr, done.stderr


def _pack(site: Path, module: str, source: str) -> None:
    info = site / f"{module}-0.1.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {module}\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(f"[tooldeck]\n{module} = {module}\n")
    (site / f"{module}.py").write_text(textwrap.dedent(source))


def test_a_pack_calling_sys_exit_at_import_is_a_failed_plugin(tmp_path: Path) -> None:
    site = tmp_path / "site"
    _pack(site, "td_exits", "import sys\nsys.exit('libfoo not found')\n")
    done = run("plugins", "--json", cwd=tmp_path, env={"PYTHONPATH": str(site),
                                                      "TOOLDECK_DISABLE_PLUGINS": "faiss"})
    assert done.returncode == 0, done.stderr
    failed = {f["name"]: f for f in json.loads(done.stdout)["failed"]}
    assert failed["td_exits"]["stage"] == "import"
    assert "SystemExit" in failed["td_exits"]["error"]


def test_a_provider_raising_at_start_up_is_named_in_one_line(tmp_path: Path) -> None:
    done = run("tools", cwd=tmp_path,
               env={"TOOLDECK_REDIS_URL": "redis://:pw@localhost:63799x/0",
                    "TOOLDECK_DISABLE_PLUGINS": "faiss"})
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    assert "plugin 'redis'" in done.stderr and "failed" in done.stderr


async def test_a_validator_answering_one_string_is_one_problem() -> None:
    from tooldeck import RegistrationError, tool
    from tooldeck.testing import inline_plugin, make_deck

    @tool(category="text")
    def echo(text: str) -> str:
        """Echo a text.

        Args:
            text: the text
        """
        return text

    def tooldeck_validate_tool(tool: object, catalog: object) -> str:
        return "names must start with acme_"

    with pytest.raises(RegistrationError) as raised:
        make_deck(inline_plugin(tooldeck_validate_tool, name="house-rules"),
                  load_entry_points=["schema", "runner"], tools=[echo])
    assert raised.value.problems == ["names must start with acme_"]


def test_a_pack_whose_import_never_ends_is_left_out_after_register_timeout_s(
    tmp_path: Path,
) -> None:
    site = tmp_path / "site"
    _pack(site, "td_hangs", "import threading\nthreading.Event().wait()\n")
    (tmp_path / "deck.toml").write_text("register_timeout_s = 2\n")
    done = run("plugins", "--json", cwd=tmp_path,
               env={"PYTHONPATH": str(site), "TOOLDECK_DISABLE_PLUGINS": "faiss",
                    "TOOLDECK_CONFIG": str(tmp_path / "deck.toml")})
    assert done.returncode == 0, done.stderr
    failed = {f["name"]: f for f in json.loads(done.stdout)["failed"]}
    assert failed["td_hangs"]["stage"] == "import"
    assert "did not finish within 2 s" in failed["td_hangs"]["error"]
