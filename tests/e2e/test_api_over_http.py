"""Every endpoint over real HTTP against a real API process and worker."""

import json
import threading
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from devstack import REDIS_URL, Stack, sql_database, tiny_wavenet_spec, wait_for_terminal, wait_until
from trainjobs.worker.devices import core_share

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def stack(request, tmp_path_factory):
    home = tmp_path_factory.mktemp("http")
    with sql_database(request.param, home) as url:
        stack = Stack(home, url, REDIS_URL, TRAINJOBS_HEARTBEAT_SECONDS="1").start()
        try:
            yield stack
        finally:
            stack.stop()


@pytest.fixture(scope="module")
def client(stack):
    return stack.client(stack.token("carol"))


def queued_spec(**overrides) -> dict:
    """A job no worker can take (3 ranks, the worker has 2 slots): it stays queued."""
    return tiny_wavenet_spec(gpus=3, **overrides)


def test_pages_return_every_job_exactly_once_while_jobs_are_being_created(stack):
    client = stack.client(stack.token("pager"))
    before = [client.post("/v1/jobs", json=queued_spec()).json()["id"] for _ in range(12)]
    stop = threading.Event()

    def keep_creating():
        with httpx.Client(base_url=stack.url, headers=client.headers, timeout=30) as creator:
            while not stop.is_set():
                creator.post("/v1/jobs", json=queued_spec())

    writer = threading.Thread(target=keep_creating)
    writer.start()
    try:
        seen, cursor = [], None
        while True:
            params = {"limit": 5, **({"cursor": cursor} if cursor else {})}
            page = client.get("/v1/jobs", params=params).json()
            seen += [job["id"] for job in page["items"]]
            cursor = page["next_cursor"]
            if cursor is None:
                break
    finally:
        stop.set()
        writer.join()
    assert len(seen) == len(set(seen)), "a job appeared twice"
    assert set(before) <= set(seen), "a job that existed before paging was missed"
    created_at = [job["created_at"] for job in client.get("/v1/jobs", params={"limit": 500}).json()["items"]]
    assert created_at == sorted(created_at, reverse=True)


def test_an_unchanged_job_answers_304_and_a_changed_one_200(client):
    job = client.post("/v1/jobs", json=queued_spec()).json()
    first = client.get(f"/v1/jobs/{job['id']}")
    etag = first.headers["ETag"]
    again = client.get(f"/v1/jobs/{job['id']}", headers={"If-None-Match": etag})
    assert again.status_code == 304 and again.content == b""
    client.post(f"/v1/jobs/{job['id']}/cancel")
    changed = client.get(f"/v1/jobs/{job['id']}", headers={"If-None-Match": etag})
    assert changed.status_code == 200 and changed.json()["state"] == "cancelled" and changed.headers["ETag"] != etag


def test_fifty_concurrent_posts_with_one_idempotency_key_create_one_job(stack, client):
    def post(_):
        with httpx.Client(base_url=stack.url, headers=client.headers, timeout=60) as own:
            return own.post("/v1/jobs", json=queued_spec(), headers={"Idempotency-Key": "deploy-42"})

    with ThreadPoolExecutor(max_workers=50) as pool:
        responses = list(pool.map(post, range(50)))
    assert sorted({response.status_code for response in responses}) == [200, 201]
    assert sum(response.status_code == 201 for response in responses) == 1
    assert len({response.json()["id"] for response in responses}) == 1
    other_owner = stack.client(stack.token("dave")).post(
        "/v1/jobs", json=queued_spec(), headers={"Idempotency-Key": "deploy-42"}
    )
    assert other_owner.status_code == 201 and other_owner.json()["id"] != responses[0].json()["id"]


def read_events(client, job_id: str, last_event_id: int | None = None) -> list[tuple[int, str, dict]]:
    headers = {"Last-Event-ID": str(last_event_id)} if last_event_id is not None else {}
    events, current = [], {}
    with client.stream("GET", f"/v1/jobs/{job_id}/events", headers=headers, timeout=120) as response:
        assert response.status_code == 200 and response.headers["content-type"].startswith("text/event-stream")
        for line in response.iter_lines():
            if line == "" and current:
                events.append((int(current["id"]), current["event"], json.loads(current["data"])))
                current = {}
            elif line and not line.startswith(":"):
                field, _, value = line.partition(": ")
                current[field] = value
    return events


