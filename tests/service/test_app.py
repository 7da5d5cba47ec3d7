"""The app's process-wide settings take effect in the running app."""

import anyio.to_thread
import pytest
from fastapi.testclient import TestClient
from pydantic import ValidationError

from trainjobs.settings import Settings


def test_request_handlers_run_on_the_configured_number_of_threads(settings):
    from trainjobs.service.api.app import create_app

    with TestClient(create_app(settings.model_copy(update={"api_threads": 3}))) as client:
        limit = client.portal.call(lambda: anyio.to_thread.current_default_thread_limiter().total_tokens)
        assert limit == 3
        assert client.get("/healthz").status_code == 200


def test_a_thread_count_below_one_stops_the_process_at_start(monkeypatch):
    monkeypatch.setenv("TRAINJOBS_API_THREADS", "0")
    with pytest.raises(ValidationError, match="api_threads"):
        Settings()
