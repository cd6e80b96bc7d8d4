"""HTTP shell around the retriever, compatible with Search-R1 / verl's SearchTool.

``POST /retrieve`` with ``{"queries": [...], "topk": k, "return_scores": true}``
answers ``{"result": [[{"document": {"id", "contents", "title", "text"}, "score",
"doc_id", "source"}, ...], ...], "meta": [{"query", "flags", "error", "latency_ms"}]}``.
``topk`` omitted/null → R(q) per the retriever config (Dedup(R_g ∪ R_d)); an
integer → the first ``topk`` documents of the fused ranking. Concurrent requests
are micro-batched. ``GET /health`` → ``{"status": "ok", ...}``.
"""

from __future__ import annotations

import asyncio
from typing import Any

from pydantic import BaseModel, Field

from gta_verl.data.types import RetrievalResult
from gta_verl.retrieval.batching import MicroBatcher

MAX_BODY_BYTES = 1_000_000
MAX_QUERIES = 512
MAX_TOPK = 100


class RetrieveRequest(BaseModel):
    """Body of ``POST /retrieve`` (Search-R1 protocol)."""

    queries: list[str] = Field(min_length=1)
    topk: int | None = Field(default=None, ge=1, le=MAX_TOPK)
    return_scores: bool = True


def _doc(hit: Any, return_scores: bool) -> dict[str, Any]:
    d: dict[str, Any] = {
        "document": {
            "id": hit.doc_id,
            "contents": f"{hit.title}\n{hit.text}",
            "title": hit.title,
            "text": hit.text,
        },
        "doc_id": hit.doc_id,
        "source": hit.source,
    }
    if return_scores:
        d["score"] = hit.score
    return d


def _payload(results: list[RetrievalResult], return_scores: bool) -> dict[str, Any]:
    return {
        "result": [[_doc(h, return_scores) for h in r.hits] for r in results],
        "meta": [
            {"query": r.query, "flags": list(r.flags), "error": r.error, "latency_ms": r.latency_ms}
            for r in results
        ],
    }


def create_app(
    retriever: Any,
    max_batch: int = 256,
    max_wait_ms: float = 5.0,
    max_queries: int = MAX_QUERIES,
    max_body_bytes: int = MAX_BODY_BYTES,
) -> Any:
    """Build the FastAPI app serving ``retriever`` (a :class:`GraphRetriever`)."""
    from fastapi import FastAPI, HTTPException, Request
    from fastapi.responses import JSONResponse

    app = FastAPI(title="gta-verl retriever")
    batcher = MicroBatcher(
        retriever.retrieve,
        validate=lambda q: retriever.prepare_queries([q]),
        max_batch=max_batch,
        max_wait_ms=max_wait_ms,
    )
    rank_lock = asyncio.Lock()

    @app.middleware("http")
    async def limit_body(request: Request, call_next):
        size = request.headers.get("content-length")
        if size is not None and int(size) > max_body_bytes:
            return JSONResponse({"detail": f"request body over {max_body_bytes} bytes"}, status_code=413)
        return await call_next(request)

    @app.get("/health")
    async def health() -> dict[str, Any]:
        return {
            "status": "ok",
            "n_docs": retriever.kb.n_docs,
            "mode": retriever.config.mode,
            **batcher.stats(),
        }

    @app.post("/retrieve")
    async def retrieve(req: RetrieveRequest) -> dict[str, Any]:
        if len(req.queries) > max_queries:
            raise HTTPException(status_code=413, detail=f"{len(req.queries)} queries > limit {max_queries}")
        if req.topk is None:
            results = await batcher.submit(req.queries)
        else:
            try:
                async with rank_lock:  # rank() shares the encoder with the batch thread
                    results = await asyncio.to_thread(retriever.rank, req.queries, req.topk)
            except (ValueError, TypeError) as exc:
                raise HTTPException(status_code=422, detail=str(exc)) from exc
        return _payload(results, req.return_scores)

    return app


def serve(
    kb_dir: str, host: str = "127.0.0.1", port: int = 8000, config: Any = None, **app_kwargs: Any
) -> None:
    """Load the KB and serve it with uvicorn (blocking)."""
    import uvicorn

    from gta_verl.retrieval.retriever import GraphRetriever

    retriever = GraphRetriever.from_kb_dir(kb_dir, config)
    uvicorn.run(create_app(retriever, **app_kwargs), host=host, port=port, log_level="info")
