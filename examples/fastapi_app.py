"""headgate from a FastAPI app: an async endpoint enqueues, another awaits the result,
neither blocks the event loop (``enqueue_async`` / ``result_async``).

Run it (two processes)::

    THUMBNAILS_STORE=sqlite:///jobs.db uvicorn fastapi_app:api    # from examples/
    headgate worker --app fastapi_app:tasks --store sqlite:///jobs.db

    curl -X POST localhost:8000/thumbnails -H 'content-type: application/json' \\
         -d '{"image": "cat.png", "width": 128}'
    curl 'localhost:8000/thumbnails/<job_id>?wait=5'

THUMBNAILS_STORE is a store URL (unset: HG_STORE / HG_SQLITE / HG_PG), or a headgate
server's http(s):// URL (with THUMBNAILS_TOKEN) for a web process without database
access; nothing else changes.
"""

from __future__ import annotations

import os
from typing import Any

from fastapi import FastAPI, HTTPException, Response
from pydantic import BaseModel, Field

import headgate
from headgate.tasks import JobFailed, ResultGone

tasks = headgate.App(os.environ.get("THUMBNAILS_STORE") or None,
                     token=os.environ.get("THUMBNAILS_TOKEN") or None)


@tasks.task(queue="thumbnails", name="thumbnails.render", max_attempts=1, retry=None)
def render(image: str, width: int) -> dict[str, Any]:
    if not image.endswith((".png", ".jpg")):
        raise ValueError(f"not an image: {image}")
    return {"image": image, "width": width, "thumbnail": f"{image}@{width}w"}


class ThumbnailRequest(BaseModel):
    image: str = Field(min_length=1, max_length=255)
    width: int = Field(gt=0, le=4096)


api = FastAPI(title="thumbnails")


@api.post("/thumbnails", status_code=202)
async def create_thumbnail(request: ThumbnailRequest) -> dict[str, str]:
    ref = await render.enqueue_async(request.image, width=request.width)
    return {"job_id": ref.id}


@api.get("/thumbnails/{job_id}")
async def get_thumbnail(job_id: str, response: Response, wait: float = 0.0
                        ) -> dict[str, Any]:
    """``wait``: seconds to wait for the job (up to 30); still running then is a 202."""
    ref = tasks.ref(job_id, render)
    try:
        value = await ref.result_async(timeout=min(max(wait, 0.0), 30.0))
    except TimeoutError:
        response.status_code = 202
        state = ref.state()
        return {"job_id": job_id, "state": state.value if state else "gone"}
    except JobFailed as exc:
        return {"job_id": job_id, "state": exc.state, "error": exc.error}
    except ResultGone:
        raise HTTPException(404, "no such job") from None
    return {"job_id": job_id, "state": "completed", "result": value}
