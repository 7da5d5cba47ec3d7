"""The dashboard: static files served by the API itself under /ui (no separate server, no CDN).
The page shell is public; everything it shows comes from the token-protected API."""

from __future__ import annotations

from pathlib import Path

from fastapi import FastAPI
from fastapi.responses import RedirectResponse
from fastapi.staticfiles import StaticFiles

DASHBOARD = Path(__file__).parent / "dashboard"


def install_dashboard(app: FastAPI) -> None:
    app.mount("/ui", StaticFiles(directory=DASHBOARD, html=True), name="dashboard")

    @app.get("/", include_in_schema=False)
    def root() -> RedirectResponse:
        return RedirectResponse("/ui/")
