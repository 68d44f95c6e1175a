"""Fixtures of the tooldeck-faiss tests: one real model per session, a hand-made catalog."""

from __future__ import annotations

import os

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
# A developer's own selection history must not steer these tests' rankings.
os.environ["TOOLDECK_HISTORY_FILE"] = "off"

from tooldeck_hookspecs import ToolDefinition


def _tool(name: str, description: str, category: str, **params: str) -> ToolDefinition:
    return ToolDefinition(
        name=name,
        description=description,
        category=category,
        parameters={
            "type": "object",
            "properties": {p: {"type": "string", "description": d} for p, d in params.items()},
        },
    )


HANDMADE = [
    _tool("file_read", "Read the contents of a text file.", "filesystem", path="File path"),
    _tool("file_write", "Write text to a file, creating it if needed.", "filesystem",
          path="File path", content="Text to write"),
    _tool("list_directory", "List the entries of a folder.", "filesystem", path="Folder"),
    _tool("delete_file", "Delete a file from disk.", "filesystem", path="File path"),
    _tool("run_shell_command", "Run a command in a bash shell and return its output.", "shell",
          command="The command line"),
    _tool("web_search", "Search the web and return result titles and links.", "search",
          query="Search terms"),
    _tool("fetch_url", "Download a web page and return its text.", "browser", url="Address"),
    _tool("send_email", "Send an email message to a recipient.", "api",
          to="Recipient address", subject="Subject line", body="Message body"),
    _tool("get_weather", "Current weather conditions and forecast for a city.", "api",
          city="City name"),
    _tool("convert_currency", "Convert an amount of money between currencies.", "api",
          amount="Amount", source="Currency code", target="Currency code"),
    _tool("translate_text", "Translate text into another language.", "api",
          text="Text", language="Target language"),
    _tool("create_calendar_event", "Add an event or meeting to the calendar.", "api",
          title="Event title", start="Start time"),
    _tool("query_database", "Run a SQL query against the database.", "code", sql="SQL"),
    _tool("git_commit", "Commit staged changes to the git repository.", "code",
          message="Commit message"),
    _tool("compress_archive", "Create a zip archive from files.", "filesystem",
          paths="Files to include"),
    _tool("resize_image", "Resize a picture to the given width and height.", "media",
          path="Image file", width="Pixels", height="Pixels"),
    _tool("getStockPrice", "Get the latest trading price of a company's shares.", "finance",
          ticker="Stock symbol"),
    _tool("summarize_text", "Summarize a long text into a few sentences.", "api",
          text="Text"),
    _tool("set_reminder", "Remind the user of something at a given time.", "api",
          time="When", note="What to remember"),
    _tool("python_exec", "Execute a Python snippet and return what it prints.", "code",
          code="Python source"),
]


@pytest.fixture(scope="session")
def st_model():
    """The real all-MiniLM-L6-v2, loaded once for the whole test session."""
    from sentence_transformers import SentenceTransformer
    from tooldeck_faiss import default_model_path

    return SentenceTransformer(default_model_path(), device="cpu")


@pytest.fixture
def handmade():
    """Twenty everyday tools with known answers."""
    return list(HANDMADE)


@pytest.fixture
def make_retriever(st_model, tmp_path):
    """Build retrievers that share the session's model and a per-test cache folder."""
    from tooldeck_faiss import FaissRetriever, RetrieverSettings

    def make(**settings):
        settings.setdefault("cache_dir", str(tmp_path / "cache"))
        return FaissRetriever(RetrieverSettings(**settings), model=st_model)

    return make
