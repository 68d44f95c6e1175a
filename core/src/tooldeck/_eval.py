"""``tooldeck eval retrieval``.

Pure functions over a deck: :func:`load_dataset` turns a tool-retrieval dataset into tool
definitions and queries, :func:`eval_retrieval` runs every query through the normal selection path
(whichever retriever is installed, plus rule filters) and scores the hands. Figures are
reported, never asserted. (The selection figures of ``tooldeck bench`` are the retriever
plugin's: ``tooldeck_bench_figures``.)
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import trio

from tooldeck_hookspecs import TooldeckError, ToolDefinition

from ._catalog import normalise_name

__all__ = [
    "load_dataset",
    "snake_case",
    "retrieval_metrics",
    "eval_retrieval",
    "eval_with_history",
    "evaluation_config",
    "run_eval_cli",
]

#: The hooks that bring an installed entry point into the evaluation deck: the retriever and the
#: rule filters (the normal selection path), the stages a deck cannot start without, and the
#: evaluation's own hook. Chosen by hook, not by name: a third-party retriever is evaluated too.
EVAL_HOOKS = (
    "tooldeck_retriever",
    "tooldeck_filter_tools",
    "tooldeck_validate_tool",
    "tooldeck_argument_validator",
    "tooldeck_executor",
    "tooldeck_evaluation_settings",
)


def _evaluation_plugins(config_file: str | None = None) -> Any:
    """The installed entry points the configuration allows, loaded (tool packs included: the
    caller picks the ones that implement :data:`EVAL_HOOKS`)."""
    from ._config import load_config
    from ._plugins import TooldeckPluginManager

    manager = TooldeckPluginManager()
    manager.load_entry_points(load_config(config_file).allows, strict=False)
    return manager


def evaluation_config(config_file: str | None = None) -> tuple[dict[str, Any], str | None]:
    """The tables of the configuration in use that the evaluated plugins own, and its source.

    ``tooldeck eval retrieval`` measures the selection a deployment really has: the
    ``[tool.tooldeck.faiss]`` table (or another retriever's) of ``config_file``, else of
    ``TOOLDECK_CONFIG``, else of the file found from the current directory, applies. Tables of
    other stages (runner, cache, ...) are left out: the evaluation deck does not load them.
    """
    from ._config import load_config

    config = load_config(config_file)
    manager = _evaluation_plugins(config_file)
    wanted = set(_evaluation_entry_points(manager))
    owned: set[str] = set()
    for impl in manager.impls("tooldeck_config_schema"):
        if impl.plugin not in wanted:
            continue
        try:
            tables = impl()
        except Exception:  # Deck.load reports a broken schema hook; here it just owns nothing
            continue
        if isinstance(tables, dict):
            owned.update(str(name) for name in tables)
    settings = {
        name: value for name, value in config.settings.items() if name in owned
    }
    return settings, (str(config.source) if config.source and settings else None)


def _evaluation_entry_points(manager: Any) -> list[str]:
    return sorted(
        {
            impl.plugin
            for hook in EVAL_HOOKS
            for impl in manager.impls(hook)
            if manager.is_entry_point(impl.plugin)
        }
    )


def snake_case(name: str) -> str:
    """``getHTTPStatus`` -> ``get_http_status``; anything else becomes a valid tool name.

    The same conversion lenient registration applies (:func:`tooldeck._catalog.normalise_name`).
    """
    return normalise_name(name)


def load_dataset(
    path: str | Path, *, keep_names: bool = False
) -> tuple[list[ToolDefinition], list[dict[str, Any]]]:
    """Tools and queries of a retrieval dataset (``{"tools": [...], "queries": [...]}``).

    By default tool names are converted to snake_case (made unique with a numeric suffix when
    two collide); each query's ``relevant`` is rewritten to the new names and the original list
    is kept under ``relevant_original``. With ``keep_names`` the tools keep the dataset's names
    and descriptions exactly (for lenient registration, which renames and reports what it
    must) and ``relevant`` is left as it is. Categories and parameters are taken as given
    (a missing category is ``general``); tools have no executable.
    """
    data = _read_dataset(path)
    tools: list[ToolDefinition] = []
    mapping: dict[str, str] = {}
    taken: set[str] = set()
    for raw in data["tools"]:
        original = str(raw.get("name", ""))
        name = original
        if not keep_names:
            name = base = snake_case(original)
            suffix = 2
            while name in taken:
                name = f"{base}_{suffix}"
                suffix += 1
            taken.add(name)
        mapping[original] = name
        parameters = raw.get("parameters") or {"type": "object", "properties": {}}
        tools.append(
            ToolDefinition(
                name=name,
                description=str(raw.get("description") or ""),
                category=str(raw.get("category") or "general"),
                parameters=parameters,
                execute=None,
            )
        )
    queries = []
    for i, raw in enumerate(data["queries"]):
        relevant = [str(r) for r in raw.get("relevant", [])]
        queries.append(
            {
                **raw,
                "id": raw.get("id", str(i)),
                "split": raw.get("split", "all"),
                "relevant_original": relevant,
                "relevant": relevant
                if keep_names
                else [mapping.get(r, snake_case(r)) for r in relevant],
            }
        )
    return tools, queries


#: Datasets larger than this are refused before parsing (the open sets are a few MB).
_DATASET_MAX_BYTES = 1024 * 1024 * 1024


def _read_dataset(path: str | Path) -> dict[str, Any]:
    """The dataset's JSON, checked for the shape :func:`load_dataset` reads.

    :raises TooldeckError: one line naming the file and what is wrong with it (the command
        prints it and exits 2), never a traceback.
    """

    def bad(why: str) -> TooldeckError:
        return TooldeckError(f"dataset {str(path)!r}: {why}")

    try:
        file = Path(path)
        if not file.is_file():
            raise bad("not found, or not a regular file")
        if file.stat().st_size > _DATASET_MAX_BYTES:
            raise bad(f"larger than {_DATASET_MAX_BYTES} bytes")
        data = json.loads(file.read_text(encoding="utf-8"))
    except OSError as exc:
        raise bad(f"cannot be read: {exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:
        raise bad(f"is not UTF-8 text: {exc.reason} at byte {exc.start}") from None
    except RecursionError:
        raise bad("is nested too deeply to be read as JSON") from None
    except ValueError as exc:  # JSONDecodeError, and integers too long to convert
        raise bad(f"is not usable JSON: {exc}") from None
    if not isinstance(data, dict):
        raise bad(f'must be a JSON object {{"tools": [...], "queries": [...]}}, not a '
                  f"{type(data).__name__}")
    for table in ("tools", "queries"):
        items = data.get(table)
        if not isinstance(items, list):
            raise bad(f"{table!r} must be a list, not {type(items).__name__}")
        for index, item in enumerate(items):
            if not isinstance(item, dict):
                raise bad(f"{table}[{index}] must be an object, not {type(item).__name__}")
    for index, item in enumerate(data["tools"]):
        if not isinstance(item.get("name"), str) or not item["name"]:
            raise bad(f"tools[{index}].name must be a non-empty string")
        # Parameters of any other shape (a list of OpenAPI parameters, a string) are left to
        # lenient registration, which repairs or replaces them and says so: a real catalog's
        # odd tool must not abort the run.
    for index, item in enumerate(data["queries"]):
        if not isinstance(item.get("query"), str):
            raise bad(f"queries[{index}].query must be a string")
        relevant = item.get("relevant", [])
        if not isinstance(relevant, list) or not all(isinstance(r, str) for r in relevant):
            raise bad(f"queries[{index}].relevant must be a list of tool names")
    return data


def _percent(values: Sequence[float]) -> float:
    return round(100.0 * sum(values) / len(values), 2) if values else 0.0


def retrieval_metrics(
    hands: Sequence[Sequence[str]], golds: Sequence[Sequence[str]]
) -> dict[str, float]:
    """R@5, R@10, R@15, NDCG@10 (binary relevance) and complete@15, as percentages."""
    recall: dict[int, list[float]] = {5: [], 10: [], 15: []}
    ndcg: list[float] = []
    complete: list[float] = []
    for hand, gold_list in zip(hands, golds, strict=True):
        gold = set(gold_list)
        if not gold:
            continue
        for k, values in recall.items():
            values.append(len(gold & set(hand[:k])) / len(gold))
        complete.append(float(gold <= set(hand[:15])))
        dcg = sum(1 / math.log2(i + 2) for i, n in enumerate(hand[:10]) if n in gold)
        ideal = sum(1 / math.log2(i + 2) for i in range(min(10, len(gold))))
        ndcg.append(dcg / ideal)
    return {
        "R@5": _percent(recall[5]),
        "R@10": _percent(recall[10]),
        "R@15": _percent(recall[15]),
        "NDCG@10": _percent(ndcg),
        "complete@15": _percent(complete),
    }


def _quantile(values: Sequence[float], q: float) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def eval_retrieval(
    deck: Any,
    queries: Sequence[Mapping[str, Any]],
    *,
    limit: int = 15,
    n_queries: int | None = None,
) -> dict[str, Any]:
    """Run each query through ``deck.session().select`` and score the hands.

    Returns ``R@5``, ``R@10``, ``R@15``, ``NDCG@10``, ``complete@15`` (percentages 0-100),
    ``p50_ms`` and ``p95_ms`` (selection latency), ``build_s`` (index build, 0 when the deck
    was already indexed), ``queries`` (how many were run) and ``splits`` (the same metrics per
    ``split`` of the queries). A hand is cut at ``limit``, so R@15 with ``limit=10`` is R@10.
    """
    selected = list(queries)[: n_queries if n_queries else None]
    build_s = await deck.ensure_index()
    session = deck.session()
    hands: list[list[str]] = []
    latencies: list[float] = []
    for query in selected:
        started = time.perf_counter()
        hand = await session.select(str(query["query"]), limit=limit)
        latencies.append((time.perf_counter() - started) * 1000.0)
        hands.append([t.name for t in hand.tools])
    golds = [list(q["relevant"]) for q in selected]
    figures: dict[str, Any] = retrieval_metrics(hands, golds)
    figures.update(
        {
            "p50_ms": round(statistics.median(latencies), 2) if latencies else 0.0,
            "p95_ms": round(_quantile(latencies, 0.95), 2),
            "build_s": round(build_s, 3),
            "queries": len(selected),
        }
    )
    splits: dict[str, dict[str, Any]] = {}
    for name in dict.fromkeys(str(q.get("split", "all")) for q in selected):
        idx = [i for i, q in enumerate(selected) if str(q.get("split", "all")) == name]
        part = retrieval_metrics([hands[i] for i in idx], [golds[i] for i in idx])
        part["queries"] = len(idx)
        splits[name] = part
    figures["splits"] = splits
    return figures


def _dataset_deck(
    tools: Sequence[ToolDefinition],
    config: Mapping[str, Any] | None,
    *,
    lenient: bool = False,
    config_file: str | None = None,
) -> Any:
    """An isolated deck holding the dataset's tools and the installed selection plugins.

    ``lenient`` registers them as real catalogs need (see ``Deck.add_tools(lenient=True)``).
    """
    from .testing import inline_plugin, make_deck

    wanted = _evaluation_entry_points(_evaluation_plugins(config_file))

    def tooldeck_register_tools(register: Any) -> None:
        for tool in tools:
            if lenient:
                register(tool, lenient=True)
            else:
                register(tool)

    pack = inline_plugin(tooldeck_register_tools, name="eval-dataset")
    return make_deck(pack, load_entry_points=wanted, config=dict(config or {}))


async def _eval_file(
    path: str,
    *,
    limit: int,
    n_queries: int | None,
    config: Mapping[str, Any] | None,
    history: float = 0.0,
    config_file: str | None = None,
) -> dict[str, Any]:
    # The dataset as it is: lenient registration renames, derives and reports what strict
    # registration would refuse, and the gold names follow the renames through the aliases.
    tools, queries = load_dataset(path, keep_names=True)
    deck = _dataset_deck(
        tools, _isolated_history(config, config_file), lenient=True, config_file=config_file
    )
    async with deck:
        catalog = deck.catalog
        for query in queries:
            query["relevant"] = [
                found.name if (found := catalog.resolve(r)) is not None else normalise_name(r)
                for r in query["relevant"]
            ]
        if history > 0:
            figures = await eval_with_history(
                deck, queries[: n_queries or None], history, limit=limit
            )
        else:
            figures = await eval_retrieval(deck, queries, limit=limit, n_queries=n_queries)
        kinds: dict[str, int] = {}
        for change in deck.registration_warnings:
            kinds[change.kind] = kinds.get(change.kind, 0) + 1
    figures["tools"] = len(catalog)
    figures["registration_warnings"] = dict(sorted(kinds.items()))
    return figures


def run_eval_cli(args: argparse.Namespace) -> int:
    """``tooldeck eval retrieval DATASET.json [--limit N] [--queries N] [--json]``."""
    config_file = getattr(args, "config", None)
    config, source = evaluation_config(config_file)
    if config_file and not config:
        # Said, not silent: figures of the defaults read as the file's would mislead.
        sys.stderr.write(
            f"tooldeck: {config_file} has no table of the evaluated plugins; "
            "evaluating the default selection settings\n"
        )
    history = float(getattr(args, "history", None) or 0.0)
    figures = trio.run(
        lambda: _eval_file(
            args.dataset,
            limit=args.limit,
            n_queries=args.queries,
            config=config,
            history=history,
            config_file=config_file,
        )
    )
    figures["settings_from"] = source
    if args.json:
        sys.stdout.write(json.dumps(figures, indent=2) + "\n")
        return 0
    from rich.console import Console
    from rich.table import Table

    metric_keys = ["R@5", "R@10", "R@15", "NDCG@10", "complete@15", "queries"]
    table = Table(title=f"retrieval on {Path(args.dataset).name} (limit {args.limit})")
    table.add_column("split")
    for key in metric_keys:
        table.add_column(key, justify="right")
    for name, part in {"all": figures, **figures["splits"]}.items():
        table.add_row(name, *(str(part[k]) for k in metric_keys))
    console = Console()
    console.print(table)
    console.print(
        f"selection p50 {figures['p50_ms']} ms, p95 {figures['p95_ms']} ms; "
        f"index build {figures['build_s']} s for {figures['tools']} tools"
    )
    if source:
        console.print(f"selection settings from {source}: {', '.join(sorted(config))}")
    if figures["registration_warnings"]:
        changes = ", ".join(f"{n} {k}" for k, n in figures["registration_warnings"].items())
        console.print(f"admitted leniently: {changes}")
    return 0


def _isolated_history(
    config: Mapping[str, Any] | None, config_file: str | None = None
) -> dict[str, Any]:
    """The evaluation deck's configuration: each plugin's ``tooldeck_evaluation_settings``
    merged over ``config`` (the faiss plugin keeps its use history in memory there: an
    evaluation neither reads the deployment's history nor writes the replayed queries into it)."""
    settings = dict(config or {})
    manager = _evaluation_plugins(config_file)
    for impl in reversed(manager.impls("tooldeck_evaluation_settings")):  # registration order
        tables = impl(settings=dict(settings))
        if tables:
            settings.update(tables)
    return settings


async def eval_with_history(
    deck: Any,
    queries: Sequence[Mapping[str, Any]],
    fraction: float,
    *,
    limit: int = 15,
    seed: int = 0,
) -> dict[str, Any]:
    """Replay ``fraction`` of the queries as use history, then evaluate on the rest.

    The queries are shuffled with ``seed``; the first ``fraction`` of them are recorded as if a
    model had called each of their gold tools (``retriever.record_use``), and the figures are
    those of the remaining queries. ``without_history`` holds the same remaining queries'
    figures measured before anything was recorded, so the gain is read on one query set.
    """
    import random

    fraction = min(max(float(fraction), 0.0), 0.95)
    order = list(range(len(queries)))
    random.Random(seed).shuffle(order)
    cut = round(fraction * len(order))
    replayed = [queries[i] for i in order[:cut]]
    rest = [queries[i] for i in sorted(order[cut:])]
    await deck.ensure_index()
    retriever = deck.retriever
    recorder = getattr(retriever, "record_use", None)
    before = await eval_retrieval(deck, rest, limit=limit)
    if recorder is None:
        before["history"] = {"fraction": fraction, "recorded": 0, "supported": False}
        return before
    # The replayed queries must have been searched: the deck records a call against the
    # hand it dealt, and the retriever takes the task's vector from that search.
    session = deck.session()
    recorded = 0
    for query in replayed:
        await session.select(str(query["query"]), limit=limit)
        for tool in query["relevant"]:
            recorder(str(query["query"]), str(tool))
            recorded += 1
    after = await eval_retrieval(deck, rest, limit=limit)
    after["without_history"] = {k: v for k, v in before.items() if k != "splits"}
    after["without_history"]["splits"] = before["splits"]
    after["history"] = {
        "fraction": fraction,
        "replayed_queries": len(replayed),
        "recorded": recorded,
        "seed": seed,
    }
    return after
