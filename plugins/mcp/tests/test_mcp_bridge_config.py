"""Unit tests of tooldeck-mcp: configuration, names, levels and result conversion (no server)."""

from __future__ import annotations

import pytest
from mcp import types
from tooldeck_mcp import (
    McpServerConfig,
    convert_result,
    definitions_for,
    parse_servers,
    slug,
    tool_name,
)

from tooldeck_hookspecs import ConfigError, SecurityLevel


def test_names_are_snake_case_and_bounded() -> None:
    assert slug("GitHub-Issues v2") == "github_issues_v2"
    assert slug("2fa") == "t_2fa"
    assert tool_name("git hub", "create-issue") == "git_hub__create_issue"
    long = tool_name("server", "x" * 200)
    assert len(long) == 64 and long.startswith("server__x")
    assert long != tool_name("server", "x" * 199)


def test_parse_servers_reads_stdio_and_http_tables() -> None:
    configs = parse_servers(
        {
            "mcp": {
                "list": "all",
                "servers": {
                    "git": {"command": ["git-mcp", "--repo", "."], "env": {"A": "1"}},
                    "web": {"url": "http://127.0.0.1:9000/mcp", "level_floor": "moderate",
                            "trust_annotations": True, "timeout_s": 5, "category": "web"},
                },
            }
        }
    )
    git, web = configs
    assert git.command == ("git-mcp", "--repo", ".") and git.env == (("A", "1"),)
    assert git.transport == "stdio" and git.category_name == "mcp_git"
    assert web.transport == "http" and web.timeout_s == 5.0 and web.category_name == "web"
    assert web.level_floor is SecurityLevel.MODERATE
    assert hash(git) != hash(web)


@pytest.mark.parametrize(
    ("table", "message"),
    [
        ({}, "exactly one of"),
        ({"command": ["x"], "url": "http://127.0.0.1/mcp"}, "exactly one of"),
        ({"command": []}, "command"),
        ({"url": "ftp://host"}, "url"),
        ({"command": ["x"], "level_floor": "low"}, "level_floor"),
        ({"command": ["x"], "timeout_s": 0}, "timeout_s"),
        ({"command": ["x"], "env": {"A": 1}}, "env"),
        ({"command": ["x"], "colour": "red"}, "unknown key"),
    ],
)
def test_bad_server_tables_name_the_key(table: dict, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        parse_servers({"mcp": {"servers": {"s": table}}})


def test_server_names_that_collide_are_refused() -> None:
    with pytest.raises(ConfigError, match="same tool prefix"):
        parse_servers({"mcp": {"servers": {"a-b": {"command": ["x"]}, "a_b": {"command": ["y"]}}}})


@pytest.mark.parametrize(
    ("trust", "floor", "read_only", "destructive", "expected"),
    [
        (False, "safe", True, None, "moderate"),
        (True, "safe", True, None, "safe"),
        (True, "safe", True, True, "dangerous"),
        (False, "safe", None, None, "moderate"),
        (False, "safe", False, True, "dangerous"),
        (True, "moderate", True, False, "moderate"),
        (False, "dangerous", True, False, "dangerous"),
    ],
)
def test_levels_from_annotations(
    trust: bool, floor: str, read_only: bool | None, destructive: bool | None, expected: str
) -> None:
    config = McpServerConfig(name="s", command=("x",), trust_annotations=trust, level_floor=floor)
    assert config.level_for(read_only=read_only, destructive=destructive) == expected


def test_definitions_keep_schema_and_fill_gaps() -> None:
    config = McpServerConfig(name="s", command=("x",), exclude=frozenset({"hidden"}))
    tools = [
        types.Tool(
            name="do-it",
            input_schema={
                "$schema": "https://json-schema.org/draft/2020-12/schema",
                "type": "object",
                "properties": {"n": {"type": "integer"}},
            },
        ),
        types.Tool(name="hidden", input_schema={"type": "object"}),
    ]
    (definition,) = definitions_for(config, tools)
    assert definition.name == "s__do_it"
    assert definition.parameters == {"type": "object", "properties": {"n": {"type": "integer"}}}
    assert "do-it" in definition.description and "'s'" in definition.description
    assert definition.execution.retryable is False
    assert "mcp_tool:do-it" in definition.tags


def test_results_become_data_or_execution_errors() -> None:
    text = types.CallToolResult(content=[types.TextContent(type="text", text="plain")])
    assert convert_result("s", "t", text).data == "plain"
    structured = types.CallToolResult(
        content=[types.TextContent(type="text", text="{}")], structured_content={"n": 1}
    )
    assert convert_result("s", "t", structured).data == {"n": 1}
    mixed = types.CallToolResult(
        content=[
            types.TextContent(type="text", text="a"),
            types.ImageContent(type="image", data="aGk=", mime_type="image/png"),
        ]
    )
    data = convert_result("s", "t", mixed).data
    # A remote image stays an image (a native block for the deck's own clients), not base64 text.
    from tooldeck_hookspecs.content import Image, Resource

    assert data[0] == "a" and data[1] == Image("aGk=", "image/png")
    with_structured = types.CallToolResult(
        content=[
            types.TextContent(type="text", text="{}"),
            types.EmbeddedResource(type="resource", resource=types.TextResourceContents(
                uri="file:///x.txt", text="hello", mime_type="text/plain")),
        ],
        structured_content={"n": 1},
    )
    data = convert_result("s", "t", with_structured).data  # the resource is not dropped
    assert data[1] == Resource("file:///x.txt", text="hello", mime_type="text/plain")
    error = convert_result(
        "s", "t", types.CallToolResult(content=[types.TextContent(type="text", text="nope")],
                                       is_error=True)
    )
    assert not error.success and error.error is not None
    assert error.error.code == "EXECUTION_ERROR" and "nope" in error.error.message
