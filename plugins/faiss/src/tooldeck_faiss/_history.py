"""What the deck learnt from use: (task, tool called) records, bounded, persisted privately.

A record says "for a task worded like this, the model called that tool". The retriever compares
a new query's vectors with the recorded tasks' and lifts the tools used for close ones (see
:meth:`SelectionHistory.boosts`). Records live in memory and, when a path is given, in one JSON
file written atomically with mode 0600 (the tasks are the deployment's users' words). The file
is bounded: at most ``max_records`` records of at most ``max_query_chars`` characters each; the
least recently used record goes first.
"""

from __future__ import annotations

import base64
import json
import os
import tempfile
import threading
import time
from collections import OrderedDict
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import attrs
import numpy as np

__all__ = ["SelectionHistory", "HistoryStatistics", "default_history_path"]

#: Environment variable naming the history file; ``off`` (or empty) keeps history in memory.
HISTORY_FILE_ENV = "TOOLDECK_HISTORY_FILE"
_FORMAT = 1


def default_history_path() -> str | None:
    """``$TOOLDECK_HISTORY_FILE``, else ``selection-history.json`` in tooldeck's state folder.

    None (memory only) under pytest unless the variable names a file: a test suite's calls
    are not a deployment's use, and a history shared between test runs would make rankings
    depend on what ran before.
    """
    env = os.environ.get(HISTORY_FILE_ENV)
    if env is not None:
        return None if env.strip().lower() in {"", "off", "none", "memory"} else env
    if "PYTEST_CURRENT_TEST" in os.environ:
        return None
    import platformdirs

    return str(Path(platformdirs.user_state_dir("tooldeck")) / "selection-history.json")


@attrs.frozen
class HistoryStatistics:
    """A snapshot of a history: records held, records added since start, file (or None)."""

    records: int
    recorded: int
    path: str | None


@attrs.define
class _Record:
    query: str
    tool: str
    count: int
    last: float
    vector: np.ndarray | None


def _pack(vector: np.ndarray) -> str:
    return base64.b64encode(np.asarray(vector, dtype=np.float16).tobytes()).decode("ascii")


def _unpack(text: str, dim: int | None) -> np.ndarray | None:
    try:
        vector = np.frombuffer(base64.b64decode(text, validate=True), dtype=np.float16)
    except (ValueError, TypeError):
        return None
    if dim is not None and vector.size != dim:
        return None
    return vector.astype(np.float32)


