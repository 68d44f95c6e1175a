"""Descriptions of the selection figures that ``tooldeck bench`` reports for this plugin.

The figures themselves come from ``tooldeck._eval.bench_selection`` (synthetic catalogs of
1k, 10k and 100k tools with random vectors, queries embedded for real).
"""

from __future__ import annotations

__all__ = ["DESCRIPTIONS"]

DESCRIPTIONS: dict[str, str] = {
    **{
        f"select_cached_p50_ms_{size}": (
            f"selection p50, {size} tools, query vectors from the query cache: "
            "BM25 + FAISS + fusion only (ms)"
        )
        for size in ("1k", "10k", "100k")
    },
}
