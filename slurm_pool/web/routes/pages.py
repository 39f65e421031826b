"""The console's page (its scripts and styles are mounted under ``/static`` by ``create_app``)."""

from __future__ import annotations

from pathlib import Path

from fastapi import APIRouter
from fastapi.responses import FileResponse, Response

from slurm_pool.web.bodies import Utf8JsonRoute
from slurm_pool.web.problems import ApiError

STATIC_DIR = Path(__file__).resolve().parent.parent / "static"

router = APIRouter(route_class=Utf8JsonRoute)


@router.get("/", include_in_schema=False)
def index() -> Response:
    page = STATIC_DIR / "index.html"
    if not page.is_file():
        raise ApiError(404, "the console is not installed")
    return FileResponse(page, media_type="text/html; charset=utf-8")