class SelectionHistory:
    """Bounded (task, tool) records with the tasks' vectors, optionally persisted.

    Thread-safe: the deck records from the event loop, searches read from worker threads.
    ``model_id`` ties stored vectors to the model that made them; records from another model
    keep their text and are re-embedded (``pending``) before they count.
    """

    def __init__(
        self,
        path: str | os.PathLike[str] | None = None,
        *,
        model_id: str = "",
        max_records: int = 5_000,
        max_query_chars: int = 1_000,
    ) -> None:
        self.path = Path(path) if path else None
        self.model_id = model_id
        self.max_records = max(1, int(max_records))
        self.max_query_chars = max(1, int(max_query_chars))
        self._records: OrderedDict[tuple[str, str], _Record] = OrderedDict()
        self._lock = threading.Lock()
        self._matrix: tuple[np.ndarray, list[str], np.ndarray] | None = None
        self._dirty = False
        self._recorded = 0
        self._last_save = 0.0
        if self.path is not None:
            self._load()

    # ------------------------------------------------------------------ persistence

    def _load(self) -> None:
        assert self.path is not None
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return
        except (OSError, ValueError):
            return  # unreadable or corrupt: start afresh rather than fail the deck
        if not isinstance(data, dict) or data.get("format") != _FORMAT:
            return
        same_model = data.get("model") == self.model_id
        rows = data.get("records")
        if not isinstance(rows, list):
            return
        for row in rows[-self.max_records :]:
            if not isinstance(row, dict):
                continue
            query, tool = row.get("q"), row.get("tool")
            if not isinstance(query, str) or not isinstance(tool, str) or not query:
                continue
            packed = row.get("v")
            vector = _unpack(packed, None) if same_model and isinstance(packed, str) else None
            n, t = row.get("n"), row.get("t")
            count = n if isinstance(n, int) else 1
            last = float(t) if isinstance(t, int | float) else 0.0
            self._records[(query, tool)] = _Record(
                query[: self.max_query_chars], tool, max(1, count), last, vector
            )

    def save(self) -> None:
        """Write the records now (atomically, mode 0600); a no-op without a path."""
        if self.path is None:
            return
        with self._lock:
            rows = [
                {
                    "q": r.query,
                    "tool": r.tool,
                    "n": r.count,
                    "t": round(r.last, 3),
                    **({"v": _pack(r.vector)} if r.vector is not None else {}),
                }
                for r in self._records.values()
            ]
            self._dirty = False
            self._last_save = time.monotonic()
        payload = json.dumps({"format": _FORMAT, "model": self.model_id, "records": rows})
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            fd, tmp = tempfile.mkstemp(prefix=".history-", dir=self.path.parent)
            try:
                os.fchmod(fd, 0o600)  # the tasks are the users' words
                with os.fdopen(fd, "w", encoding="utf-8") as fh:
                    fh.write(payload)
                os.replace(tmp, self.path)
            except BaseException:
                Path(tmp).unlink(missing_ok=True)
                raise
        except OSError:
            with self._lock:
                self._dirty = True  # read-only or full disk: keep serving, retry later

    def maybe_save(self, every_s: float = 5.0) -> None:
        """Save when something changed and the last save is older than ``every_s``."""
        if self._dirty and time.monotonic() - self._last_save >= every_s:
            self.save()

    # ------------------------------------------------------------------ records

    def record(self, query: str, tool: str, vector: np.ndarray | None = None) -> None:
        """Count one use of ``tool`` for ``query`` (``vector``: the query's embedding)."""
        query = " ".join(str(query).split())[: self.max_query_chars]
        if not query or not tool:
            return
        key = (query, str(tool))
        with self._lock:
            rec = self._records.pop(key, None)
            if rec is None:
                rec = _Record(query, str(tool), 0, 0.0, None)
            rec.count += 1
            rec.last = time.time()
            if vector is not None:
                rec.vector = np.asarray(vector, dtype=np.float32).ravel()
            self._records[key] = rec  # most recent last
            while len(self._records) > self.max_records:
                self._records.popitem(last=False)
            self._matrix = None
            self._dirty = True
            self._recorded += 1

    def pending(self) -> list[str]:
        """Distinct recorded tasks that have no vector yet."""
        with self._lock:
            return list(dict.fromkeys(r.query for r in self._records.values() if r.vector is None))

    def set_vectors(self, vectors: dict[str, np.ndarray]) -> None:
        """Attach vectors to the records of these tasks."""
        with self._lock:
            for rec in self._records.values():
                if rec.vector is None and rec.query in vectors:
                    rec.vector = np.asarray(vectors[rec.query], dtype=np.float32).ravel()
            self._matrix = None

    def forget(self, tools: Iterable[str]) -> None:
        """Drop the records of tools that left the catalog."""
        gone = set(tools)
        with self._lock:
            for key in [k for k in self._records if k[1] in gone]:
                del self._records[key]
            self._matrix = None
            self._dirty = True

    def __len__(self) -> int:
        return len(self._records)

    def matrix(self) -> tuple[np.ndarray, list[str], np.ndarray]:
        """(task vectors, tool of each row, use count of each row) of the embedded records."""
        with self._lock:
            if self._matrix is None:
                recs = [r for r in self._records.values() if r.vector is not None]
                if recs:
                    vecs = np.stack([r.vector for r in recs]).astype(np.float32)  # type: ignore[misc]
                else:
                    vecs = np.zeros((0, 0), dtype=np.float32)
                counts = np.array([r.count for r in recs], dtype=np.float32)
                self._matrix = (vecs, [r.tool for r in recs], counts)
            return self._matrix

    def similar(self, qvecs: np.ndarray, threshold: float) -> dict[str, float]:
        """For each tool used for a task close to any of ``qvecs``: how close, in [0, 1].

        Closeness is the best cosine between a query vector and a recorded task, mapped from
        ``[threshold, 1]`` onto ``[0, 1]``; tasks below ``threshold`` say nothing.
        """
        vecs, tools, counts = self.matrix()
        if not tools or vecs.shape[1] != qvecs.shape[1]:
            return {}
        sims = (qvecs @ vecs.T).max(axis=0)
        hits = np.nonzero(sims >= threshold)[0]
        out: dict[str, float] = {}
        span = max(1e-6, 1.0 - threshold)
        for i in hits.tolist():
            # A tool used several times for the task counts a little more, with diminishing
            # returns, so one popular tool does not drown every other signal.
            value = (float(sims[i]) - threshold) / span * (1.0 + 0.1 * np.log1p(counts[i] - 1))
            if value > out.get(tools[i], 0.0):
                out[tools[i]] = value
        return out

    def statistics(self) -> HistoryStatistics:
        """Records held, records added since start, and the file."""
        return HistoryStatistics(
            records=len(self._records),
            recorded=self._recorded,
            path=str(self.path) if self.path else None,
        )

    def as_rows(self) -> list[dict[str, Any]]:
        """The records as plain rows (task, tool, count), oldest first."""
        with self._lock:
            return [{"query": r.query, "tool": r.tool, "count": r.count}
                    for r in self._records.values()]
