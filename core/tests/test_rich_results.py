"""Rich results: tools return images, audio, resources and links; every provider gets its shape.

Issue 15 ("MCP and tool results as clients expect"). Real deck (schema, runner, policy with its
redaction); the sandbox wire is checked on its own encoder.
"""

from __future__ import annotations

import base64
import json

from tooldeck import ToolCall, tool
from tooldeck.adapters import result_messages
from tooldeck.testing import make_deck
from tooldeck_hookspecs import ToolResult
from tooldeck_hookspecs.content import Audio, Image, Resource, ResourceLink, iter_blocks

PNG = b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 4
WAV = b"RIFF" + b"\x00" * 64
PDF = b"%PDF-1.4 fake"


@tool(category="media")
def media(kind: str = "all") -> object:
    """Return media.

    Args:
        kind: which media
    """
    if kind == "image":
        return Image(PNG, "image/png")
    return [
        "Here is what you asked for.",
        Image(PNG, "image/png"),
        {"clip": Audio(WAV, "audio/wav"), "note": "a short clip"},
        Resource("file:///w/notes.txt", text="line one", mime_type="text/plain"),
        Resource("file:///w/report.pdf", data=PDF, mime_type="application/pdf"),
        ResourceLink("file:///w/out.csv", "out.csv", mime_type="text/csv"),
    ]


async def _result(kind: str = "all") -> ToolResult:
    async with make_deck(load_entry_points=["schema", "runner", "policy"], tools=[media]) as deck:
        return await deck.session().call("media", {"kind": kind})


async def test_content_objects_become_tagged_json_at_the_boundary():
    result = await _result()
    assert result.success, result.error
    json.dumps(result.data)  # plain JSON now: cacheable, shareable, sendable
    kinds = [block["$content"] for block in iter_blocks(result.data)]
    assert kinds == ["image", "audio", "resource", "resource", "resource_link"]
    image = result.data[1]
    assert base64.b64decode(image["data"]) == PNG  # redaction left the pixels alone


async def test_mcp_gets_native_blocks_and_the_text_names_them():
    result = await _result()
    call = ToolCall(name="media", arguments={}, id="c1")
    (message,) = result_messages("mcp", [(call, result)])
    content = message["content"]
    assert [b["type"] for b in content] == ["text", "image", "audio", "resource", "resource",
                                            "resource_link"]
    assert base64.b64decode(content[1]["data"]) == PNG and content[1]["mimeType"] == "image/png"
    assert content[3]["resource"] == {"uri": "file:///w/notes.txt", "mimeType": "text/plain",
                                      "text": "line one"}
    assert base64.b64decode(content[4]["resource"]["blob"]) == PDF
    assert content[5]["name"] == "out.csv"
    text = content[0]["text"]
    assert content[1]["data"] not in text  # placeholders, not bytes
    placeholder = json.loads(text)["data"][1]
    assert placeholder == {"$content": "image", "block": 1, "mimeType": "image/png",
                           "bytes": len(PNG)}
    assert message["structuredContent"]["data"][1] == placeholder


async def test_anthropic_openai_and_gemini_shapes():
    result = await _result()
    call = ToolCall(name="media", arguments={}, id="c1")
    (anthropic,) = result_messages("anthropic", [(call, result)])
    blocks = anthropic["content"][0]["content"]
    assert blocks[0]["type"] == "text"
    assert blocks[1] == {"type": "image", "source": {"type": "base64", "media_type": "image/png",
                                                     "data": base64.b64encode(PNG).decode()}}
    assert "audio" in blocks[2]["text"]  # the API has no audio in tool results: a note says so
    assert blocks[3]["type"] == "text" and "line one" in blocks[3]["text"]
    assert blocks[4]["type"] == "document"
    # Chat Completions: tool messages are text; the picture follows in one user message.
    tool_message, user = result_messages("openai", [(call, result)])
    assert tool_message["role"] == "tool" and isinstance(tool_message["content"], str)
    assert user["role"] == "user"
    urls = [p["image_url"]["url"] for p in user["content"] if p["type"] == "image_url"]
    assert urls == ["data:image/png;base64," + base64.b64encode(PNG).decode()]
    (item,) = result_messages("openai-responses", [(call, result)])
    parts = {p["type"] for p in item["output"]}
    assert {"input_text", "input_image", "input_file"} <= parts
    (gemini,) = result_messages("gemini", [(call, result)])
    inline = [p["inlineData"]["mimeType"] for p in gemini["parts"] if "inlineData" in p]
    assert inline == ["image/png", "audio/wav", "application/pdf"]


async def test_plain_results_keep_their_plain_shape():
    plain = ToolResult.ok({"a": 1, "text": "no blocks"})
    call = ToolCall(name="x", arguments={}, id="c")
    (message,) = result_messages("openai", [(call, plain)])
    assert message["content"] == json.dumps({"ok": True, "data": {"a": 1, "text": "no blocks"}})
    (mcp,) = result_messages("mcp", [(call, plain)])
    assert [b["type"] for b in mcp["content"]] == ["text"]


async def test_a_lone_image_and_a_look_alike_dict():
    result = await _result("image")
    assert result.data["$content"] == "image"
    call = ToolCall(name="media", arguments={}, id="c")
    (mcp,) = result_messages("mcp", [(call, result)])
    assert [b["type"] for b in mcp["content"]] == ["text", "image"]
    # A tool's own dict that merely uses the key is no block unless it is well-formed.
    fake = ToolResult.ok({"$content": "image", "data": 3})
    (mcp,) = result_messages("mcp", [(call, fake)])
    assert [b["type"] for b in mcp["content"]] == ["text"]


def test_the_sandbox_wire_carries_content_as_tagged_json():
    from tooldeck_runner._wire import dumps

    encoded = json.loads(dumps(ToolResult.ok(["hi", Image(PNG)])))
    assert encoded["data"][1] == {"$content": "image", "mimeType": "image/png",
                                  "data": base64.b64encode(PNG).decode()}


def test_redaction_spares_pixels_and_checks_the_rest():
    from tooldeck_policy.redact import redact_result

    pixels = "AKIAIOSFODNN7EXAMPLF" * 4  # base64 that happens to spell an AWS key id
    value = {"$content": "image", "mimeType": "image/png", "data": pixels}
    result = ToolResult.ok({"shot": value, "log": "password=hunter2hunter2 logged in"})
    redacted = redact_result(result)
    assert redacted is not None
    assert redacted.data["shot"]["data"] == pixels
    assert "hunter2hunter2" not in redacted.data["log"]
