"""What the deck learnt from use: (task, tool called) records, bounded, persisted privately.

A record says "for a task worded like this, the model called that tool". The retriever compares
a new query's vectors with the recorded tasks' and lifts the tools used for close ones (see
:meth:`SelectionHistory.boosts`). Records live in memory and, when a path is given, in one JSON
file written atomically with mode 0600 (the tasks are the deployment's users' words). The file
is bounded: at most ``max_records`` records of at most ``max_query_chars`` characters each; the
least recently used record goes first.

Where several processes serve one deployment, a shared :class:`HistoryStore` (tooldeck-redis
provides one) replaces the file: the history keeps its records in memory for searches and
exchanges the new uses with the store from the search thread, at most every
``sync_interval_s``, under the store's own deadline. A store that fails or stalls is skipped for
``retry_interval_s`` (logged once): selection then runs on the records in memory.
"""

from __future__ import annotations

import base64
import errno
import hashlib
import json
import logging
import math
import os
import socket
import stat
import tempfile
import threading
import time
from collections import OrderedDict
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

import attrs
import numpy as np

__all__ = [
    "HISTORY_STORES_GROUP",
    "HistoryRow",
    "HistoryStatistics",
    "HistoryStore",
    "HistoryStoreFactory",
    "SelectionHistory",
    "default_history_path",
    "open_history_store",
]

log = logging.getLogger("tooldeck.faiss.history")

#: The entry-point group of shared history stores. Each entry point names a
#: :class:`HistoryStoreFactory`; it is loaded only when a history opens (never at import or in
#: ``tooldeck call``), and returns None when its backend is not configured.
HISTORY_STORES_GROUP = "tooldeck.history_stores"

#: Environment variable naming the history file; ``off`` (or empty) keeps history in memory.
HISTORY_FILE_ENV = "TOOLDECK_HISTORY_FILE"
_FORMAT = 1
#: A record's use count is capped there (a damaged file can hold any integer).
_MAX_COUNT = 1 << 31
#: The temporary files a save writes before renaming: ``.history-<pid>@<host>-<random>``.
_TEMP_PREFIX = ".history-"
#: A temporary file whose writer cannot be checked (another host, an older tooldeck's name) is
#: taken for abandoned once it is this old (seconds); a save takes far less.
_TEMP_ABANDONED_S = 3600.0


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
    """A snapshot of a history: records held, records added since start, file (or None).

    ``store`` names the shared store (None without one), ``store_down`` says it is being
    skipped after a failure, ``syncs``/``store_errors`` count exchanges with it.
    """

    records: int
    recorded: int
    path: str | None
    store: str | None = None
    store_down: bool = False
    syncs: int = 0
    store_errors: int = 0


@attrs.frozen(kw_only=True)
class HistoryRow:
    """One record as a store sees it.

    Sent to a store, ``count`` is how many uses to add (0: only attach ``vector``); received,
    it is the record's total. ``last`` is the store's clock of the last use (seconds).
    ``vector`` is the task's embedding by the history's model (float32, unit length) or None.
    """

    query: str
    tool: str
    count: int
    last: float = 0.0
    vector: np.ndarray | None = None


class HistoryStore(Protocol):
    """Where the processes of one deployment share their records (tooldeck-redis: Redis).

    A store is bound to one deployment (its key prefix) and one model id (the vectors it
    hands back are that model's, never another's). Its methods are called from worker threads,
    one at a time per history; each must return or raise within the store's own deadline.
    """

    #: How the store is named in statistics and log lines (no passwords).
    label: str

    def exchange(self, uses: Sequence[HistoryRow], since: float) -> tuple[list[HistoryRow], float]:
        """Add ``uses`` atomically (bounded, oldest first out), return what changed.

        Returns the records used at or after ``since`` (the store's clock; 0 = all of them),
        and the clock value to pass as ``since`` next time. A use the store cannot take (text
        it cannot encode) raises ValueError (UnicodeError included) or TypeError, or is
        skipped; any other exception says the store failed.
        """

    def forget(self, tools: Sequence[str]) -> None:
        """Drop the records of these tools."""

    def close(self) -> None:
        """Release the connection."""


class HistoryStoreFactory(Protocol):
    """An entry point of :data:`HISTORY_STORES_GROUP`: a store for these settings, or None.

    ``settings`` is the deck's whole configuration (the ``[tool.tooldeck]`` table).
    """

    def __call__(
        self, settings: Mapping[str, Any], *, model_id: str, max_records: int
    ) -> HistoryStore | None: ...