def test_the_event_stream_delivers_every_state_and_epoch_in_order_and_resumes_without_gaps(client):
    job_id = client.post("/v1/jobs", json=tiny_wavenet_spec(epochs=3)).json()["id"]
    events = read_events(client, job_id)  # returns when the stream ends, after the terminal state
    assert [event_id for event_id, _, _ in events] == list(range(1, len(events) + 1))
    states = [data["state"] for _, kind, data in events if kind == "state"]
    assert states[0] == "queued" and states[-1] == "succeeded" and "running" in states
    assert states.index("running") < len(states) - 1
    assert [data["epoch"] for _, kind, data in events if kind == "metrics"] == [1, 2, 3]
    assert [data["epoch"] for _, kind, data in events if kind == "checkpoint"] == [1, 2, 3]
    assert events[-1][1] == "state" and events[-1][2]["state"] == "succeeded"
    # Every metrics event comes before the final state.
    assert max(i for i, (_, kind, _) in enumerate(events) if kind == "metrics") < len(events) - 1

    middle = events[len(events) // 2][0]
    resumed = read_events(client, job_id, last_event_id=middle)
    assert resumed == events[middle:]
    assert read_events(client, job_id, last_event_id=events[-1][0]) == []


def test_logs_hold_every_rank_s_output_prefixed_by_rank(client):
    job_id = client.post("/v1/jobs", json=tiny_wavenet_spec(epochs=1)).json()["id"]
    assert wait_for_terminal(client, job_id)["state"] == "succeeded"
    response = client.get(f"/v1/jobs/{job_id}/logs")
    assert response.headers["content-type"].startswith("text/plain")
    lines = response.text.splitlines()
    assert all(line.startswith(("[rank 0] ", "[rank 1] ")) for line in lines)
    for rank in (0, 1):
        assert f"[rank {rank}] rank {rank} of 2 on cpu" in response.text
        assert f"[rank {rank}] rank {rank} done after epoch 1: completed" in lines
    tail = client.get(f"/v1/jobs/{job_id}/logs", params={"tail": 1}).text.splitlines()
    assert tail == ["[rank 0] rank 0 done after epoch 1: completed", "[rank 1] rank 1 done after epoch 1: completed"]


def test_a_worker_gives_each_rank_its_slot_s_share_of_the_cores(stack, client):
    # A 1-rank job on a worker of 2 cpu slots takes one slot's share, not every core: a second
    # job may run beside it on the other slot.
    job_id = client.post("/v1/jobs", json=tiny_wavenet_spec(gpus=1, epochs=1)).json()["id"]
    assert wait_for_terminal(client, job_id)["state"] == "succeeded"
    share = core_share(stack.cpu_slots)
    assert f"[rank 0] rank 0 of 1 on cpu ({share} threads," in client.get(f"/v1/jobs/{job_id}/logs").text


def test_workers_catalog_readiness_and_prometheus(stack, client):
    workers = wait_until(lambda: client.get("/v1/workers").json()["items"], 15, what="a heartbeat")
    assert workers[0]["device"] == "cpu" and workers[0]["slots"] == 2 and workers[0]["lost"] is False
    models = {entry["name"]: entry for entry in client.get("/v1/models").json()["items"]}
    wavenet = {param["name"]: param for param in models["wavenet"]["params"]}
    assert (wavenet["n_residue"]["type"], wavenet["n_residue"]["default"]) == ("integer", 32)
    assert "synthetic-audio" in {entry["name"] for entry in client.get("/v1/datasets").json()["items"]}
    assert httpx.get(f"{stack.url}/readyz").json() == {"status": "ok"}
    text = httpx.get(f"{stack.url}/metrics").text
    for name in (
        'trainjobs_jobs{state="queued"}',
        'trainjobs_queue_depth{device="cpu"}',
        "trainjobs_epochs_finished",
        "trainjobs_api_request_seconds_bucket",
    ):
        assert name in text, name
    assert 'route="/v1/jobs/{job_id}"' in text


def test_tokens_are_scoped_to_their_owner_and_admins_see_all(stack, client):
    job_id = client.post("/v1/jobs", json=queued_spec()).json()["id"]
    stranger = stack.client(stack.token("eve"))
    assert stranger.get(f"/v1/jobs/{job_id}").status_code == 404
    assert stranger.post(f"/v1/jobs/{job_id}/cancel").status_code == 404
    admin = stack.client(stack.token("root", admin=True))
    assert admin.get(f"/v1/jobs/{job_id}").json()["owner"] == "carol"
