"""GET /v1/jobs filters (labels, states, name, owner) on the real app, real SQL (SQLite and
PostgreSQL): every match once, newest first, across pages, while new jobs arrive."""

from __future__ import annotations

import base64
import json
from datetime import datetime

import pytest

from devstack import new_token, tiny_wavenet_spec

# (name, labels, cancelled?) for alice; bob gets a copy of a few, so owners are kept apart.
CORPUS = [
    ("asr-base", {"team": "speech", "sweep": "12"}, False),
    ("asr-large", {"team": "speech", "sweep": "12"}, True),
    ("tts-small", {"team": "speech", "sweep": "13"}, False),
    ("resnet-a", {"team": "vision"}, True),
    ("resnet-b", {"team": "vision", "sweep": "12"}, False),
    ("ASR-tiny", {"team": "speech"}, False),
    ("wavenet", {}, False),
    ("asr_100%", {"team": "speech", "sweep": "12", "priority": "high"}, True),
    ("unnamed-1", {"sweep": "12"}, False),
    ("asr-final", {"team": "speech", "sweep": "12"}, False),
    ("asr-final-2", {"team": "speech", "sweep": "12"}, True),
    ("tts-big", {"team": "speech"}, False),
    ("asr-x", {"team": "speech", "sweep": "12"}, False),
    ("asr-y", {"team": "speech", "sweep": "12"}, True),
]


@pytest.fixture
def corpus(api, alice, bob):
    """Alice's jobs as the API returned them (cancelled ones re-read), and bob's."""
    made = []
    for name, labels, cancel in CORPUS:
        job = api.post("/v1/jobs", json=tiny_wavenet_spec(name=name, labels=labels), headers=alice).json()
        if cancel:
            job = api.post(f"/v1/jobs/{job['id']}/cancel", headers=alice).json()
        made.append(job)
    theirs = [
        api.post("/v1/jobs", json=tiny_wavenet_spec(name=name, labels=labels), headers=bob).json()
        for name, labels, _ in CORPUS[:4]
    ]
    return made, theirs


def newest_first(jobs: list[dict]) -> list[str]:
    return [job["id"] for job in sorted(jobs, key=lambda j: (datetime.fromisoformat(j["created_at"]), j["id"]))][::-1]


def every_page(api, headers, params, limit=2) -> tuple[list[str], int]:
    ids, cursor, pages = [], None, 0
    while True:
        response = api.get(
            "/v1/jobs", params={**params, "limit": limit, **({"cursor": cursor} if cursor else {})}, headers=headers
        )
        assert response.status_code == 200, response.text
        page = response.json()
        pages += 1
        ids += [job["id"] for job in page["items"]]
        cursor = page["next_cursor"]
        if cursor is None:
            return ids, pages


def labels_of(job):
    return job["spec"]["labels"]


FILTERS = {
    "one label": ({"label": ["team=speech"]}, lambda j: labels_of(j).get("team") == "speech"),
    "two labels (AND)": (
        {"label": ["team=speech", "sweep=12"]},
        lambda j: labels_of(j).get("team") == "speech" and labels_of(j).get("sweep") == "12",
    ),
    "a label key alone": ({"label": ["sweep"]}, lambda j: "sweep" in labels_of(j)),
    "a key alone and a pair": (
        {"label": ["sweep", "team=speech"]},
        lambda j: "sweep" in labels_of(j) and labels_of(j).get("team") == "speech",
    ),
    "one state": ({"state": "cancelled"}, lambda j: j["state"] == "cancelled"),
    "several states": ({"state": "queued,cancelled"}, lambda j: j["state"] in ("queued", "cancelled")),
    "name, any case": ({"name": "asr"}, lambda j: "asr" in j["name"].lower()),
    "a name with a LIKE wildcard": ({"name": "_100%"}, lambda j: "_100%" in j["name"]),
    "label, state and name": (
        {"label": ["team=speech"], "state": "queued", "name": "ASR"},
        lambda j: labels_of(j).get("team") == "speech" and j["state"] == "queued" and "asr" in j["name"].lower(),
    ),
    "a label value nobody has": ({"label": ["team=nobody"]}, lambda j: False),
}


@pytest.mark.parametrize("case", FILTERS, ids=list(FILTERS))
def test_each_filter_returns_every_match_once_newest_first_across_pages(api, alice, corpus, case):
    params, matches = FILTERS[case]
    mine, _ = corpus
    expected = newest_first([job for job in mine if matches(job)])
    got, pages = every_page(api, alice, params)
    assert got == expected
    if len(expected) >= 5:
        assert pages >= 3


