"""Small holes of the trust boundary in the core: approvals and suggestions are per session."""

from __future__ import annotations

import pytest

from tooldeck import ErrorCode, SecurityConfig, ToolDefinition
from tooldeck.testing import make_deck

STAGES = ["schema", "runner", "policy"]


def _wipe(target: str) -> str:
    return target


def _tool(name: str, *, level: str = "dangerous", category: str = "shell") -> ToolDefinition:
    return ToolDefinition(
        name=name,
        description=f"{name} a target.",
        category=category,
        parameters={
            "type": "object",
            "properties": {"target": {"type": "string"}},
            "required": ["target"],
        },
        security=SecurityConfig(level=level),
        execute=_wipe,
        call_style="kwargs",
    )


@pytest.mark.parametrize("how", ["approve", "deny", "resume"])
async def test_a_session_cannot_decide_another_sessions_approval(how):
    async with make_deck(load_entry_points=STAGES, tools=[_tool("wipe_disk")]) as deck:
        victim = deck.session()
        attacker = deck.session()
        pending = await victim.call("wipe_disk", {"target": "a"})
        approval = pending.error.details["approval_id"]
        if how == "approve":
            assert await attacker.approve(approval) is False
        elif how == "deny":
            assert await attacker.deny(approval) is False
        else:
            stolen = await attacker.resume(approval)
            assert stolen.error.code is ErrorCode.PERMISSION_DENIED
        # The approval is still the victim's to decide, and still pending.
        assert await victim.approve(approval) is True
        ran = await victim.call("wipe_disk", {"target": "a"}, approval_id=approval)
        assert ran.success


async def test_a_store_without_session_binding_is_checked_by_the_core():
    decided = []

    class OldStore:  # a third-party store written before resolve() took session_id
        async def create(self, *, session_id, tool, arguments_hash, ttl_s):
            return "apr_old"

        async def resolve(self, approval_id, approved):
            decided.append(approval_id)
            return True

        async def consume(self, **kw):
            return False

    from tooldeck.testing import inline_plugin

    deck = make_deck(
        inline_plugin(tooldeck_approval_store=lambda settings: OldStore(), name="old"),
        load_entry_points=STAGES,
        tools=[_tool("wipe_disk")],
    )
    async with deck:
        victim, attacker = deck.session(), deck.session()
        await victim.call("wipe_disk", {"target": "a"})
        assert await attacker.approve("apr_old") is False
        assert decided == []
        assert await victim.approve("apr_old") is True


async def test_suggestions_never_name_tools_the_session_may_not_use():
    tools = [
        _tool("disk_wipe", level="dangerous", category="shell"),
        _tool("disk_read", level="safe", category="filesystem"),
        _tool("disk_format", level="moderate", category="admin"),
    ]
    async with make_deck(load_entry_points=STAGES, tools=tools) as deck:
        free = deck.session()
        everything = (await free.call("disk_wip", {"target": "a"})).error.details["candidates"]
        assert {"disk_wipe", "disk_read", "disk_format"} <= set(everything)

        limited = deck.session(max_level="safe", excluded_categories={"admin"})
        result = await limited.call("disk_wip", {"target": "a"})
        assert result.error.code is ErrorCode.TOOL_NOT_FOUND
        assert result.error.details["candidates"] == ["disk_read"]
        assert "disk_wipe" not in (result.error.suggestion or "")
        assert "disk_format" not in (result.error.suggestion or "")