def open_history_store(
    settings: Mapping[str, Any], name: str, *, model_id: str, max_records: int
) -> HistoryStore | None:
    """The store of the first entry point (``name``, or any when ``"auto"``) that offers one.

    :raises ValueError: ``name`` is not ``"auto"`` and no such entry point gives a store.
    """
    from importlib.metadata import entry_points

    found = sorted(entry_points(group=HISTORY_STORES_GROUP), key=lambda ep: ep.name)
    for ep in found:
        if name != "auto" and ep.name != name:
            continue
        factory = ep.load()
        store = factory(settings, model_id=model_id, max_records=max_records)
        if store is not None:
            return store  # type: ignore[no-any-return]
    if name != "auto":
        names = ", ".join(ep.name for ep in found) or "none installed"
        raise ValueError(
            f"history_store = {name!r}: no {HISTORY_STORES_GROUP} entry point of that name "
            f"offers a store for this configuration (entry points: {names})"
        )
    return None


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
    if not vector.size or not np.isfinite(vector).all():
        # A damaged row: an infinite component made the tool's lift infinite for every
        # query on one side of it. Left without a vector, the task is embedded again.
        return None
    return vector.astype(np.float32)


def _host_token() -> str:
    return hashlib.sha256(socket.gethostname().encode("utf-8", "replace")).hexdigest()[:8]


def _writer_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OSError, OverflowError, ValueError):
        return True  # another user's process, or cannot tell: alive
    return True


def _remove_abandoned_temp_files(folder: Path) -> None:
    """Delete the temporary files of saves whose process died before renaming them (kill -9,
    power loss): nothing else ever removes them, and each is a whole history."""
    host = _host_token()
    try:
        entries = list(os.scandir(folder))
    except OSError:
        return
    now = time.time()
    for entry in entries:
        if not entry.name.startswith(_TEMP_PREFIX):
            continue
        writer, _, _ = entry.name[len(_TEMP_PREFIX) :].partition("-")
        pid_text, _, writer_host = writer.partition("@")
        try:
            if not entry.is_file(follow_symlinks=False):
                continue
            if writer_host == host and pid_text.isdigit():
                # Written on this host: abandoned when its writer is gone.
                abandoned = not _writer_alive(int(pid_text))
            else:
                # Another host's process, or an older name without one: cannot be asked.
                abandoned = now - entry.stat(follow_symlinks=False).st_mtime > _TEMP_ABANDONED_S
            if abandoned:
                os.unlink(entry.path)
        except OSError:
            continue  # gone meanwhile, or not ours to remove


