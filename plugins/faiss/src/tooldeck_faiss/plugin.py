"""The ``faiss`` entry point: provides the filter stage's retriever.

Every ``tooldeck`` command loads this module, most of them (``call``, ``tools``, ``plugins``,
``export``) without ever selecting: it imports neither numpy nor FAISS nor the model stack. The
hook returns a :class:`LazyFaissRetriever`, which builds the real :class:`FaissRetriever` at the
first retriever call.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from tooldeck_hookspecs import ConfigError, ScoredTool, ToolDefinition, hookimpl

# The bench and evaluation hooks (tooldeck bench, eval, demo) live in modules of their own.
from ._bench_figures import tooldeck_bench_descriptions, tooldeck_bench_figures  # noqa: F401
from ._evaluation import tooldeck_evaluation_settings, tooldeck_token_counter  # noqa: F401

if TYPE_CHECKING:
    from ._retriever import FaissRetriever

__all__ = ["SETTING_NAMES", "LazyFaissRetriever"]

#: The keys of ``[tool.tooldeck.faiss]``: the fields of ``RetrieverSettings``, spelled out here so
#: that checking the key names at start-up imports no numpy (a test keeps the two equal).
SETTING_NAMES: tuple[str, ...] = (
    "model",
    "cache_dir",
    "approx_threshold",
    "lexical_weight",
    "full_query_weight",
    "candidates",
    "field_weights",
    "bm25_k1",
    "bm25_b",
    "hnsw_m",
    "hnsw_ef_search",
    "approx_kind",
    "ivf_nprobe",
    "max_segments",
    "embed_whole_query",
    "query_cache_size",
    "faiss_threads",
    "encoder",
    "encoder_threads",
    "quantize",
    "batch_size",
    "split_on_verbs",
    "strip_quoted",
    "adaptive_fusion",
    "fusion_adapt",
    "intent_diversity",
    "history",
    "history_file",
    "history_max_records",
    "history_store",
    "history_sync_s",
    "history_threshold",
    "history_weight",
    "history_curve",
    "second_encoder",
    "second_weight",
    "second_weight_multi",
    "second_margin_scale",
    "second_diversity_share",
    "second_depth",
    "correct_spelling",
    "summary_view",
)


class LazyFaissRetriever:
    """The filter stage's retriever, built on first use.

    Unknown setting names fail at construction (start-up); the values are checked by
    ``RetrieverSettings`` when the real retriever is built, i.e. at the first ``index``/``search``.
    Any attribute not defined here is read from the real retriever (building it).
    """

    def __init__(self, table: Mapping[str, Any], config: Mapping[str, Any] | None) -> None:
        unknown = sorted(set(table) - set(SETTING_NAMES))
        if unknown:
            raise ConfigError(
                f"[tool.tooldeck.faiss]: unknown setting(s) {', '.join(unknown)}; "
                f"known: {', '.join(sorted(SETTING_NAMES))}"
            )
        self._table = dict(table)
        self._config = config
        self._built: FaissRetriever | None = None
        # Built from a worker thread (to_thread) as well as from the trio thread.
        self._lock = threading.Lock()

    @property
    def built(self) -> bool:
        """Whether the real retriever exists yet."""
        return self._built is not None

    @property
    def retriever(self) -> FaissRetriever:
        """The real retriever (built now if it was not)."""
        built = self._built
        if built is None:
            with self._lock:
                if self._built is None:
                    from ._retriever import FaissRetriever, RetrieverSettings

                    self._built = FaissRetriever(
                        RetrieverSettings.from_mapping(self._table), config=self._config
                    )
                built = self._built
        return built

    async def index(self, tools: Sequence[ToolDefinition]) -> None:
        """See :meth:`FaissRetriever.index`."""
        await self.retriever.index(tools)

    async def add(self, tools: Sequence[ToolDefinition]) -> None:
        """See :meth:`FaissRetriever.add`."""
        await self.retriever.add(tools)

    async def remove(self, names: Sequence[str]) -> None:
        """See :meth:`FaissRetriever.remove`."""
        await self.retriever.remove(names)

    async def search(self, query: str, k: int) -> list[ScoredTool]:
        """See :meth:`FaissRetriever.search`."""
        return await self.retriever.search(query, k)

    def record_use(self, query: str, tool: str) -> None:
        """See :meth:`FaissRetriever.record_use`."""
        self.retriever.record_use(query, tool)

    async def aclose(self) -> None:
        """Close the real retriever if it was built (closing never builds it)."""
        if self._built is not None:
            await self._built.aclose()

    def __getattr__(self, name: str) -> Any:
        # Only reached for names not defined above (settings, statistics, warm_up, ...).
        if name.startswith("__") or name in {"_built", "_table", "_config", "_lock"}:
            raise AttributeError(name)
        return getattr(self.retriever, name)

    def __repr__(self) -> str:
        state = "built" if self._built is not None else "not built"
        return f"<LazyFaissRetriever ({state})>"


@hookimpl
def tooldeck_retriever(settings: Mapping[str, Any]) -> LazyFaissRetriever:
    """A hybrid BM25 + embedding retriever configured from ``settings["faiss"]``."""
    table = settings.get("faiss", {}) if isinstance(settings, Mapping) else {}
    if not isinstance(table, Mapping):
        raise ConfigError(f"[tool.tooldeck.faiss] must be a table, got {table!r}")
    return LazyFaissRetriever(table or {}, settings if isinstance(settings, Mapping) else None)


@hookimpl
def tooldeck_config_schema() -> dict[str, Any]:
    """The ``[faiss]`` table: key names from :data:`SETTING_NAMES` (values ``RetrieverSettings``
    checks)."""
    return {
        "faiss": {
            "type": "object",
            "properties": {name: {} for name in SETTING_NAMES},
            "additionalProperties": False,
        }
    }