def test_a_page_is_stable_while_jobs_are_created(api, alice, corpus):
    mine, _ = corpus
    expected = newest_first([job for job in mine if labels_of(job).get("team") == "speech"])
    first = api.get("/v1/jobs", params={"label": "team=speech", "limit": 3}, headers=alice).json()
    got, cursor = [job["id"] for job in first["items"]], first["next_cursor"]
    while cursor:
        api.post("/v1/jobs", json=tiny_wavenet_spec(labels={"team": "speech"}), headers=alice)  # newer than any
        page = api.get("/v1/jobs", params={"label": "team=speech", "limit": 3, "cursor": cursor}, headers=alice).json()
        got += [job["id"] for job in page["items"]]
        cursor = page["next_cursor"]
    assert got == expected


def test_owners_see_only_their_jobs_and_admins_filter_by_owner(api, alice, bob, corpus, settings):
    mine, theirs = corpus
    got, _ = every_page(api, bob, {"label": ["team"]})
    assert got == newest_first([job for job in theirs if "team" in labels_of(job)])
    admin = {"Authorization": f"Bearer {new_token(settings.sql_url, 'root', admin=True)}"}
    got, _ = every_page(api, admin, {"owner": "bob", "label": ["team=speech"]})
    assert got == newest_first([job for job in theirs if labels_of(job).get("team") == "speech"])
    got, _ = every_page(api, admin, {"label": ["team=vision"]}, limit=1)
    assert got == newest_first([job for job in mine + theirs if labels_of(job).get("team") == "vision"])
    assert api.get("/v1/jobs", params={"owner": "alice"}, headers=alice).status_code == 200


def test_a_non_admin_asking_for_another_owner_gets_403(api, alice, corpus):
    response = api.get("/v1/jobs", params={"owner": "bob"}, headers=alice)
    assert response.status_code == 403
    assert "owner" in response.json()["detail"]


BAD_QUERIES = [
    ({"state": "paused"}, "state"),
    ({"state": ","}, "state"),
    ({"label": "Team=speech"}, "label"),
    ({"label": "=speech"}, "label"),
    ({"label": ["team=a", "team=b"]}, "label"),
    ({"label": [f"k{i}" for i in range(9)]}, "label"),
    ({"label": "team=" + "x" * 257}, "label"),
    ({"name": "x" * 129}, "name"),
    ({"cursor": "garbage"}, "cursor"),
    ({"name": "a\x00b"}, "name"),
    ({"label": "team=a\x00"}, "label"),
    ({"owner": "bob\x00"}, "owner"),
    (
        {"cursor": base64.urlsafe_b64encode(json.dumps(["2026-01-01T00:00:00+00:00", "j\x00"]).encode()).decode()},
        "cursor",
    ),
]


@pytest.mark.parametrize("params, field", BAD_QUERIES, ids=[json.dumps(p)[:40] for p, _ in BAD_QUERIES])
def test_a_bad_filter_is_422_naming_it(api, alice, params, field):
    response = api.get("/v1/jobs", params=params, headers=alice)
    assert response.status_code == 422
    assert field in json.dumps(response.json()["detail"])


BAD_LABELS = [
    ({"Team": "speech"}, "Team"),
    ({"-team": "x"}, "-team"),
    ({"team-": "x"}, "team-"),
    ({"k" * 64: "x"}, "k" * 64),
    ({"": "x"}, "labels"),
    ({"team": "x" * 257}, "team"),
    ({"team": "a\x1b[31mb"}, "team"),
    ({f"k{i}": "v" for i in range(33)}, "at most 32"),
    ({"team": 3}, "labels"),
]


@pytest.mark.parametrize("labels, named", BAD_LABELS, ids=[str(i) for i in range(len(BAD_LABELS))])
def test_a_bad_label_is_422_naming_it_and_stores_nothing(api, alice, labels, named):
    response = api.post("/v1/jobs", json=tiny_wavenet_spec(labels=labels), headers=alice)
    assert response.status_code == 422
    assert named in json.dumps(response.json()["detail"])
    assert api.get("/v1/jobs", headers=alice).json()["items"] == []


def test_good_labels_read_back_in_the_spec(api, alice):
    labels = {"team": "speech", "a.b/c_d-e": "", "k" * 63: "v" * 256, "0": "zero"}
    job = api.post("/v1/jobs", json=tiny_wavenet_spec(labels=labels), headers=alice).json()
    assert job["spec"]["labels"] == labels
    assert api.get("/v1/jobs", params={"label": "a.b/c_d-e="}, headers=alice).json()["items"][0]["id"] == job["id"]
