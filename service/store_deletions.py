"""Deleting files from the checkpoint store, until it says they are gone.

The rows that name a file (a checkpoint rotated out, a deleted job) are removed in one
transaction, which also records the file's deletion (`store_deletions`, an outbox like the
dispatch intents). After the commit the file is deleted at once, as before; the background sweep
then deletes every recorded path again (a path already gone is no error) and forgets it, or,
when the store fails (an object store away, a permission), tries it again later, waiting twice
as long each time up to an hour. A store that fails leaves files for a while, never a listed
checkpoint without its file.

Not here: a code archive's bytes (service.code_uploads), which another owner may upload again
under the same content address while a deletion waits to be retried.
"""

from __future__ import annotations

import logging
from datetime import timedelta

from sqlalchemy.orm import Session, sessionmaker

from trainjobs.contract.clock import utcnow
from trainjobs.jobs.db import transaction
from trainjobs.jobs.repositories import store_deletions
from trainjobs.store import CheckpointStore

log = logging.getLogger(__name__)

FIRST_TRY = timedelta(seconds=5)  # the deletion right after the commit goes first
LONGEST_WAIT_SECONDS = 3600.0
BATCH = 100


def record(session: Session, paths: list[str], tree: bool = False) -> None:
    """In the transaction that removes the rows naming them: these paths are to be deleted."""
    for path in paths:
        store_deletions.add(session, path, tree, FIRST_TRY)


def delete_now(store: CheckpointStore, paths: list[str], tree: bool = False) -> None:
    """Right after the commit; a failure is logged and left to the sweep."""
    for path in paths:
        try:
            _delete(store, path, tree)
        except Exception as error:
            log.warning("could not delete %s from the checkpoint store (%s); the sweep tries again", path, error)


def sweep(sessions: sessionmaker[Session], store: CheckpointStore, limit: int = BATCH) -> int:
    """Delete the recorded paths that are due; returns how many are gone."""
    with transaction(sessions) as session:
        due = [(row.id, row.path, row.tree, row.tries) for row in store_deletions.due(session, utcnow(), limit)]
    gone = 0
    for deletion_id, path, tree, tries in due:
        try:
            _delete(store, path, tree)
        except Exception as error:
            wait = min(FIRST_TRY.total_seconds() * 2**tries, LONGEST_WAIT_SECONDS)
            log.warning("could not delete %s from the checkpoint store (try %d: %s); again in %.0f s",
                        path, tries + 1, error, wait)  # fmt: skip
            with transaction(sessions) as session:
                store_deletions.failed(session, deletion_id, utcnow() + timedelta(seconds=wait))
            continue
        with transaction(sessions) as session:
            store_deletions.done(session, deletion_id)
        gone += 1
    return gone


def _delete(store: CheckpointStore, path: str, tree: bool) -> None:
    if tree:
        store.delete_tree(path)
    else:
        store.delete(path)
