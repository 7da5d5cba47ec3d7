"""A command whose output a job controls (pip building the job's packages), run with that output
bounded: its first and last `limit // 2` bytes go to the log file, what lies between is counted
and left out, and the worker never holds more than one chunk and the tail in memory. A job that
prints gigabytes costs the worker nothing but the time it takes to read them."""

from __future__ import annotations

import os
import signal
import subprocess
import threading
from pathlib import Path

CHUNK_BYTES = 1 << 16


def run_with_bounded_log(
    command: list[str], log_file: Path, limit_bytes: int, timeout_seconds: float, cwd: Path
) -> int:
    """The command's exit code (killed with its process group past `timeout_seconds`: -9); its
    output appended to `log_file`, bounded as above."""
    half = limit_bytes // 2
    with open(log_file, "ab") as log:
        process = subprocess.Popen(
            command, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True
        )
        timer = threading.Timer(timeout_seconds, _kill_group, args=(process,))
        timer.start()
        try:
            head_left, tail, left_out = half, bytearray(), 0
            assert process.stdout is not None
            for chunk in iter(lambda: process.stdout.read(CHUNK_BYTES), b""):  # type: ignore[union-attr]
                written = chunk[:head_left]
                log.write(written)
                head_left -= len(written)
                tail += chunk[len(written) :]
                if len(tail) > half:
                    left_out += len(tail) - half
                    del tail[: len(tail) - half]
            if left_out:
                log.write(f"\n[trainjobs] {left_out} bytes of this output left out\n".encode())
            log.write(bytes(tail))
            return process.wait()
        finally:
            timer.cancel()
            if process.poll() is None:
                _kill_group(process)
                process.wait()


def last_lines(log_file: Path, limit_bytes: int) -> list[str]:
    """The lines of the last `limit_bytes` of the file (a partial first line dropped)."""
    with open(log_file, "rb") as file:
        size = file.seek(0, os.SEEK_END)
        file.seek(max(0, size - limit_bytes))
        text = file.read(limit_bytes).decode(errors="replace")
    lines = text.splitlines()
    return lines[1:] if size > limit_bytes and lines else lines


def _kill_group(process: subprocess.Popen) -> None:
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
