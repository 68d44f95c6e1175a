"""``CallControl`` and the ``ToolContext`` members that read it: the deadline, ``cancelled()``,
and ``commit()`` decided against the executor's ``abandon()`` (exactly one of them wins)."""

from __future__ import annotations

import threading
import time

import attrs
import pytest

from tooldeck_hookspecs import CallAbandoned, CallControl, ErrorCode, ToolContext, ToolFailure


def test_without_a_control_everything_is_a_no_op() -> None:
    context = ToolContext(session_id="s", workdir="/")
    assert context.control is None and context.deadline is None
    assert context.seconds_left() is None and context.cancelled() is False
    context.commit()


def test_with_control_copies_every_field() -> None:
    values = {
        "session_id": "s", "workdir": "/w", "call_id": "c", "tool_name": "t",
        "allowed_paths": ("/w",), "attributes": {"a": 1}, "settings": {"b": 2},
        "protected_paths": ("x",), "logger": object(), "emit": print, "limits": {"memory_mb": 1},
    }
    names = {field.name for field in attrs.fields(ToolContext)}
    assert names == {*values, "control"}, "a new field: copy it in ToolContext.with_control"
    context = ToolContext(**values)  # type: ignore[arg-type]
    control = CallControl(deadline=time.monotonic() + 10)
    bound = context.with_control(control)
    assert bound is not context and context.control is None
    assert bound.control is control
    for name, value in values.items():
        assert getattr(bound, name) is value, name
    assert 0 < bound.seconds_left() <= 10  # type: ignore[operator]
    assert bound.deadline == control.deadline


def test_abandon_then_commit_is_refused() -> None:
    control = CallControl()
    assert control.abandon() is True
    assert control.cancelled() is True
    with pytest.raises(CallAbandoned) as info:
        control.commit()
    assert isinstance(info.value, ToolFailure) and info.value.code is ErrorCode.CANCELLED


def test_commit_then_abandon_tells_the_executor_to_wait() -> None:
    control = CallControl()
    control.commit()
    control.commit()  # again: a no-op
    assert control.committing and control.cancelled() is False
    assert control.abandon() is False  # the change may be landing
    assert control.cancelled() is True  # but the caller did give up
    control.commit()  # still allowed: the commit already started


def test_a_probe_counts_as_abandonment() -> None:
    cancelled = [False]
    control = CallControl(probe=lambda: cancelled[0])
    assert control.cancelled() is False
    cancelled[0] = True
    assert control.cancelled() is True
    with pytest.raises(CallAbandoned):
        control.commit()


def test_exactly_one_of_commit_and_abandon_wins() -> None:
    for _ in range(200):
        control = CallControl()
        committed: list[bool] = []
        barrier = threading.Barrier(2)

        def tool(
            control: CallControl = control,
            committed: list[bool] = committed,
            barrier: threading.Barrier = barrier,
        ) -> None:
            barrier.wait()
            try:
                control.commit()
                committed.append(True)
            except CallAbandoned:
                committed.append(False)

        thread = threading.Thread(target=tool)
        thread.start()
        barrier.wait()
        abandoned = control.abandon()
        thread.join()
        assert committed == [not abandoned]
