"""FAISS index helpers shared by the hybrid's dense channel and the second dense channel."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import numpy as np

__all__ = ["faiss_threads", "ivf_index", "split_views"]


@contextlib.contextmanager
def faiss_threads(n: int) -> Iterator[None]:
    """Temporarily let FAISS use ``n`` OpenMP threads."""
    import faiss

    saved = faiss.omp_get_max_threads()
    faiss.omp_set_num_threads(n)
    try:
        yield
    finally:
        faiss.omp_set_num_threads(saved)


def ivf_index(vectors: np.ndarray, nprobe: int, *, direct_map: bool = False) -> Any:
    """An inner-product IVF index trained on ``vectors`` (not added), searching ``nprobe``
    lists.

    IVF is cheap to train on a sample, supports ``remove_ids`` (no tombstones) and its search
    cost is set by ``nprobe``: sqrt(n) lists keep both the coarse and the fine scan small.
    ``direct_map`` adds a hash table from ids to vectors, so that ``reconstruct`` works.
    """
    import faiss

    n, dim = vectors.shape
    nlist = max(1, min(n, int(np.sqrt(n))))
    quantizer = faiss.IndexFlatIP(dim)
    ivf = faiss.IndexIVFFlat(quantizer, dim, nlist, faiss.METRIC_INNER_PRODUCT)
    ivf.cp.max_points_per_centroid = 64  # training on a sample: seconds, not minutes
    ivf.cp.min_points_per_centroid = 1
    if n:
        ivf.train(vectors)
    ivf.nprobe = max(1, min(nlist, nprobe))
    if direct_map:
        ivf.set_direct_map_type(faiss.DirectMap.Hashtable)
    return ivf


def split_views(
    vectors: np.ndarray, count: int, differ: list[int] | None
) -> tuple[np.ndarray, np.ndarray | None]:
    """The full-text and summary vectors of ``count`` tools from the rows embedded for
    :func:`~tooldeck_faiss._text.tool_texts`' texts (``differ`` its second answer, None when
    no summaries were asked for): a tool without a summary of its own gets its full vector."""
    full = np.ascontiguousarray(vectors[:count], dtype=np.float32)
    if differ is None:
        return full, None
    views = full.copy()
    if differ:
        views[differ] = vectors[count:]
    return full, views
