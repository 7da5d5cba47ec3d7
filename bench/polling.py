"""Polling as dashboards do it: `GET /v1/jobs/{id}` against a real API process, on SQLite and
PostgreSQL, with 1,000 and 100,000 jobs stored.

- Open loop: 200 pollers, each on its own keep-alive connection and its own job, send one GET
  a second on a fixed schedule (phases spread over the second), for `seconds`. A latency is
  measured from when the request was *due*, so an API that falls behind shows it in full (no
  coordinated omission). Once without and once with If-None-Match (200s, then 304s).
- Closed loop: wrk with 50 connections on one job, without and with If-None-Match.
- A profile (py-spy, when installed) of the API processes during the closed-loop 200 run: the
  functions with the most samples on top of the stack.

The pollers run in this process on the same 2 cores as the API, as the issue asks.
"""

from __future__ import annotations

import asyncio
import collections
import os
import re
import shutil
import statistics
import subprocess
import tempfile
import time
from pathlib import Path
from urllib.parse import urlsplit

import httpx
from sqlalchemy import select

from bench.support.load import WRK_SCRIPT, seed_jobs, wrk
from bench.support.py_spy import py_spy
from devstack import REDIS_URL, Stack, new_token, sql_database
from trainjobs.jobs.db import make_engine
from trainjobs.jobs.tables import JobRow

POLLERS = 200
OPEN_LOOP_SECONDS = 20
WARM_UP_SECONDS = 3  # the first seconds' answers (connections opening, caches filling) are not counted
CLOSED_LOOP_CLIENTS = 50
CLOSED_LOOP_SECONDS = 5
PROFILE_SECONDS = 5
PROFILE_TOP = 12


def run(
    sizes=(1_000, 100_000),
    databases=("sqlite", "postgresql"),
    seconds: int = OPEN_LOOP_SECONDS,
    profile: bool = True,
    api_workers: int = os.cpu_count() or 1,
) -> dict:
    if shutil.which("wrk") is None:
        raise RuntimeError("wrk is not installed (apt-get install wrk)")
    open_rows, closed_rows, profiles = [], [], {}
    for database in databases:
        for size in sizes:
            with tempfile.TemporaryDirectory() as scratch, sql_database(database, Path(scratch)) as url:
                home = Path(scratch)
                seed_jobs(url, size, "poller")
                job_ids = _some_jobs(url, POLLERS)
                token = new_token(url, "poller")
                # The API as deployed by default: one process per core (TRAINJOBS_API_WORKERS).
                stack = Stack(home / "stack", url, REDIS_URL, TRAINJOBS_API_WORKERS=str(api_workers))
                stack.start_api()
                try:
                    etags = _etags(stack.url, token, job_ids)
                    cell = {"database": database, "jobs": size}
                    open_rows += _open_loop_rows(stack, token, job_ids, etags, seconds, cell)
                    profiled = profile and size == sizes[-1]
                    rows, profiles[database] = _closed_loop_rows(stack, token, job_ids, etags, home, profiled, cell)
                    closed_rows += rows
                finally:
                    stack.stop()
    profiles = {database: top for database, top in profiles.items() if top is not None}
    return {
        "polling": {
            "open_loop": open_rows,
            "closed_loop": closed_rows,
            "profiles": profiles,
            "api_workers": api_workers,
        }
    }


def _open_loop_rows(stack: Stack, token: str, job_ids: list[str], etags: list[str], seconds: int, cell: dict) -> list:
    rows = []
    for answer in ("200", "304"):
        result = asyncio.run(open_loop(stack.url, token, job_ids, etags if answer == "304" else None, seconds))
        print(
            f"poll open  {cell['database']:<10} {cell['jobs']:>7} jobs  {answer}  {POLLERS} pollers x 1/s: "
            f"{result['requests_per_s']:6.1f} req/s  p50 {result['p50_ms']:7.1f} ms  "
            f"p99 {result['p99_ms']:7.1f} ms  max {result['max_ms']:7.1f} ms  "
            f"other answers {result['other_answers']} {result['other_statuses'] or ''}",
            flush=True,
        )
        rows.append({**cell, "answer": answer, **result})
    return rows


def _closed_loop_rows(
    stack: Stack, token: str, job_ids: list[str], etags: list[str], home: Path, profiled: bool, cell: dict
) -> tuple[list, list[dict] | None]:
    """wrk on one job, answered 200 and 304; the 200 run profiled with py-spy when `profiled`."""
    script = home / "auth.lua"
    script.write_text(WRK_SCRIPT)
    rows, profile = [], None
    for answer in ("200", "304"):
        env = {"PATH": "/usr/bin:/bin", "WRK_TOKEN": token, **({"WRK_ETAG": etags[0]} if answer == "304" else {})}
        profiler = _start_profile(stack) if profiled and answer == "200" else None
        result = wrk(f"{stack.url}/v1/jobs/{job_ids[0]}", CLOSED_LOOP_CLIENTS, CLOSED_LOOP_SECONDS, env, script)
        if profiler is not None:
            profile = _finish_profile(profiler)
        print(
            f"poll closed {cell['database']:<10} {cell['jobs']:>7} jobs  {answer}  {CLOSED_LOOP_CLIENTS} clients: "
            f"{result['requests_per_s']:8.1f} req/s  p50 {result['p50']:>8}  p99 {result['p99']:>8}  "
            f"non-2xx/3xx {result['errors']}",
            flush=True,
        )
        rows.append({**cell, "answer": answer, "clients": CLOSED_LOOP_CLIENTS, **result})
    return rows, profile


