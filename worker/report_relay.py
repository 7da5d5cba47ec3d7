"""The launcher's end of rank 0's channel (trainjobs.worker.trainer.handoff): it reads rank 0's
reports in order, stamps the job and attempt it knows (a rank cannot speak for another job or
attempt), and sends them on. A checkpoint's file is checked against its report (size, sha256,
the path this job's attempt writes to) and put in the store before the report goes on; a
rotation's report goes on to the collector, which deletes the stored file once the job's row is
gone (only for the job's current attempt). A report that breaks a rule is dropped with a log
line: a rank can only spoil its own job. Its folder is the rank's: every file there is opened
and removed through `rank_files`, following no link (a rank that makes `checkpoints/` a link
must not make root delete what it points to)."""

from __future__ import annotations

import hashlib
import logging
import os
import socket
import threading
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO

from pydantic import BaseModel, ValidationError

from trainjobs.contract.checkpoints import checkpoint_path, is_checkpoint_of
from trainjobs.contract.events import CheckpointRecord, CheckpointRemoved, RankReport
from trainjobs.store import CheckpointStore
from trainjobs.worker.rank_files import NotARankFile, open_rank_file, remove_rank_file
from trainjobs.worker.trainer.handoff import handed_over_file, socket_address

log = logging.getLogger("trainjobs.launcher")

MAX_LINE_BYTES = 1 << 20
ACCEPT_POLL_SECONDS = 0.2


class ReportRelay:
    def __init__(
        self,
        socket_path: Path,
        rank_dir: Path,
        send: Callable[[BaseModel], None],
        store: CheckpointStore,
        job_id: str,
        attempt: int,
        owner_uid: int | None = None,
    ):
        self.rank_dir = rank_dir
        self.send = send  # the launcher's event reporter
        self.store = store
        self.job_id = job_id
        self.attempt = attempt
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        with socket_address(socket_path) as address:
            self.listener.bind(address)
        if owner_uid is not None:  # rank 0 runs as the sandbox's user
            os.chown(socket_path, owner_uid, owner_uid)
        os.chmod(socket_path, 0o600)
        self.listener.listen(4)
        self.listener.settimeout(ACCEPT_POLL_SECONDS)
        self.relayed = 0  # reports sent on (the tests count them)
        self._finishing = threading.Event()
        self._thread = threading.Thread(target=self._serve, name="report-relay", daemon=True)

    def start(self) -> ReportRelay:
        self._thread.start()
        return self

    def finish(self, timeout: float) -> None:
        """Relay what rank 0 has sent until it hung up (it has exited), then stop listening.
        Called once the ranks are gone: a rank 0 that never connected never will."""
        self._finishing.set()
        self._thread.join(timeout)
        self.listener.close()

    def _serve(self) -> None:
        connection = self._accepted()
        if connection is None:
            return
        connection.settimeout(None)
        with connection, connection.makefile("rb") as lines:
            for line in lines:
                if len(line) > MAX_LINE_BYTES:
                    log.warning("rank 0 sent a report of %d bytes; dropped", len(line))
                    continue
                try:
                    self._relay(RankReport.model_validate_json(line).payload())
                except (ValidationError, ValueError, NotARankFile) as error:
                    log.warning("rank 0 sent a report that breaks the rules; dropped: %s", error)

    def _accepted(self) -> socket.socket | None:
        """Rank 0's connection; None if the ranks ended without one (rank 0 failed first). A
        connection rank 0 made before it exited waits in the backlog and is still taken."""
        while True:
            try:
                return self.listener.accept()[0]
            except TimeoutError:
                if self._finishing.is_set():
                    return None
            except OSError:
                return None

    def _relay(self, payload: BaseModel) -> None:
        if isinstance(payload, CheckpointRecord):
            self._store_checkpoint(payload)
        elif isinstance(payload, CheckpointRemoved):
            self._remove_checkpoint(payload)
        self.send(payload)
        self.relayed += 1

    def _store_checkpoint(self, record: CheckpointRecord) -> None:
        expected = checkpoint_path(self.job_id, record.id, self.attempt)
        if not is_checkpoint_of(record.id, self.job_id) or record.path != expected:
            raise ValueError(f"checkpoint {record.id!r} at {record.path!r} is not this attempt's to write")
        local = handed_over_file(self.rank_dir, record.path)
        with open_rank_file(self.rank_dir, str(local.relative_to(self.rank_dir))) as file:
            size, sha256 = _measured(file)
            if (size, sha256) != (record.size_bytes, record.sha256):
                raise ValueError(f"checkpoint {record.id}: the file is not the one reported")
            file.seek(0)
            self.store.put_stream(file, record.path)
        remove_rank_file(self.rank_dir, str(local.relative_to(self.rank_dir)))

    def _remove_checkpoint(self, removed: CheckpointRemoved) -> None:
        """Only its local copy: the collector deletes the stored files once it has removed the
        row, and only for the job's current attempt (this one may have been left behind)."""
        if not is_checkpoint_of(removed.id, self.job_id):
            raise ValueError(f"checkpoint {removed.id!r} is not this job's")
        local = handed_over_file(self.rank_dir, checkpoint_path(self.job_id, removed.id, self.attempt))
        remove_rank_file(self.rank_dir, str(local.relative_to(self.rank_dir)))


def _measured(file: BinaryIO) -> tuple[int, str]:
    digest, size = hashlib.sha256(), 0
    for block in iter(lambda: file.read(1 << 20), b""):
        digest.update(block)
        size += len(block)
    return size, digest.hexdigest()
