"""/v1/models and /v1/datasets: what a spec may name, with each param's type and default."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from pydantic import BaseModel, Field

from trainjobs.contract import catalog
from trainjobs.service.api.deps import bearer_scheme, require_caller
from trainjobs.service.api.error_docs import errors

router = APIRouter(prefix="/v1", tags=["catalog"], responses=errors(401), dependencies=bearer_scheme)


class ParamInfo(BaseModel):
    name: str
    type: str
    default: Any = None
    required: bool
    description: str | None = None


class CatalogEntry(BaseModel):
    name: str
    description: str
    params: list[ParamInfo]
    figures: list[str] | None = Field(
        None, description="a model's: what each epoch reports, what an objective may name (train_loss, val_mae, ...)"
    )


class CatalogList(BaseModel):
    items: list[CatalogEntry]


def _listing(entries: dict) -> CatalogList:
    return CatalogList(
        items=[
            CatalogEntry(
                name=name,
                description=entry.description,
                params=catalog.describe_params(entry.params),
                figures=list(entry.figures) if isinstance(entry, catalog.ModelEntry) else None,
            )
            for name, entry in sorted(entries.items())
        ]
    )


@router.get("/models", response_model=CatalogList)
def list_models(request: Request) -> CatalogList:
    require_caller(request)
    return _listing(catalog.models())


@router.get("/datasets", response_model=CatalogList)
def list_datasets(request: Request) -> CatalogList:
    require_caller(request)
    return _listing(catalog.datasets())
