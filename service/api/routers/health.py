"""/healthz (the process lives) and /readyz (SQL and Redis answer)."""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import JSONResponse
from sqlalchemy import text

from trainjobs.service.api.deps import State

router = APIRouter(tags=["health"])


@router.get("/healthz")
async def healthz() -> dict[str, str]:
    return {"status": "ok"}


@router.get("/readyz", responses={503: {"description": "names what does not answer"}})
def readyz(state: State) -> JSONResponse:
    down = []
    try:
        with state.read_sessions() as session:
            session.execute(text("SELECT 1"))
    except Exception:
        down.append("sql")
    try:
        state.redis.ping()
    except Exception:
        down.append("redis")
    if down:
        return JSONResponse(
            {"status": "unavailable", "detail": f"not answering: {', '.join(down)}", "down": down}, status_code=503
        )
    return JSONResponse({"status": "ok"})
