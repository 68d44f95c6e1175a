"""The shell guard against huge commands: refused unread (fail closed), and never retained."""

from __future__ import annotations

import pytest
from tooldeck_policy import _shell
from tooldeck_policy._shell import (
    MAX_ARGV_CHARS,
    MAX_ARGV_ITEMS,
    MAX_COMMAND_CHARS,
    analyze_command,
)

TOO_LONG = f"the command is longer than {MAX_COMMAND_CHARS} characters"
TOO_LONG_ARGV = (
    f"the argument list holds more than {MAX_ARGV_ITEMS} items or {MAX_ARGV_CHARS} characters"
)


@pytest.mark.parametrize(
    "command",
    [
        "ls " + "a " * MAX_COMMAND_CHARS,
        "a;" * MAX_COMMAND_CHARS,
        "echo " + "$(" * MAX_COMMAND_CHARS,
        "echo '" + "a" * MAX_COMMAND_CHARS,
        "cat <<EOF\n" + "line\n" * MAX_COMMAND_CHARS + "EOF",
    ],
)
def test_an_oversized_command_line_is_refused_and_not_kept_in_the_cache(command: str) -> None:
    _shell._analyze_string.cache_clear()
    for variant in range(3):
        verdict = analyze_command(command + str(variant))
        assert verdict.injection == (TOO_LONG,)
    # The analyzer's cache (2,048 entries) would keep every such line alive: gigabytes.
    assert _shell._analyze_string.cache_info().currsize == 0


def test_trailing_blanks_do_not_make_a_short_command_too_long() -> None:
    assert analyze_command("ls -l" + " " * MAX_COMMAND_CHARS + "\n").clean


@pytest.mark.parametrize(
    "argv",
    [
        ["ls"] + ["a"] * MAX_COMMAND_CHARS,  # many words
        ["ls", "a" * MAX_COMMAND_CHARS],  # one long word
        ["ls"] + ["x" * 100] * (MAX_COMMAND_CHARS // 100),  # long once joined
        ["ls"] + [""] * (MAX_COMMAND_CHARS + 1),  # empty words still separate
    ],
)
def test_an_oversized_argv_list_through_a_shell_is_refused_like_a_command_line(
    argv: list[str],
) -> None:
    assert analyze_command(argv, through_shell=True).injection == (TOO_LONG,)


@pytest.mark.parametrize(
    "argv",
    [
        ["ls"] + ["a"] * MAX_ARGV_ITEMS,  # many words
        ["ls", "a" * MAX_ARGV_CHARS],  # one long word
        ["ls"] + ["x" * 1000] * (MAX_ARGV_CHARS // 1000),  # long once joined
    ],
)
def test_an_oversized_argv_list_run_directly_is_refused(argv: list[str]) -> None:
    assert analyze_command(argv).injection == (TOO_LONG_ARGV,)


def test_long_arguments_run_directly_are_judged_not_refused() -> None:
    # A commit message or a JSON body over the command-line bound is an argument, not shell.
    assert analyze_command(["git", "commit", "-m", "x" * (4 * MAX_COMMAND_CHARS)]).clean
    assert analyze_command(["rm", "-rf", "/", "x" * (4 * MAX_COMMAND_CHARS)]).destructive


def test_an_argv_list_just_within_the_limit_is_judged_as_before() -> None:
    argv = ["ls"] + ["x" * 99] * ((MAX_COMMAND_CHARS - 3) // 100)
    assert len(" ".join(argv)) <= MAX_COMMAND_CHARS
    assert analyze_command(argv).clean
    assert analyze_command(argv, through_shell=True).clean
    assert analyze_command(["rm", "-rf", "/"] + ["x"] * 100).destructive


def test_a_huge_argv_list_is_refused_before_its_words_are_read() -> None:
    class Word(str):
        """A word that counts how often the guard looks at it."""

        looked = 0

        def __len__(self) -> int:
            Word.looked += 1
            return super().__len__()

    word = Word("a")
    verdict = analyze_command(["ls", *([word] * 1_000_000)])
    assert verdict.injection == (TOO_LONG_ARGV,)
    assert Word.looked == 0  # bounded work: the list's length alone decided


def test_a_url_host_longer_than_any_name_is_refused_before_any_regex(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The legacy-IPv4 regex and IDNA ran over the whole host, holding the GIL (a 1 MB host:
    # ~60 ms of every session's loop). No name or address is longer than 253 characters.
    from tooldeck_policy import _urls

    seen: list[int] = []

    class Recording:
        def match(self, text: str) -> None:
            seen.append(len(text))

    monkeypatch.setattr(_urls, "_LEGACY_V4", Recording())
    for host in ("1" * 1_000_000, "ａ" * 100_000, "a." * 600 + "com"):
        reason = _urls.check_url(f"http://{host}/", resolve=False)
        assert reason is not None and "longer than" in reason
    assert seen == []
    assert _urls.check_url("http://" + "a." * 100 + "com/", resolve=False) is None
    assert seen  # an ordinary host still goes through the literal-address check