def _some_jobs(url: str, count: int) -> list[str]:
    engine = make_engine(url)
    try:
        with engine.connect() as connection:
            return list(connection.scalars(select(JobRow.id).order_by(JobRow.id).limit(count)))
    finally:
        engine.dispose()


def _etags(base_url: str, token: str, job_ids: list[str]) -> list[str]:
    with httpx.Client(base_url=base_url, headers={"Authorization": f"Bearer {token}"}) as client:
        return [client.get(f"/v1/jobs/{job_id}").raise_for_status().headers["ETag"] for job_id in job_ids]


async def open_loop(base_url: str, token: str, job_ids: list[str], etags: list[str] | None, seconds: int) -> dict:
    """Each job gets one poller; poller i sends at start + i/len(job_ids) + k seconds."""
    address = urlsplit(base_url)
    loop = asyncio.get_running_loop()
    start = loop.time() + 0.5
    latencies: list[float] = []
    answers: collections.Counter[int] = collections.Counter()
    pollers = [
        _poll(
            address.hostname or "127.0.0.1",
            address.port or 80,
            _request(job_id, token, etags[index] if etags else None),
            start + index / len(job_ids),
            seconds + WARM_UP_SECONDS,
            start + WARM_UP_SECONDS,
            latencies,
            answers,
        )
        for index, job_id in enumerate(job_ids)
    ]
    began = time.monotonic()
    await asyncio.gather(*pollers)
    elapsed = time.monotonic() - began - 0.5 - WARM_UP_SECONDS
    expected = 304 if etags else 200
    latencies.sort()
    return {
        "pollers": len(job_ids),
        "requests": len(latencies),
        "requests_per_s": round(len(latencies) / elapsed, 1),
        "p50_ms": round(1000 * statistics.median(latencies), 2),
        "p99_ms": round(1000 * latencies[int(0.99 * (len(latencies) - 1))], 2),
        "max_ms": round(1000 * latencies[-1], 2),
        "other_answers": sum(count for status, count in answers.items() if status != expected),
        # which they were: 200s in a 304 run mean a polled job changed; 4xx or 5xx, a failure
        "other_statuses": {str(status): count for status, count in sorted(answers.items()) if status != expected},
    }


def _request(job_id: str, token: str, etag: str | None) -> bytes:
    lines = [f"GET /v1/jobs/{job_id} HTTP/1.1", "Host: bench", f"Authorization: Bearer {token}"]
    if etag:
        lines.append(f"If-None-Match: {etag}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


async def _poll(
    host: str,
    port: int,
    request: bytes,
    first: float,
    seconds: float,
    count_from: float,
    latencies: list[float],
    answers: collections.Counter[int],
) -> None:
    loop = asyncio.get_running_loop()
    reader, writer = await asyncio.open_connection(host, port)
    try:
        due = first
        while due < first + seconds:
            await asyncio.sleep(max(0.0, due - loop.time()))
            writer.write(request)
            status = await _read_answer(reader)
            if due >= count_from:
                latencies.append(loop.time() - due)
                answers[status] += 1
            due += 1.0
    finally:
        writer.close()


async def _read_answer(reader: asyncio.StreamReader) -> int:
    head = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1")
    status = int(head.split(" ", 2)[1])
    length = re.search(r"(?im)^content-length:\s*(\d+)", head)
    if length:
        await reader.readexactly(int(length.group(1)))
    return status


def _start_profile(stack: Stack) -> tuple[subprocess.Popen, Path] | None:
    """py-spy on the API process and its children (API workers), for PROFILE_SECONDS."""
    executable = py_spy()
    if executable is None or stack.api is None:
        return None
    out = stack.home / "profile.txt"
    process = subprocess.Popen(
        [
            executable,
            "record",
            "--pid",
            str(stack.api.pid),
            "--subprocesses",
            "--duration",
            str(PROFILE_SECONDS),
            "--rate",
            "200",
            "--format",
            "raw",
            "--output",
            str(out),
            "--nonblocking",
        ],  # fmt: skip
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    return process, out


def _finish_profile(profiler: tuple[subprocess.Popen, Path]) -> list[dict]:
    """The top of the profile: the frames most often on top of a stack ("self"), with the share
    of all samples; idle threads (waiting in select, a lock or a queue) are left out."""
    process, out = profiler
    process.wait(timeout=PROFILE_SECONDS + 30)
    if not out.exists():
        return []
    own: collections.Counter[str] = collections.Counter()
    for line in out.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        frame = stack.rsplit(";", 1)[-1]
        if re.search(r"\b(select|poll|epoll|wait|_worker|acquire|get) \(", frame) and "threading" in stack:
            continue
        own[_short(frame)] += int(count)
    total = sum(own.values()) or 1
    return [{"frame": frame, "share": round(count / total, 3)} for frame, count in own.most_common(PROFILE_TOP)]


def _short(frame: str) -> str:
    """`fn (/path/to/site-packages/pkg/mod.py:12)` -> `fn (pkg/mod.py:12)`."""
    return re.sub(r"\(.*?(?:site-packages|main)/", "(", frame)
