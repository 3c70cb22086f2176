"""headgate from a FastAPI app: an async endpoint enqueues, another awaits the result,
neither blocks the event loop (``enqueue_async`` / ``result_async``).

Install ``pip install 'headgate-queue[fastapi]'`` (FastAPI and uvicorn), then run the two
processes from any directory, both in the same one (they share its ``headgate.db``)::

    python path/to/fastapi_app.py serve [--host 127.0.0.1] [--port 8000]
    python path/to/fastapi_app.py worker      # `headgate worker` options may follow

    curl -X POST localhost:8000/thumbnails -H 'content-type: application/json' \\
         -d '{"image": "cat.png", "width": 128}'
    curl 'localhost:8000/thumbnails/<job_id>?wait=5'

As a module of your own project, the same is ``uvicorn fastapi_app:api`` and
``headgate worker --app fastapi_app:tasks``. THUMBNAILS_STORE names the store (a store
URL; unset, the one HG_STORE names, by default ``headgate.db`` in the current
directory), or a headgate server's http(s):// URL (with THUMBNAILS_TOKEN) for a web
process without database access; nothing else changes.

Answers: 202 ``{"job_id"}`` on enqueue; 200 with the result, 202 while the job still
runs, 404 for an unknown job, 500 (409 if cancelled) with the error's first line when it
failed, 503 when the store cannot be reached, 422 for a request FastAPI refuses (an
image name not ending in .png or .jpg included). A worker's traceback stays in the
job's history, out of the answers.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from fastapi import FastAPI, HTTPException, Query, Request, Response
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field

import headgate
from headgate.tasks import JobFailed, ResultGone

tasks = headgate.App(os.environ.get("THUMBNAILS_STORE") or None,
                     token=os.environ.get("THUMBNAILS_TOKEN") or None)
IMAGE = r"\.(png|jpg)$"


@tasks.task(queue="thumbnails", name="thumbnails.render", max_attempts=1, retry=None)
def render(image: str, width: int) -> dict[str, Any]:
    # Other producers may enqueue it too: the task checks its input itself.
    if not image.endswith((".png", ".jpg")):
        raise ValueError(f"not an image: {image}")
    return {"image": image, "width": width, "thumbnail": f"{image}@{width}w"}


class ThumbnailRequest(BaseModel):
    image: str = Field(min_length=1, max_length=255, pattern=IMAGE)
    width: int = Field(gt=0, le=4096)


api = FastAPI(title="thumbnails")


def first_line(text: str | None) -> str:
    lines = (text or "").strip().splitlines()
    return lines[0] if lines else ""


@api.exception_handler(headgate.StoreUnavailable)
async def store_unavailable(request: Request, exc: headgate.StoreUnavailable
                            ) -> JSONResponse:
    # Its message may name the database file or host: those stay in the server's log.
    return JSONResponse({"detail": "job store unavailable"}, status_code=503,
                        headers={"Retry-After": "1"})


@api.post("/thumbnails", status_code=202)
async def create_thumbnail(request: ThumbnailRequest) -> dict[str, str]:
    ref = await render.enqueue_async(request.image, width=request.width)
    return {"job_id": ref.id}


@api.get("/thumbnails/{job_id}", response_model=None)
async def get_thumbnail(job_id: str, response: Response,
                        wait: float = Query(0.0, ge=0, le=30)
                        ) -> dict[str, Any] | JSONResponse:
    """``wait``: seconds to wait for the job (up to 30); still running then is a 202."""
    ref = tasks.ref(job_id, render)
    try:
        value = await ref.result_async(timeout=wait)
    except TimeoutError:
        response.status_code = 202
        state = ref.state()
        return {"job_id": job_id, "state": state.value if state else "gone"}
    except JobFailed as exc:
        # The recorded error is the exception's line, then the frames that raised it
        # (server paths): only the first line leaves the server.
        return JSONResponse({"job_id": job_id, "state": exc.state,
                             "error": first_line(exc.error)},
                            status_code=409 if exc.state == "cancelled" else 500)
    except ResultGone:
        raise HTTPException(404, "no such job") from None
    return {"job_id": job_id, "state": "completed", "result": value}


def main(argv: list[str]) -> int:
    """``serve``: the API under uvicorn; ``worker``: ``headgate worker`` on this
    module's tasks, loaded as ``__main__`` (the task is named, so producer and worker
    agree on its kind whichever way each imported the file)."""
    parser = argparse.ArgumentParser(prog="fastapi_app.py")
    commands = parser.add_subparsers(dest="command", required=True)
    served = commands.add_parser("serve", help="run the API")
    served.add_argument("--host", default="127.0.0.1")
    served.add_argument("--port", type=int, default=8000)
    commands.add_parser("worker", help="run a worker (headgate worker options follow)",
                        add_help=False)
    args, rest = parser.parse_known_args(argv)
    if args.command == "worker":
        from headgate.cli import main as headgate_command

        headgate_command(["worker", "--app", "__main__:tasks", *rest], prog_name="headgate")
    if rest:
        parser.error(f"unrecognized arguments: {' '.join(rest)}")
    import uvicorn

    uvicorn.run(api, host=args.host, port=args.port)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
