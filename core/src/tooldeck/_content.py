"""Content blocks of a result (images, audio, resources) in each provider's native shape.

The JSON the model reads keeps a short placeholder where each block was (kind, type, size, and
its number), and the blocks go beside it in the shape the provider's API expects. See
:mod:`tooldeck_hookspecs.content` for what tools return.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping
from typing import Any

from tooldeck_hookspecs.content import CONTENT_KEY, is_content_block

__all__ = ["anthropic_block", "gemini_part", "mcp_block", "openai_part", "split_blocks"]

_MAX_DEPTH = 64


def split_blocks(payload: Any) -> tuple[Any, list[Mapping[str, Any]]]:
    """``payload`` with each content block replaced by a placeholder, and the blocks in order.

    Payloads without blocks come back as they are (the same object) with an empty list.
    """
    blocks: list[Mapping[str, Any]] = []

    def walk(node: Any, depth: int) -> Any:
        if depth > _MAX_DEPTH:
            return node
        if is_content_block(node):
            blocks.append(node)
            return _placeholder(node, len(blocks))
        if isinstance(node, list):
            items = [walk(item, depth + 1) for item in node]
            return node if all(a is b for a, b in zip(items, node, strict=True)) else items
        if isinstance(node, Mapping):
            changed = {key: walk(item, depth + 1) for key, item in node.items()}
            same = all(changed[key] is item for key, item in node.items())
            return node if same else changed
        return node

    return walk(payload, 0), blocks


def _size(block: Mapping[str, Any]) -> int | None:
    data = block.get("data", block.get("blob"))
    if isinstance(data, str):
        return len(data) * 3 // 4 - data[-2:].count("=")
    text = block.get("text")
    return len(text.encode("utf-8", "surrogatepass")) if isinstance(text, str) else None


def _placeholder(block: Mapping[str, Any], number: int) -> dict[str, Any]:
    out: dict[str, Any] = {CONTENT_KEY: block[CONTENT_KEY], "block": number}
    for key in ("mimeType", "uri", "name"):
        if key in block:
            out[key] = block[key]
    size = _size(block)
    if size is not None:
        out["bytes"] = size
    return out


def mcp_block(block: Mapping[str, Any]) -> dict[str, Any]:
    """An MCP content block (``ImageContent``, ``AudioContent``, ``EmbeddedResource``,
    ``ResourceLink``) as a dict of the protocol's field names."""
    kind = block[CONTENT_KEY]
    if kind in ("image", "audio"):
        return {"type": kind, "data": block["data"], "mimeType": block["mimeType"]}
    if kind == "resource":
        resource: dict[str, Any] = {"uri": block["uri"]}
        if "mimeType" in block:
            resource["mimeType"] = block["mimeType"]
        if "text" in block:
            resource["text"] = block["text"]
        else:
            resource["blob"] = block["blob"]
        return {"type": "resource", "resource": resource}
    link: dict[str, Any] = {"type": "resource_link", "uri": block["uri"], "name": block["name"]}
    for key in ("mimeType", "description"):
        if key in block:
            link[key] = block[key]
    return link


def _note(block: Mapping[str, Any], number: int) -> str:
    kind = block[CONTENT_KEY]
    what = block.get("mimeType") or block.get("uri") or kind
    return f"[block {number}: {kind} {what} — this API cannot carry it]"


def anthropic_block(block: Mapping[str, Any], number: int) -> dict[str, Any]:
    """A content block of an Anthropic ``tool_result``: ``image``, ``document`` (PDF, text),
    or a text note for what the API cannot hold (audio)."""
    kind = block[CONTENT_KEY]
    mime = str(block.get("mimeType") or "")
    if kind == "image":
        return {"type": "image",
                "source": {"type": "base64", "media_type": mime, "data": block["data"]}}
    if kind == "resource" and mime == "application/pdf" and "blob" in block:
        return {"type": "document",
                "source": {"type": "base64", "media_type": mime, "data": block["blob"]}}
    if kind == "resource" and "text" in block:
        return {"type": "text", "text": f"[block {number}: {block['uri']}]\n{block['text']}"}
    if kind == "resource_link":
        return {"type": "text", "text": f"[block {number}: link {block['name']} {block['uri']}]"}
    return {"type": "text", "text": _note(block, number)}


def openai_part(block: Mapping[str, Any], number: int, *, responses: bool) -> dict[str, Any]:
    """An OpenAI content part: an image as a data URL (``image_url`` for Chat Completions,
    ``input_image`` for the Responses API), text for resources, a note otherwise."""
    kind = block[CONTENT_KEY]
    if kind == "image":
        url = f"data:{block['mimeType']};base64,{block['data']}"
        if responses:
            return {"type": "input_image", "image_url": url}
        return {"type": "image_url", "image_url": {"url": url}}
    if kind == "resource" and "text" in block:
        text = f"[block {number}: {block['uri']}]\n{block['text']}"
    elif kind == "resource" and responses and block.get("mimeType") == "application/pdf":
        filename = str(block["uri"]).rsplit("/", 1)[-1] or "file.pdf"
        return {"type": "input_file", "filename": filename,
                "file_data": f"data:application/pdf;base64,{block['blob']}"}
    elif kind == "resource_link":
        text = f"[block {number}: link {block['name']} {block['uri']}]"
    else:
        text = _note(block, number)
    return {"type": "input_text" if responses else "text", "text": text}


def gemini_part(block: Mapping[str, Any], number: int) -> dict[str, Any]:
    """A Gemini part: ``inlineData`` for images, audio and binary resources, text otherwise."""
    kind = block[CONTENT_KEY]
    if kind in ("image", "audio"):
        return {"inlineData": {"mimeType": block["mimeType"], "data": block["data"]}}
    if kind == "resource" and "blob" in block:
        mime = str(block.get("mimeType") or "application/octet-stream")
        return {"inlineData": {"mimeType": mime, "data": block["blob"]}}
    if kind == "resource":
        return {"text": f"[block {number}: {block['uri']}]\n{block['text']}"}
    return {"text": f"[block {number}: link {block['name']} {block['uri']}]"}


def decoded(block: Mapping[str, Any]) -> bytes:
    """The bytes of an image, audio or binary resource block."""
    return base64.b64decode(str(block.get("data", block.get("blob", ""))))
