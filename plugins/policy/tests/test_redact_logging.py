"""tooldeck's log records are redacted: messages, tracebacks (``log.exception``), stacks."""

from __future__ import annotations

import io
import logging
import random
import string
from collections.abc import Iterator

import pytest
from tooldeck_policy import plugin  # noqa: F401  (importing the plugin installs the hook)
from tooldeck_policy.redact import RedactingFilter, install_log_redaction


def _token(seed: int) -> str:
    rng = random.Random(seed)
    return "ghp_" + "".join(rng.choice(string.ascii_letters + string.digits) for _ in range(36))


@pytest.fixture
def stream() -> Iterator[io.StringIO]:
    """A plain handler on the root logger, as an application would configure logging."""
    buffer = io.StringIO()
    handler = logging.StreamHandler(buffer)
    handler.setFormatter(logging.Formatter("%(name)s %(levelname)s %(message)s"))
    root = logging.getLogger()
    root.addHandler(handler)
    old_level = root.level
    root.setLevel(logging.DEBUG)
    try:
        yield buffer
    finally:
        root.removeHandler(handler)
        root.setLevel(old_level)


class _ConnectError(RuntimeError):
    pass


def _connect(token: str) -> None:
    raise _ConnectError(f"login refused for token {token}")


@pytest.mark.parametrize("name", ["tooldeck", "tooldeck.deck", "tooldeck.tool.shell_exec"])
def test_exception_with_a_secret_is_redacted_in_message_and_traceback(
    name: str, stream: io.StringIO, caplog: pytest.LogCaptureFixture
) -> None:
    token = _token(1)
    log = logging.getLogger(name)
    try:
        _connect(token)
    except _ConnectError:
        log.exception("call failed with %s", token, stack_info=True)
    written = stream.getvalue()
    assert "call failed with [REDACTED:github-pat]" in written
    assert "_ConnectError: login refused for token [REDACTED:github-pat]" in written
    assert "Traceback (most recent call last)" in written and "Stack (most recent" in written
    assert token not in written
    # every handler sees the redacted record, pytest's own capture included
    assert token not in caplog.text
    (record,) = [r for r in caplog.records if r.name == name]
    assert record.exc_info is None  # no formatter can render the raw exception again
    assert token not in (record.exc_text or "") and token not in record.getMessage()


def test_records_without_secrets_keep_lazy_formatting(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)
    logging.getLogger("tooldeck.deck").info("served %d calls for %s", 3, "alice")
    (record,) = caplog.records
    assert record.msg == "served %d calls for %s" and record.args == (3, "alice")
    assert record.getMessage() == "served 3 calls for alice"


def test_disabled_levels_cost_no_formatting() -> None:
    formatted: list[int] = []

    class Counting:
        def __str__(self) -> str:
            formatted.append(1)
            return "x"

    log = logging.getLogger("tooldeck.quiet")
    log.setLevel(logging.WARNING)
    try:
        log.debug("value %s", Counting())
        assert formatted == []
        log.warning("value %s", Counting())
        assert formatted  # enabled: formatted for redaction (and again by each handler)
    finally:
        log.setLevel(logging.NOTSET)


def test_a_broken_format_string_does_not_raise_in_the_caller(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING)
    saved, logging.raiseExceptions = logging.raiseExceptions, False
    try:
        logging.getLogger("tooldeck.deck").warning("two %s %s", "only-one")
    finally:
        logging.raiseExceptions = saved
    (record,) = caplog.records
    assert record.msg == "two %s %s"  # left for logging to report, as without redaction


def test_other_loggers_are_left_alone_unless_a_filter_is_attached(stream: io.StringIO) -> None:
    token = _token(2)
    other = logging.getLogger("someapp.worker")
    other.warning("token %s", token)
    assert token in stream.getvalue()  # not ours: untouched by the record factory
    handler = logging.StreamHandler(buffer := io.StringIO())
    handler.addFilter(RedactingFilter())
    other.addHandler(handler)
    try:
        other.warning("token %s", token)
    finally:
        other.removeHandler(handler)
    assert token not in buffer.getvalue() and "[REDACTED:github-pat]" in buffer.getvalue()


def test_install_is_idempotent_and_keeps_the_previous_factory() -> None:
    seen: list[str] = []
    previous = logging.getLogRecordFactory()

    def custom(*args: object, **kwargs: object) -> logging.LogRecord:
        record = previous(*args, **kwargs)  # type: ignore[arg-type]
        seen.append(record.name)
        return record

    logging.setLogRecordFactory(custom)
    try:
        install_log_redaction()
        installed = logging.getLogRecordFactory()
        install_log_redaction()
        assert logging.getLogRecordFactory() is installed  # not wrapped twice
        token = _token(3)
        record = logging.getLogger("tooldeck.x").makeRecord(
            "tooldeck.x", logging.ERROR, __file__, 1, "t=%s", (token,), None
        )
        assert seen[-1] == "tooldeck.x"  # the custom factory still runs
        assert token not in record.getMessage()
    finally:
        logging.setLogRecordFactory(previous)
