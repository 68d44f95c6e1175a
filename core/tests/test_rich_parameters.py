"""Tools from functions as rich as pydantic's: models, dataclasses, TypedDicts, enums, dates and
``Field`` constraints get a schema, and their arguments arrive in the declared types.

Issue 15 ("Tools from functions as rich as pydantic's"). Through the real deck (schema stage's
validator, runner) and through ``call_tool_function``, the one function sandbox workers call too.
"""

from __future__ import annotations

import dataclasses
import datetime
import decimal
import enum
import pathlib
import typing
import uuid
from typing import Annotated, Any

import pytest
from pydantic import BaseModel, Field, field_validator
from typing_extensions import TypedDict

from tooldeck import ErrorCode, RegistrationError, tool
from tooldeck._introspect import definition_from_function
from tooldeck.testing import make_deck
from tooldeck_hookspecs import ToolFailure, call_tool_function
from tooldeck_hookspecs._coerce import coerce_arguments, is_rich_annotation

STAGES = ["schema", "runner"]


class Priority(enum.Enum):
    LOW = "low"
    HIGH = "high"


class Address(BaseModel):
    street: str
    zip_code: Annotated[str, Field(pattern=r"^\d{5}$")]

    @field_validator("street")
    @classmethod
    def _not_blank(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("street must not be blank")
        return value


@dataclasses.dataclass
class Point:
    x: float
    y: float = 0.0


class Options(TypedDict):
    verbose: bool


seen: list[dict[str, Any]] = []


@tool(category="planning")
def schedule(
    day: datetime.date,
    priority: Priority,
    slots: Annotated[int, Field(ge=1, le=10, description="how many slots")],
    address: Address,
    where: Point,
    options: Options,
    ref: uuid.UUID,
    budget: decimal.Decimal,
    folder: pathlib.Path,
    at: datetime.datetime | None = None,
    tags: list[Priority] | None = None,
) -> dict[str, Any]:
    """Schedule a visit.

    Args:
        day: the day of the visit
        priority: how urgent it is
    """
    seen.append(dict(locals()))
    return {"day": day, "priority": priority, "address": address, "where": where}


GOOD = {
    "day": "2026-12-03",
    "priority": "high",
    "slots": 3,
    "address": {"street": "Main St", "zip_code": "12345"},
    "where": {"x": 1.5},
    "options": {"verbose": True},
    "ref": "6f1c2d1e-0000-4000-8000-000000000001",
    "budget": "12.50",
    "folder": "data/in",
    "at": "2026-12-03T10:00:00Z",
    "tags": ["low", "high"],
}


def test_the_schema_says_what_pydantic_would():
    definition = definition_from_function(schedule, plugin="t", options={})
    props = definition.parameters["properties"]
    assert props["day"] == {
        "type": "string", "format": "date", "description": "the day of the visit"
    }
    assert props["priority"]["enum"] == ["low", "high"]
    assert props["priority"]["description"] == "how urgent it is"
    assert props["slots"]["minimum"] == 1 and props["slots"]["maximum"] == 10
    assert props["slots"]["description"] == "how many slots"
    assert props["address"]["properties"]["zip_code"]["pattern"] == r"^\d{5}$"
    assert props["address"]["required"] == ["street", "zip_code"]
    assert props["where"]["properties"]["y"]["default"] == 0.0
    assert props["options"]["properties"]["verbose"] == {"type": "boolean"}
    assert props["ref"]["format"] == "uuid"
    assert set(definition.parameters["required"]) == {
        "day", "priority", "slots", "address", "where", "options", "ref", "budget", "folder"
    }
    assert definition.parameters["additionalProperties"] is False
    # Inlined: no $ref for providers that do not resolve references, no generated titles.
    text = repr(definition.parameters)
    assert "$ref" not in text and "$defs" not in text and "'title'" not in text


def test_arguments_arrive_in_the_declared_types():
    definition = definition_from_function(schedule, plugin="t", options={})
    seen.clear()
    call_tool_function(definition, GOOD, None)  # type: ignore[arg-type]
    got = seen[-1]
    assert got["day"] == datetime.date(2026, 12, 3)
    assert got["priority"] is Priority.HIGH
    assert isinstance(got["address"], Address) and got["address"].zip_code == "12345"
    assert got["where"] == Point(x=1.5, y=0.0)
    assert got["options"] == {"verbose": True}
    assert got["ref"] == uuid.UUID(GOOD["ref"])
    assert got["budget"] == decimal.Decimal("12.50")
    assert got["folder"] == pathlib.Path("data/in")
    assert got["at"] == datetime.datetime(2026, 12, 3, 10, 0, tzinfo=datetime.UTC)
    assert got["tags"] == [Priority.LOW, Priority.HIGH]


async def test_through_the_deck_typed_in_and_plain_json_out():
    seen.clear()
    async with make_deck(load_entry_points=STAGES, tools=[schedule]) as deck:
        session = deck.session()
        result = await session.call("schedule", GOOD)
        too_many = await session.call("schedule", {**GOOD, "slots": 11})
        bad_zip = await session.call(
            "schedule", {**GOOD, "address": {"street": "x", "zip_code": "1"}}
        )
        blank = await session.call(
            "schedule", {**GOOD, "address": {"street": "  ", "zip_code": "12345"}}
        )
        bad_day = await session.call("schedule", {**GOOD, "day": "2026-13-40"})
    assert result.success, result.error
    assert seen[-1]["priority"] is Priority.HIGH
    # The model's result is JSON: the pydantic model and dataclass as objects, the enum a value.
    assert result.data == {
        "day": "2026-12-03",
        "priority": "high",
        "address": {"street": "Main St", "zip_code": "12345"},
        "where": {"x": 1.5, "y": 0.0},
    }
    for refused in (too_many, bad_zip, blank, bad_day):
        assert refused.error is not None and refused.error.code is ErrorCode.INVALID_ARGUMENTS
    # What JSON Schema cannot say (a validator) still comes back naming the field.
    assert "address.street" in blank.error.message and "blank" in blank.error.message
    assert len(seen) == 1  # no refused call reached the tool


def test_plain_functions_are_left_alone():
    def plain(text: str, count: int = 1, flags: list[str] | None = None) -> str:
        """Plain."""
        return text

    arguments = {"text": "a", "count": 2}
    assert coerce_arguments(plain, arguments) is arguments
    for annotation in (str, int, list[str], dict[str, int], Annotated[str, "a description"]):
        assert not is_rich_annotation(annotation)
    for annotation in (Priority, datetime.date, Address, Point, Options, list[Priority],
                       Annotated[int, Field(ge=1)], dict[str, Point] | None):
        assert is_rich_annotation(annotation)


class OldStyle(typing.TypedDict):  # pydantic refuses typing.TypedDict before Python 3.12
    a: int


def test_an_unusable_rich_type_is_a_registration_error_naming_the_parameter():
    def uses(value: OldStyle, when: datetime.date) -> None:
        """Use it."""

    with pytest.raises(RegistrationError, match="parameters") as caught:
        definition_from_function(uses, plugin="t", options={})
    assert "\n\n" not in str(caught.value)  # one line, not pydantic's essay


def test_a_refusal_at_call_time_is_a_structured_tool_failure():
    definition = definition_from_function(schedule, plugin="t", options={})
    with pytest.raises(ToolFailure) as caught:
        call_tool_function(definition, {**GOOD, "priority": "urgent"}, None)  # type: ignore[arg-type]
    assert caught.value.code is ErrorCode.INVALID_ARGUMENTS
    assert caught.value.details["problems"][0].startswith("priority:")
