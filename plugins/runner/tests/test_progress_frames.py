"""Progress frames on the sandbox wire are always whole JSON, whatever the tool emits.

A frame that did not parse as progress would be read as the call's result: a cut frame (a long
message of escaped characters) must never happen.
"""

from __future__ import annotations

import pytest
from tooldeck_runner._wire import PROGRESS_MAX_BYTES, parse_progress, progress_payload


@pytest.mark.parametrize(
    "event",
    [
        {"progress": 1, "total": 3, "message": "step 1"},
        {"message": "\x01" * 5000},  # escapes to six bytes a character
        {"message": "\U0001f600" * 5000},  # four bytes a character
        {"progress": float("nan"), "total": float("inf"), "message": "odd numbers dropped"},
        "not a mapping",
        {"progress": True, "other": object()},
    ],
)
def test_every_event_becomes_one_whole_progress_frame(event):
    payload = progress_payload(event)
    assert len(payload) <= PROGRESS_MAX_BYTES
    parsed = parse_progress(payload)
    assert parsed is not None
    assert set(parsed) <= {"progress", "total", "message"}
    for key in ("progress", "total"):
        if key in parsed:
            assert parsed[key] == parsed[key] and abs(parsed[key]) != float("inf")
