"""``tooldeck eval retrieval`` runs catalogs as they are: empty descriptions, 80-character names,
duplicates after normalisation, other languages. Real MiniLM + FAISS, a small synthetic set."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tooldeck._catalog import PROVIDER_NAME_LIMIT
from tooldeck._eval import _eval_file, load_dataset

os.environ.setdefault("HF_HUB_OFFLINE", "1")

LONG = "enterpriseBillingPlatformApi.InvoiceLifecycleManagementApi.cancelInvoiceAndRefund"


def _tool(name, description, **props):
    return {
        "name": name,
        "description": description,
        "parameters": {
            "type": "object",
            "properties": {k: {"type": "string", "description": v} for k, v in props.items()},
            "required": list(props)[:1],
        },
    }


@pytest.fixture(scope="module")
def messy_file(tmp_path_factory):
    assert len(LONG) > 80
    tools = [
        _tool("getWeather", "Get the current weather for a city.", city="City name"),
        _tool("get_weather", "Weather forecast for the next days.", city="City", days="Days"),
        _tool("get-weather", "", station="Weather station id"),  # duplicate + empty description
        _tool(LONG, "Cancel an invoice and refund the customer.", invoice_id="Invoice id"),
        _tool("sendEmail", "", to="Recipient address", subject="Subject", body="Body"),
        _tool("wechselkurs_abfragen", "Ruft den aktuellen Wechselkurs zwischen zwei Währungen ab.",
              von="Ausgangswährung", nach="Zielwährung"),
        _tool("查询航班", "查询两个城市之间的航班信息", origin="出发城市", destination="到达城市"),
        _tool("translateText", "Translate text into another language.", text="Text"),
        _tool("listFiles", "List the files in a folder.", path="Folder path"),
        {"name": "ping", "description": "Ping a host.", "category": None,  # Python type names
         "parameters": {"type": "dict", "properties": {"host": {"type": "str"}}}},
    ]
    queries = [
        {"query": "What's the weather like in Oslo right now?", "relevant": ["getWeather"],
         "split": "easy"},
        {"query": "Cancel invoice 42 and give the customer their money back.",
         "relevant": [LONG], "split": "easy"},
        {"query": "Send an email to Bob about the meeting.", "relevant": ["sendEmail"],
         "split": "easy"},
        {"query": "Wie ist der Wechselkurs von Euro zu Dollar?",
         "relevant": ["wechselkurs_abfragen"], "split": "other_language"},
        {"query": "查询从北京到上海的航班", "relevant": ["查询航班"], "split": "other_language"},
        {"query": "Translate 'hello' to French and email it to Alice.",
         "relevant": ["translateText", "sendEmail"], "split": "multi"},
    ]
    path = tmp_path_factory.mktemp("data") / "messy.json"
    path.write_text(json.dumps({"tools": tools, "queries": queries}, ensure_ascii=False),
                    encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def config(tmp_path_factory):
    return {"faiss": {"cache_dir": str(tmp_path_factory.mktemp("embeddings"))}}


def test_keep_names_leaves_the_dataset_as_it_is(messy_file):
    tools, queries = load_dataset(messy_file, keep_names=True)
    assert [t.name for t in tools][:4] == ["getWeather", "get_weather", "get-weather", LONG]
    assert tools[2].description == "" and queries[1]["relevant"] == [LONG]
    converted, _ = load_dataset(messy_file)  # the default is unchanged
    assert [t.name for t in converted][:3] == ["get_weather", "get_weather_2", "get_weather_3"]


async def test_every_tool_loads_and_every_query_is_scored(messy_file, config):
    figures = await _eval_file(str(messy_file), limit=15, n_queries=None, config=config)
    assert figures["tools"] == 10 and figures["queries"] == 6
    warnings = figures["registration_warnings"]
    assert warnings["description_derived"] == 2
    assert warnings["name_shortened"] == 1
    # getWeather takes get_weather first; the real get_weather and get-weather get _2 and _3.
    assert warnings["name_disambiguated"] == 2
    assert warnings["name_normalised"] == 7 and warnings["parameters_repaired"] == 1
    # Ten tools and a hand of 15: every gold tool is dealt, whatever its name became.
    assert figures["R@15"] == 100.0 and figures["complete@15"] == 100.0
    assert set(figures["splits"]) == {"easy", "other_language", "multi"}


async def test_gold_names_follow_the_renames(messy_file, config):
    from tooldeck._eval import _dataset_deck

    tools, _ = load_dataset(messy_file, keep_names=True)
    async with _dataset_deck(tools, config, lenient=True) as deck:
        alias = deck.catalog.resolve(LONG).name
        assert len(alias) <= PROVIDER_NAME_LIMIT
        hand = await deck.session().select("cancel the invoice and refund the customer", limit=3)
        assert alias in hand.names
        flights = await deck.session().select("查询从北京到上海的航班", limit=3)
        assert deck.catalog.resolve("查询航班").name in flights.names


def test_the_cli_runs_the_messy_catalog_with_json_output(messy_file, tmp_path):
    done = subprocess.run(
        [sys.executable, "-m", "tooldeck", "eval", "retrieval", str(messy_file),
         "--limit", "15", "--json"],
        capture_output=True, text=True, cwd=tmp_path, timeout=300,
        # The embedding cache goes to a temporary folder, not the user's.
        env={**os.environ, "HF_HUB_OFFLINE": "1", "XDG_CACHE_HOME": str(tmp_path / "cache")},
    )
    assert done.returncode == 0, done.stderr[-2000:]
    figures = json.loads(done.stdout)
    assert figures["tools"] == 10 and figures["R@15"] == 100.0
    # Each change is logged once, on stderr; stdout stays pure JSON.
    assert done.stderr.count("lenient registration") == sum(
        figures["registration_warnings"].values()
    )



def test_an_evaluation_deck_keeps_history_in_memory_even_with_a_shared_store() -> None:
    """A deployment that shares its history through Redis must not receive the replayed
    queries of ``tooldeck eval retrieval --history`` (nor bias the figures with its own)."""
    from tooldeck._eval import _isolated_history

    settings = _isolated_history({"faiss": {"history_store": "redis", "k": 20}})
    assert settings["faiss"] == {"history_store": "memory", "history_file": None, "k": 20}
