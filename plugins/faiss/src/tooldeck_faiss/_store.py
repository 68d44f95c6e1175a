"""On-disk cache of tool embeddings keyed by (model id, sha256 of the embedded text)."""

from __future__ import annotations

import hashlib
import itertools
import os
import tempfile
import threading
import uuid
from collections.abc import Iterable, Sequence
from pathlib import Path

import numpy as np

#: Merge chunk files once a model folder holds more than this many.
_MAX_CHUNKS = 8
#: Vectors kept per model, in memory and by a merge: the least recently used go first. Every
#: text ever embedded stayed otherwise, and each merge rewrote them all: a long-lived deck whose
#: tools change at run time (new descriptions, reloaded MCP servers) grew both for weeks.
#: Catalogs of thousands of tools fit many times over; a vector dropped is embedded again.
MAX_VECTORS = 20_000


def text_key(text: str) -> str:
    """The cache key of one embedded text."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


class EmbeddingStore:
    """Append-only chunk files per model: ``<dir>/<model_id>/chunk-<uuid>.npz``.

    Each chunk holds ``keys`` (sha256 hex of the texts) and ``vectors`` (float32). Writers only
    ever create new chunks through a temporary file and an atomic ``os.replace``, so concurrent
    processes never see a half-written file and never overwrite each other's work; a reader simply
    loads every chunk. When chunks pile up they are merged into one (written the same way) and
    the merged ones are deleted; a reader racing with that merge re-lists the folder. At most
    ``max_vectors`` are held in memory and written by a merge: the most recently used.
    """

    def __init__(
        self, root: str | os.PathLike[str], model_id: str, *, max_vectors: int = MAX_VECTORS
    ) -> None:
        self.folder = Path(root) / model_id
        self.max_vectors = max(1, max_vectors)
        self._lock = threading.Lock()
        # Least recently read or written last.
        self._vectors: dict[str, np.ndarray] = {}
        self._loaded = False

    def _trim(self) -> None:
        vectors = self._vectors
        excess = len(vectors) - self.max_vectors
        if excess > 0:
            for key in list(itertools.islice(vectors, excess)):
                del vectors[key]

    def held(self) -> int:
        """How many vectors are held in memory (not ``__len__``: callers test ``if store``)."""
        return len(self._vectors)

    def _chunks(self) -> list[Path]:
        if not self.folder.is_dir():
            return []
        return sorted(self.folder.glob("chunk-*.npz"))

    def _load(self) -> None:
        # What only the files hold counts as least recently used: it goes first when trimmed,
        # before anything this process read or wrote.
        loaded: dict[str, np.ndarray] = {}
        for _attempt in range(3):
            try:
                for chunk in self._chunks():
                    with np.load(chunk, allow_pickle=False) as data:
                        keys = data["keys"]
                        vectors = data["vectors"]
                    for key, vector in zip(keys.tolist(), vectors, strict=True):
                        if key not in self._vectors:
                            loaded[key] = vector
                break
            except FileNotFoundError:
                continue  # a concurrent merge removed a chunk between listing and reading
            except (OSError, ValueError, KeyError):
                # A corrupt chunk costs a re-embed, never a crash.
                continue
        loaded.update(self._vectors)
        self._vectors = loaded
        self._trim()
        self._loaded = True

    def get_many(self, keys: Iterable[str]) -> dict[str, np.ndarray]:
        """The cached vectors among ``keys``."""
        with self._lock:
            if not self._loaded:
                self._load()
            vectors = self._vectors
            found = {k: vectors[k] for k in keys if k in vectors}
            for key, vector in found.items():  # most recently used last
                del vectors[key]
                vectors[key] = vector
            return found

    def put_many(self, keys: Sequence[str], vectors: np.ndarray) -> None:
        """Persist new vectors (one new chunk file), then merge chunks if there are many."""
        if not len(keys):
            return
        with self._lock:
            for key, vector in zip(keys, vectors, strict=True):
                self._vectors.pop(key, None)
                self._vectors[key] = vector
            self._trim()
            try:
                self.folder.mkdir(parents=True, exist_ok=True)
                self._write_chunk(list(keys), np.asarray(vectors, dtype=np.float32))
                chunks = self._chunks()
                if len(chunks) > _MAX_CHUNKS:
                    self._merge(chunks)
            except OSError:
                # Read-only or full disk: the cache is an optimisation, keep serving.
                pass

    def _write_chunk(self, keys: list[str], vectors: np.ndarray) -> Path:
        target = self.folder / f"chunk-{uuid.uuid4().hex}.npz"
        fd, tmp = tempfile.mkstemp(dir=self.folder, prefix=".tmp-", suffix=".npz")
        try:
            with os.fdopen(fd, "wb") as fh:
                np.savez(fh, keys=np.asarray(keys, dtype="U64"), vectors=vectors)
            os.replace(tmp, target)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        return target

    def _merge(self, chunks: list[Path]) -> None:
        # Re-read first: other processes may have added chunks since we loaded.
        self._load()
        keys = list(self._vectors)
        merged = np.stack([self._vectors[k] for k in keys]).astype(np.float32)
        self._write_chunk(keys, merged)
        for chunk in chunks:
            chunk.unlink(missing_ok=True)
