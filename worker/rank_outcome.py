"""What the launcher reports when its ranks end: rank 0's result, or a failed rank with the
reason it left (its error file, or what its fork server said when it died before its training
started), a rank past the sandbox's bound on disk, or a node that lost its peers (requeued)."""

from __future__ import annotations

import errno
import logging
import re
import signal
import time

from trainjobs.contract.events import StateChange
from trainjobs.contract.run import RankResult, RunRequest
from trainjobs.worker.fork_server_output import fork_server_tail
from trainjobs.worker.rank_files import append_rank_text, read_rank_text, without_server_paths
from trainjobs.worker.trainer.trainer import PREEMPTED

log = logging.getLogger("trainjobs.launcher")

TRACEBACK_LINES = 12
FILE_TOO_LARGE = f"[Errno {errno.EFBIG}]"  # a write past RLIMIT_FSIZE, as a traceback names it


# What a rank's traceback says when a peer on another host went away: its connections closed.
PEER_LOST = re.compile(r"Connection closed by peer|Connection reset by peer|Broken pipe|ECONNRESET", re.IGNORECASE)
# A node that saw its peers go waits this long before saying so: if a peer's rank failed for a
# reason of its own, that node's report ("failed", with the traceback) arrives first and stands.
PEER_LOSS_GRACE_SECONDS = 5.0


def failure_or_late_success(
    request: RunRequest, local_rank: int, exit_code: int, fork_server_before: int = 0
) -> StateChange:
    """A rank (`local_rank` of this node) exited with `exit_code` (negative: a signal) while others
    ran. `fork_server_before`: how much the fork server had written when the ranks were started."""
    finished = success(request)
    if finished is not None:
        log.warning("rank %d exited with %s after the job finished; the job's result stands", local_rank, exit_code)
        return finished
    if exit_code == -signal.SIGXFSZ:  # a file past the sandbox's bound (RLIMIT_FSIZE)
        return StateChange(state="failed", stop_reason="error", error=past_disk_bound(None))
    rank = request.global_rank(local_rank)
    how = f"exit code {exit_code}" if exit_code >= 0 else f"signal {signal.Signals(-exit_code).name}"
    where = f" on {request.hostname}" if request.nodes > 1 else ""
    error = f"rank {rank}{where} failed ({how})"
    written = read_rank_text(request.rank_path, f"rank{rank}.error")  # never through a link the rank made
    if not written and (written := fork_server_tail(TRACEBACK_LINES, since=fork_server_before)):
        error += " before its training started"  # its fork server's output says why
        append_rank_text(request.rank_path, f"rank{rank}.log", written)  # and the job's logs show it
    if written and FILE_TOO_LARGE in written:  # Python ignores SIGXFSZ: the write raised EFBIG
        return StateChange(state="failed", stop_reason="error", error=past_disk_bound(None))
    tail = ""
    if written:
        tail = without_server_paths("\n".join(written.strip().splitlines()[-TRACEBACK_LINES:]), request)
        error += ":\n" + tail
    if request.nodes > 1 and PEER_LOST.search(tail):
        time.sleep(PEER_LOSS_GRACE_SECONDS)
        # "queued": the service requeues the whole job (attempt + 1) and it resumes elsewhere.
        return StateChange(state="queued", error=f"node {request.node_rank} lost its peers: {error}")
    return StateChange(state="failed", stop_reason="error", error=error)


def ranks_not_started(request: RunRequest, error: Exception) -> StateChange:
    """The fork server is gone before it forked a rank: its sandbox could not be made (bubblewrap
    refused: no namespaces for it on this host, say), or its Python could not start there."""
    said = fork_server_tail(TRACEBACK_LINES) or ""
    append_rank_text(request.rank_path, f"rank{request.global_rank(0)}.log", said or str(error))
    reason = said.splitlines()[-1] if said else f"{type(error).__name__}: {error}"
    return StateChange(
        state="failed",
        stop_reason="error",
        error=f"node {request.node_rank} ({request.hostname}): the ranks' sandbox could not be started: {reason}",
    )


def success(request: RunRequest) -> StateChange | None:
    written = read_rank_text(request.rank_path, "result.json")
    if written is None:
        return None
    try:
        result = RankResult.model_validate_json(written)
    except ValueError:
        return StateChange(state="failed", stop_reason="error", error="rank 0 wrote a result that is not one")
    if result.stop_reason == PREEMPTED:  # its checkpoint is relayed before this: back to the queue
        return StateChange(state="queued")
    return StateChange(state="succeeded", stop_reason=result.stop_reason)


def past_disk_bound(limit: int | None) -> str:
    bound = f" of {limit:,} bytes" if limit else ""
    return f"the job's ranks wrote past their bound on disk{bound} (TRAINJOBS_JOB_DISK_BYTES)"
