"""On-disk cache of tool embeddings keyed by (model id, sha256 of the embedded text)."""

from __future__ import annotations

import hashlib
import itertools
import logging
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
#: A tool has up to two texts (full and summary, ``summary_view``): a catalog of 20,000
#: tools fits, thousands fit many times over; a vector dropped is embedded again.
MAX_VECTORS = 40_000
#: A chunk file larger than this is not read: a planted or runaway file (2 GB) must not be
#: loaded whole into memory at start-up. 40k vectors of 4096 floats are 655 MB; a catalog
#: embedded in one go writes one chunk, so leave room for that too.
MAX_CHUNK_BYTES = 1 << 30

log = logging.getLogger("tooldeck_faiss.store")


class _BadChunk(Exception):
    """A chunk file that cannot be trusted: corrupt, truncated, foreign or oversized."""


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
        #: The vectors' dimension: set by the first ``get_many(dim=...)`` or ``put_many``. A
        #: chunk of another dimension is damaged (the folder is keyed by the model's content)
        #: and would crash the index build or a merge.
        self.dim: int | None = None
        #: Whether the vectors are L2-normalised (both encoders' are): set by ``get_many``.
        self.unit = False
        self._write_warned = False

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

    def _read_chunk(self, chunk: Path) -> list[tuple[str, np.ndarray]]:
        """The (key, vector) pairs of one chunk; :class:`_BadChunk` when it cannot be trusted.

        ``FileNotFoundError`` passes through: a concurrent merge removed the chunk.
        """
        try:
            size = chunk.stat().st_size
            if size > MAX_CHUNK_BYTES:
                raise _BadChunk(f"{size:,} bytes, over the {MAX_CHUNK_BYTES:,} limit")
            with chunk.open("rb") as fh:
                # A zip (npz) or nothing: np.load would read a planted .npy whole, or try pickle.
                if fh.read(4) != b"PK\x03\x04":
                    raise _BadChunk("not an npz archive (empty or truncated?)")
            with np.load(chunk, allow_pickle=False) as data:
                # A compressed member could inflate far beyond the file's size.
                inflated = sum(info.file_size for info in data.zip.infolist())
                if inflated > MAX_CHUNK_BYTES:
                    raise _BadChunk(f"{inflated:,} bytes once inflated")
                keys = data["keys"]
                vectors = data["vectors"]
        except (FileNotFoundError, _BadChunk):
            raise
        except Exception as exc:  # BadZipFile, EOFError, ValueError, KeyError, OSError, zlib
            raise _BadChunk(f"{type(exc).__name__}: {exc}") from exc
        if keys.ndim != 1 or keys.dtype.kind != "U":
            raise _BadChunk(f"keys of shape {keys.shape} and dtype {keys.dtype}")
        if vectors.ndim != 2 or vectors.dtype.kind != "f" or len(vectors) != len(keys):
            raise _BadChunk(f"{len(keys)} keys but vectors of shape {vectors.shape} "
                            f"and dtype {vectors.dtype}")
        if self.dim is not None and vectors.shape[1] != self.dim:
            raise _BadChunk(f"vectors of dimension {vectors.shape[1]}, expected {self.dim}")
        if not np.isfinite(vectors).all():
            raise _BadChunk("vectors with NaN or infinity")
        if self.unit and len(vectors):
            norms = np.linalg.norm(vectors.astype(np.float64), axis=1)
            # Zero rows are what the encoders give an empty text: legitimate, not damage.
            if (np.abs(norms - 1.0)[norms > 1e-6] > 1e-3).any():
                raise _BadChunk("vectors not of unit length")
        return list(zip(keys.tolist(), vectors.astype(np.float32, copy=False), strict=True))

    def _set_aside(self, chunk: Path, why: str) -> None:
        # Renamed (out of the ``chunk-*.npz`` pattern), not deleted: the operator can look at
        # it; its vectors are embedded again. One line, naming the file, once per file.
        aside = chunk.with_name(chunk.name + ".corrupt")
        try:
            os.replace(chunk, aside)
            done = f"set aside as {aside.name}"
        except OSError:
            done = "skipped"
        log.warning(
            "tooldeck: embedding cache file %s is unusable (%s); %s, its vectors will be "
            "embedded again", chunk, why, done,
        )

    def _load(self) -> None:
        # What only the files hold counts as least recently used: it goes first when trimmed,
        # before anything this process read or wrote.
        loaded: dict[str, np.ndarray] = {}
        for _attempt in range(3):
            try:
                for chunk in self._chunks():
                    # One bad chunk (a crash mid-write, a full disk, another version, a
                    # planted file) is set aside on its own: it used to end the loop, so the
                    # valid chunks after it were never read (everything re-embedded at every
                    # start), and a truncated one raised EOFError out of the index build.
                    try:
                        pairs = self._read_chunk(chunk)
                    except _BadChunk as exc:
                        self._set_aside(chunk, str(exc))
                        continue
                    for key, vector in pairs:
                        if key not in self._vectors:
                            loaded[key] = vector
                break
            except FileNotFoundError:
                continue  # a concurrent merge removed a chunk between listing and reading
        loaded.update(self._vectors)
        self._vectors = loaded
        self._trim()
        self._loaded = True

    def get_many(
        self, keys: Iterable[str], *, dim: int | None = None, unit: bool = False
    ) -> dict[str, np.ndarray]:
        """The cached vectors among ``keys``.

        ``dim`` and ``unit`` (L2-normalised vectors) describe the vectors expected: a chunk
        file holding others is set aside when first read.
        """
        with self._lock:
            if dim is not None and self.dim is None:
                self.dim = dim
            self.unit = self.unit or unit
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
            if self.dim is None and np.ndim(vectors) == 2:
                self.dim = int(np.shape(vectors)[1])
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
            except OSError as exc:
                # Read-only or full disk: the cache is an optimisation, keep serving. Said once:
                # otherwise every start re-embeds the catalog with no word why.
                if not self._write_warned:
                    self._write_warned = True
                    log.warning(
                        "tooldeck: cannot write the embedding cache in %s (%s); vectors will "
                        "be embedded again next time", self.folder, exc,
                    )

    def _write_chunk(self, keys: list[str], vectors: np.ndarray) -> Path:
        target = self.folder / f"chunk-{uuid.uuid4().hex}.npz"
        fd, tmp = tempfile.mkstemp(dir=self.folder, prefix=".tmp-", suffix=".npz")
        try:
            with os.fdopen(fd, "wb") as fh:
                np.savez(fh, keys=np.asarray(keys, dtype="U64"), vectors=vectors)
                # On disk before it takes its name: a crash (power loss) after the rename
                # must not leave an empty or partial chunk under a valid name.
                fh.flush()
                os.fsync(fh.fileno())
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