def _storable(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


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
        store: HistoryStore | None = None,
        sync_interval_s: float = 1.0,
        retry_interval_s: float = 10.0,
    ) -> None:
        self.store = store
        self.sync_interval_s = float(sync_interval_s)
        self.retry_interval_s = float(retry_interval_s)
        # With a shared store the store is the persistence: no file as well.
        self.path = Path(path) if path and store is None else None
        self.model_id = model_id
        self.max_records = max(1, int(max_records))
        self.max_query_chars = max(1, int(max_query_chars))
        self._records: OrderedDict[tuple[str, str], _Record] = OrderedDict()
        self._lock = threading.Lock()
        self._matrix: tuple[np.ndarray, list[str], np.ndarray] | None = None
        self._dirty = False
        self._recorded = 0
        self._last_save = 0.0
        # Shared store: uses not yet sent (key -> [added uses, vector to attach or None]).
        self._unsent: dict[tuple[str, str], list[Any]] = {}
        self._sync_lock = threading.Lock()
        self._since = 0.0
        self._last_sync = float("-inf")
        self._down_until = float("-inf")
        self._down = False
        self._syncs = 0
        self._store_errors = 0
        self._save_warned = False
        if self.path is not None:
            self._load()

    # ------------------------------------------------------------------ persistence

    def _max_file_bytes(self) -> int:
        # What a full file can hold: every record at its longest (a task of non-ASCII
        # characters escaped as \\uXXXX pairs, a 4096-d vector in base64) and then some. A
        # bigger file is not ours to read whole: a planted 2 GB file would be, at every start.
        return 4096 + self.max_records * (12 * self.max_query_chars + 16_384)

    def _read_bounded(self) -> str:
        """The file's text, read from a regular file only and never past the size bound.

        Opened without following a symbolic link and without blocking: a FIFO in its place
        hung the deck's start, and a link to /dev/zero (size 0 to ``stat``) was read until
        memory ran out. Raises OSError or ValueError for a file not to be read.
        """
        assert self.path is not None
        flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
        try:
            fd = os.open(self.path, flags | getattr(os, "O_CLOEXEC", 0))
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise ValueError("a symbolic link, not a file") from None
            raise
        limit = self._max_file_bytes()
        with os.fdopen(fd, "rb") as handle:
            mode = os.fstat(handle.fileno()).st_mode
            if not stat.S_ISREG(mode):
                raise ValueError("not a regular file")
            data = handle.read(limit + 1)
        if len(data) > limit:
            raise ValueError(f"more than {limit:,} bytes")
        return data.decode("utf-8")

    def _set_aside(self, why: str) -> None:
        """Move an unusable history file out of the way (never overwrite it), and say so."""
        path = self.path
        assert path is not None
        aside = path.with_name(f"{path.name}.corrupt-{time.time_ns()}")
        try:
            os.replace(path, aside)
            done = f"set aside as {aside.name}, starting afresh"
        except OSError as exc:
            # Cannot move it: do not overwrite what we could not read either (memory only).
            done = f"cannot set it aside ({exc.strerror}), keeping the history in memory only"
            self.path = None
        log.warning("tooldeck: selection history file %s is unusable (%s); %s", path, why, done)

    def _load(self) -> None:
        assert self.path is not None
        _remove_abandoned_temp_files(self.path.parent)
        # A damaged file (a crash mid-write, a full disk, a directory, unreadable, planted or
        # huge) is set aside with one warning: it used to be ignored silently, then replaced
        # at the next save, and a huge one was read whole into memory first.
        try:
            text = self._read_bounded()
        except FileNotFoundError:
            return
        except (OSError, ValueError) as exc:
            self._set_aside(f"{type(exc).__name__}: {exc}")
            return
        try:
            data = json.loads(text)
        except (ValueError, RecursionError) as exc:
            self._set_aside(f"{type(exc).__name__}: {exc}")
            return
        if isinstance(data, dict) and isinstance(data.get("format"), int) and (
            data["format"] > _FORMAT
        ):
            # Another (newer) tooldeck's file: its records are valid, just not ours to read.
            # Left as it is; this process keeps its history in memory.
            log.warning(
                "tooldeck: selection history file %s has format %s, newer than this tooldeck "
                "reads (%s); leaving it as it is and keeping the history in memory only",
                self.path, data["format"], _FORMAT,
            )
            self.path = None
            return
        if not isinstance(data, dict) or data.get("format") != _FORMAT:
            found = data.get("format") if isinstance(data, dict) else type(data).__name__
            self._set_aside(f"format {found!r}, this tooldeck reads {_FORMAT}")
            return
        same_model = data.get("model") == self.model_id
        rows = data.get("records")
        if not isinstance(rows, list):
            self._set_aside("no list of records")
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
            # Bounded: a damaged count of 10**40 became inf in the float32 counts, and an
            # infinite lift for its tool.
            count = min(n, _MAX_COUNT) if isinstance(n, int) and not isinstance(n, bool) else 1
            last = float(t) if isinstance(t, int | float) and math.isfinite(t) else 0.0
            self._records[(query, tool)] = _Record(
                query[: self.max_query_chars], tool, max(1, count), last, vector
            )

    def save(self) -> None:
        """Write the records now (atomically, mode 0600), or send them to the shared store.

        A no-op with neither a path nor a store.
        """
        if self.store is not None:
            self.sync(force=True)
            return
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
            _remove_abandoned_temp_files(self.path.parent)
            # The writer's pid and host in the name: a later save or load can tell whether
            # the file was abandoned (its process killed before the rename).
            fd, tmp = tempfile.mkstemp(
                prefix=f"{_TEMP_PREFIX}{os.getpid()}@{_host_token()}-", dir=self.path.parent
            )
            try:
                os.fchmod(fd, 0o600)  # the tasks are the users' words
                with os.fdopen(fd, "w", encoding="utf-8") as fh:
                    fh.write(payload)
                    # On disk before it takes the name: a power loss after the rename must
                    # not leave an empty file in place of the records.
                    fh.flush()
                    os.fsync(fh.fileno())
                os.replace(tmp, self.path)
            except BaseException:
                Path(tmp).unlink(missing_ok=True)
                raise
        except OSError as exc:
            with self._lock:
                self._dirty = True  # read-only or full disk: keep serving, retry later
            if not self._save_warned:  # once: retried every few seconds
                self._save_warned = True
                log.warning("tooldeck: cannot save the selection history to %s (%s); "
                            "retrying later", self.path, exc)

    def maybe_save(self, every_s: float = 5.0) -> None:
        """Save when something changed and the last save is older than ``every_s``.

        With a shared store: exchange with it when the last exchange is older than
        ``sync_interval_s`` (see :meth:`sync`).
        """
        if self.store is not None:
            if time.monotonic() - self._last_sync >= self.sync_interval_s:
                self.sync()
            return
        if self._dirty and time.monotonic() - self._last_save >= every_s:
            self.save()

    def sync(self, *, force: bool = False) -> bool:
        """Send the uses recorded since the last exchange and take in the other processes'.

        Runs in the caller's (worker) thread, bounded by the store's deadline. Never raises:
        a failing store is skipped for ``retry_interval_s`` (``force`` tries anyway), its
        unsent uses kept for the next exchange. Returns whether an exchange happened. A sync
        already running in another thread is not waited for.
        """
        store = self.store
        if store is None:
            return False
        now = time.monotonic()
        if not force and now < self._down_until:
            return False
        if not self._sync_lock.acquire(blocking=False):
            return False
        try:
            with self._lock:
                unsent, self._unsent = self._unsent, {}
            uses = [
                HistoryRow(query=q, tool=t, count=n, vector=v) for (q, t), (n, v) in unsent.items()
            ]
            try:
                rows, since = store.exchange(uses, self._since)
            except (ValueError, TypeError) as exc:
                # The uses, not the store (UnicodeEncodeError: a task with a lone surrogate):
                # sent again, they fail again. Before, this marked the store down and queued
                # them again, so that nothing was shared by this process from then on.
                self._drop_unsendable(store, unsent, exc)
                return False
            except Exception as exc:  # any store failure: keep serving from memory
                with self._lock:
                    for key, (n, v) in unsent.items():
                        self._queue(key, n, v)
                self._store_errors += 1
                self._down_until = time.monotonic() + self.retry_interval_s
                self._last_sync = time.monotonic()
                if not self._down:
                    self._down = True
                    log.warning(
                        "selection history store %s unavailable (%s: %s); selecting with the "
                        "records in memory, retrying every %.0f s",
                        store.label, type(exc).__name__, exc, self.retry_interval_s,
                    )
                return False
            if self._down:
                self._down = False
                log.warning("selection history store %s is back", store.label)
            self._merge(rows)
            self._since = since
            self._syncs += 1
            self._last_sync = time.monotonic()
            return True
        finally:
            self._sync_lock.release()

    def _drop_unsendable(
        self, store: HistoryStore, unsent: dict[tuple[str, str], list[Any]], exc: Exception
    ) -> None:
        """After the store refused the uses: drop the ones UTF-8 cannot carry, send the others
        next time; when none stands out, drop them all (the records stay in memory)."""
        bad = {key for key in unsent if not (_storable(key[0]) and _storable(key[1]))}
        dropped = bad or set(unsent)
        with self._lock:
            for key, (n, v) in unsent.items():
                if key not in dropped:
                    self._queue(key, n, v)
        self._store_errors += 1
        self._last_sync = time.monotonic()
        log.warning(
            "selection history store %s could not take %d use(s) (%s: %s); not shared, "
            "kept in this process's memory",
            store.label, len(dropped), type(exc).__name__, exc,
        )

    def _queue(self, key: tuple[str, str], count: int, vector: np.ndarray | None) -> None:
        # Caller holds self._lock. Bounded like the records: while the store is down, the
        # oldest unsent uses go first.
        entry = self._unsent.pop(key, None) or [0, None]
        entry[0] += count
        if vector is not None:
            entry[1] = vector
        self._unsent[key] = entry
        while len(self._unsent) > self.max_records:
            self._unsent.pop(next(iter(self._unsent)))

    def _merge(self, rows: Sequence[HistoryRow]) -> None:
        """Take the store's records: its counts are the totals (plus uses not yet sent)."""
        with self._lock:
            for row in sorted(rows, key=lambda r: r.last):
                query = row.query[: self.max_query_chars]
                key = (query, row.tool)
                local = self._records.pop(key, None)
                unsent = self._unsent.get(key)
                count = max(1, int(row.count)) + (unsent[0] if unsent else 0)
                vector = row.vector
                if vector is None and local is not None:
                    vector = local.vector  # same model, same task: the same vector
                vector = None if vector is None else np.asarray(vector, np.float32).ravel()
                self._records[key] = _Record(query, row.tool, count, row.last, vector)
            while len(self._records) > self.max_records:
                self._records.popitem(last=False)
            self._matrix = None

    def close(self) -> None:
        """Save (or send the last uses to the store) and release the store."""
        self.save()
        if self.store is not None:
            try:
                self.store.close()
            except Exception:
                log.debug("closing the history store failed", exc_info=True)

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
            if self.store is not None:
                self._queue(key, 1, rec.vector)
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
            for key, rec in self._records.items():
                if rec.vector is None and rec.query in vectors:
                    rec.vector = np.asarray(vectors[rec.query], dtype=np.float32).ravel()
                    if self.store is not None:
                        # Share the vector: the deployment's other processes of this model
                        # then need not embed the task again.
                        self._queue(key, 0, rec.vector)
            self._matrix = None

    def forget(self, tools: Iterable[str]) -> None:
        """Drop the records of tools that left the catalog."""
        gone = set(tools)
        with self._lock:
            for key in [k for k in self._records if k[1] in gone]:
                del self._records[key]
            for key in [k for k in self._unsent if k[1] in gone]:
                del self._unsent[key]
            self._matrix = None
            self._dirty = True
        if self.store is not None and gone and time.monotonic() >= self._down_until:
            try:
                self.store.forget(sorted(gone))
            except Exception as exc:
                log.warning("selection history store %s: forget failed (%s)", self.store.label, exc)

    def __len__(self) -> int:
        return len(self._records)

    def matrix(self, dim: int | None = None) -> tuple[np.ndarray, list[str], np.ndarray]:
        """(task vectors, tool of each row, use count of each row) of the embedded records.

        ``dim``: the queries' dimension (the model's); else the newest record's.
        """
        with self._lock:
            if self._matrix is None or (dim is not None and self._matrix[0].shape[1] != dim):
                recs = [r for r in self._records.values() if r.vector is not None]
                if recs:
                    # A vector of another size (a store holding another model's under the
                    # same id, a damaged row) cannot be compared: leave it out. The queries'
                    # size decides when known: one damaged row loaded last used to set the
                    # size, and every valid record was left out until the next use.
                    if dim is None:
                        dim = recs[-1].vector.size  # type: ignore[union-attr]
                    recs = [r for r in recs if r.vector.size == dim]  # type: ignore[union-attr]
                if recs:
                    vecs = np.stack([r.vector for r in recs]).astype(np.float32)  # type: ignore[misc]
                else:
                    vecs = np.zeros((0, dim or 0), dtype=np.float32)
                counts = np.array([r.count for r in recs], dtype=np.float32)
                self._matrix = (vecs, [r.tool for r in recs], counts)
            return self._matrix

    def similar(
        self, qvecs: np.ndarray, threshold: float, curve: float = 1.0
    ) -> dict[str, float]:
        """For each tool used for a task close to any of ``qvecs``: how close, in [0, 1].

        Closeness is the best cosine between a query vector and a recorded task, mapped from
        ``[threshold, 1]`` onto ``[0, 1]`` and raised to ``curve``; tasks below ``threshold``
        say nothing. A curve above 1 keeps most of the lift of a near-repeat and less of a
        merely similar task's.
        """
        vecs, tools, counts = self.matrix(qvecs.shape[1])
        if not tools or vecs.shape[1] != qvecs.shape[1]:
            return {}
        sims = (qvecs @ vecs.T).max(axis=0)
        hits = np.nonzero(sims >= threshold)[0]
        out: dict[str, float] = {}
        span = max(1e-6, 1.0 - threshold)
        for i in hits.tolist():
            # A tool used several times for the task counts a little more, with diminishing
            # returns, so one popular tool does not drown every other signal.
            close = ((float(sims[i]) - threshold) / span) ** curve
            value = close * (1.0 + 0.1 * np.log1p(counts[i] - 1))
            if value > out.get(tools[i], 0.0):
                out[tools[i]] = value
        return out

    def statistics(self) -> HistoryStatistics:
        """Records held, records added since start, and the file."""
        return HistoryStatistics(
            records=len(self._records),
            recorded=self._recorded,
            path=str(self.path) if self.path else None,
            store=self.store.label if self.store is not None else None,
            store_down=self._down,
            syncs=self._syncs,
            store_errors=self._store_errors,
        )

    def as_rows(self) -> list[dict[str, Any]]:
        """The records as plain rows (task, tool, count), oldest first."""
        with self._lock:
            return [{"query": r.query, "tool": r.tool, "count": r.count}
                    for r in self._records.values()]
