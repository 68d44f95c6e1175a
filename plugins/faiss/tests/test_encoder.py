"""The torch-free encoder (``tooldeck_faiss._encoder``): sentence-transformers' float vectors,
the fallback for folders it cannot run, and the cache id both share."""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

import numpy as np
import pytest
from tooldeck_faiss import FaissRetriever, RetrieverSettings, default_model_path
from tooldeck_faiss._encoder import BertOnnxEncoder, UnsupportedModel

SEAL = Path("/work/shared/data/tool-retrieval/seal-tools.json")


def _texts(tools: list) -> list[str]:
    from tooldeck_faiss._text import dense_text

    texts = [dense_text(t) for t in tools]
    if SEAL.exists():
        data = json.loads(SEAL.read_text())
        texts += [q["query"] for q in data["queries"][:40]]
    # Edge cases: empty, padding-only whitespace, non-ASCII, longer than 256 tokens (truncated).
    texts += ["", "   padded   ", "Übersetze «bonjour» en 日本語, s'il vous plaît.", "word " * 400]
    return texts


def test_vectors_equal_sentence_transformers_float(st_model, handmade) -> None:
    texts = _texts(handmade)
    encoder = BertOnnxEncoder(default_model_path())
    ours = encoder.encode(texts, batch_size=16)  # several length-sorted chunks, in parallel
    reference = st_model.encode(texts, batch_size=16, normalize_embeddings=True)
    cosines = (ours * reference).sum(axis=1)
    assert ours.shape == reference.shape == (len(texts), 384)
    assert cosines.min() >= 0.99999, (cosines.min(), texts[int(cosines.argmin())])
    # One text at a time (the query path) gives the same rows as the batch.
    single = np.stack([encoder.encode(t) for t in texts[:5]])
    assert np.allclose(single, ours[:5], atol=1e-5)


def _copy_with_cls_pooling(tmp_path: Path) -> Path:
    """The real model folder (files linked), with CLS pooling: sentence-transformers runs it,
    the fast encoder does not."""
    source = Path(default_model_path())
    folder = tmp_path / "cls-model"
    for path in source.rglob("*"):
        if path.is_file():
            target = folder / path.relative_to(source)
            target.parent.mkdir(parents=True, exist_ok=True)
            os.symlink(path, target)
    pooling = folder / "1_Pooling" / "config.json"
    config = json.loads(pooling.read_text())
    config.update(pooling_mode_mean_tokens=False, pooling_mode_cls_token=True)
    pooling.unlink()
    pooling.write_text(json.dumps(config))
    return folder


async def test_unsupported_folder_falls_back_to_sentence_transformers_with_one_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, handmade: list
) -> None:
    from sentence_transformers import SentenceTransformer

    from tooldeck_hookspecs import ConfigError

    folder = _copy_with_cls_pooling(tmp_path)
    with pytest.raises(UnsupportedModel, match="pooling"):
        BertOnnxEncoder(folder)
    with caplog.at_level(logging.WARNING, logger="tooldeck_faiss"):
        for _ in range(2):
            retriever = FaissRetriever(
                RetrieverSettings(model=str(folder), cache_dir=None, quantize=False, history=False)
            )
            await retriever.index(handmade[:3])
            assert isinstance(retriever.model, SentenceTransformer)
    warnings = [r for r in caplog.records if "fast encoder cannot run" in r.getMessage()]
    assert len(warnings) == 1, caplog.text
    strict = FaissRetriever(RetrieverSettings(model=str(folder), encoder="onnx", cache_dir=None))
    with pytest.raises(ConfigError, match="pooling"):
        await strict.warm_up()


async def test_fast_encoder_is_the_default_and_shares_the_float_cache_id(
    tmp_path: Path, handmade: list
) -> None:
    def make(**settings: object) -> FaissRetriever:
        return FaissRetriever(RetrieverSettings(cache_dir=str(tmp_path), history=False, **settings))

    fast = make()
    await fast.warm_up()
    assert isinstance(fast.model, BertOnnxEncoder)
    st_float = make(encoder="sentence-transformers", quantize=False)
    st_int8 = make(encoder="sentence-transformers", quantize=True)
    assert fast.model_id == st_float.model_id
    assert st_int8.model_id == fast.model_id + "-qint8"
    # Float vectors written by the fast encoder are read back by the same id.
    await fast.index(handmade)
    again = make()
    await again.index(handmade)
    assert again.statistics().texts_embedded == 0
    hits = await again.search("what's the weather in Lisbon", 3)
    assert hits[0].name == "get_weather"
