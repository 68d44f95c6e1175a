"""Rich tool results: images, audio, embedded resources and links, beside plain JSON data.

A tool returns one of these (or a list mixing them with text, or a dict holding them) as its
data::

    from tooldeck_hookspecs.content import Image

    def chart(series: list[float]) -> list:
        return ["Here is the chart.", Image(png_bytes, "image/png")]

At the deck's boundary each object becomes its JSON form, a dict tagged ``"$content"`` (so the
result stays JSON for the cache, Redis and the sandbox wire): ``{"$content": "image",
"mimeType": "image/png", "data": "<base64>"}``. The provider adapters then hand each block over
in the shape its API expects: MCP ``ImageContent`` / ``AudioContent`` / ``EmbeddedResource`` /
``ResourceLink`` blocks, Anthropic ``image`` / ``document`` blocks inside the ``tool_result``,
OpenAI image parts, Gemini ``inlineData`` parts; the JSON text the model reads names each block
(kind, type, size) instead of carrying its bytes.
"""

from __future__ import annotations

import base64
from collections.abc import Iterator, Mapping
from typing import Any

__all__ = [
    "CONTENT_KEY",
    "CONTENT_KINDS",
    "Audio",
    "Content",
    "Image",
    "Resource",
    "ResourceLink",
    "content_json",
    "is_content_block",
    "iter_blocks",
]

#: The key that marks a dict as the JSON form of a content object.
CONTENT_KEY = "$content"
#: The kinds a ``"$content"`` dict may name.
CONTENT_KINDS = ("image", "audio", "resource", "resource_link")


class Content:
    """Base of the rich result types; :meth:`to_json` gives the tagged JSON form."""

    __slots__ = ()
    kind = ""

    def to_json(self) -> dict[str, Any]:  # pragma: no cover - every subclass defines it
        raise NotImplementedError

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and other.to_json() == self.to_json()  # type: ignore[attr-defined]

    def __hash__(self) -> int:
        return hash(repr(sorted(self.to_json().items())))

    def __repr__(self) -> str:
        shown = {k: (f"<{len(v)} chars>" if k in ("data", "blob") else v)
                 for k, v in self.to_json().items() if k != CONTENT_KEY}
        return f"{type(self).__name__}({shown})"


def _b64(data: bytes | bytearray | memoryview | str) -> str:
    if isinstance(data, str):  # already base64 (as MCP servers send it): checked, kept
        base64.b64decode(data, validate=True)
        return data
    return base64.b64encode(bytes(data)).decode("ascii")


class _Media(Content):
    """Bytes of one media type (an image, a sound clip): raw bytes, or base64 text."""

    __slots__ = ("data", "mime_type")
    default_mime_type = ""

    def __init__(self, data: bytes | str, mime_type: str | None = None) -> None:
        self.data = _b64(data)
        self.mime_type = mime_type or self.default_mime_type

    def to_json(self) -> dict[str, Any]:
        """``{"$content": <kind>, "mimeType": ..., "data": <base64>}``."""
        return {CONTENT_KEY: self.kind, "mimeType": self.mime_type, "data": self.data}


class Image(_Media):
    """An image (PNG, JPEG, GIF, WebP): raw bytes, or base64 text."""

    __slots__ = ()
    kind = "image"
    default_mime_type = "image/png"


class Audio(_Media):
    """A sound clip (WAV, MP3, ...): raw bytes, or base64 text."""

    __slots__ = ()
    kind = "audio"
    default_mime_type = "audio/wav"


class Resource(Content):
    """An embedded resource: a file's text or bytes with its URI (MCP ``EmbeddedResource``)."""

    __slots__ = ("uri", "text", "blob", "mime_type")
    kind = "resource"

    def __init__(
        self,
        uri: str,
        *,
        text: str | None = None,
        data: bytes | str | None = None,
        mime_type: str | None = None,
    ) -> None:
        if (text is None) == (data is None):
            raise ValueError("a Resource holds either text= or data=")
        self.uri = uri
        self.text = text
        self.blob = None if data is None else _b64(data)
        self.mime_type = mime_type

    def to_json(self) -> dict[str, Any]:
        """``{"$content": "resource", "uri": ..., "mimeType": ..., "text" | "blob": ...}``."""
        out: dict[str, Any] = {CONTENT_KEY: "resource", "uri": self.uri}
        if self.mime_type:
            out["mimeType"] = self.mime_type
        if self.text is not None:
            out["text"] = self.text
        else:
            out["blob"] = self.blob
        return out


class ResourceLink(Content):
    """A link to a resource the client may fetch (MCP ``ResourceLink``), e.g. a written file."""

    __slots__ = ("uri", "name", "mime_type", "description")
    kind = "resource_link"

    def __init__(
        self, uri: str, name: str, *, mime_type: str | None = None, description: str | None = None
    ) -> None:
        self.uri = uri
        self.name = name
        self.mime_type = mime_type
        self.description = description

    def to_json(self) -> dict[str, Any]:
        """``{"$content": "resource_link", "uri": ..., "name": ..., ...}``."""
        out: dict[str, Any] = {CONTENT_KEY: "resource_link", "uri": self.uri, "name": self.name}
        if self.mime_type:
            out["mimeType"] = self.mime_type
        if self.description:
            out["description"] = self.description
        return out


def content_json(value: Any) -> Any:
    """``value`` with every content object replaced by its JSON form (other values as they are)."""
    if isinstance(value, Content):
        return value.to_json()
    if isinstance(value, list | tuple):
        return [content_json(item) for item in value]
    if isinstance(value, Mapping):
        return {key: content_json(item) for key, item in value.items()}
    return value


def is_content_block(value: Any) -> bool:
    """Whether ``value`` is the JSON form of a content object (a well-formed one)."""
    if not isinstance(value, Mapping):
        return False
    kind = value.get(CONTENT_KEY)
    if kind in ("image", "audio"):
        return isinstance(value.get("data"), str) and isinstance(value.get("mimeType"), str)
    if kind == "resource":
        return isinstance(value.get("uri"), str) and (
            isinstance(value.get("text"), str) or isinstance(value.get("blob"), str)
        )
    if kind == "resource_link":
        return isinstance(value.get("uri"), str) and isinstance(value.get("name"), str)
    return False


def iter_blocks(value: Any, _depth: int = 0) -> Iterator[Mapping[str, Any]]:
    """Every content block in JSON ``value``, depth first, in order."""
    if _depth > 64:
        return
    if is_content_block(value):
        yield value
    elif isinstance(value, list):
        for item in value:
            yield from iter_blocks(item, _depth + 1)
    elif isinstance(value, Mapping):
        for item in value.values():
            yield from iter_blocks(item, _depth + 1)
