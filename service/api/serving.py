"""Serving the API with uvicorn, without waking while there is nothing to serve.

Why: while a job trains, a wakeup of any service process lands on a core that a rank needs; the
rank waits, and with DDP every other rank waits for it at the next all-reduce. uvicorn's server
wakes ten times a second for its housekeeping (the Date header, the shutdown flag), measured at
about 1.3 ms of CPU a second here, the largest share of the idle API's. Its supervisor of several
processes pings each of them twice a second through a pipe, and a thread in each answers.

So here:
- each server keeps house once a second (the Date header has a resolution of one second) and
  wakes at once on a signal, so it still stops promptly;
- several processes (`--workers N`) run under `serve_in_processes`: the supervisor sleeps until
  one of them exits or a signal comes, restarts one that died, and asks each whether it still
  answers every `HEALTH_CHECK_SECONDS` (a thread in each answers, woken only then), ending and
  replacing one that does not.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import multiprocessing
import signal
import socket
import threading
import time
from multiprocessing.connection import Connection, wait
from types import FrameType

import uvicorn
from uvicorn.config import STARTUP_FAILURE

log = logging.getLogger("uvicorn.error")

HOUSEKEEPING_SECONDS = 1.0
HEALTH_CHECK_SECONDS = 10.0
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)

_spawn = multiprocessing.get_context("spawn")


class QuietServer(uvicorn.Server):
    """uvicorn's server, keeping house once a second instead of ten times."""

    def __init__(self, config: uvicorn.Config):
        super().__init__(config)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._woken = asyncio.Event()

    async def main_loop(self) -> None:
        self._loop = asyncio.get_running_loop()
        counter = 0
        should_exit = await self.on_tick(counter)
        while not should_exit:
            # on_tick counts tenths of a second and refreshes the Date header on whole seconds.
            counter = (counter + 10) % 864_000
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._woken.wait(), HOUSEKEEPING_SECONDS)
            should_exit = await self.on_tick(counter)

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        super().handle_exit(sig, frame)
        if self._loop is not None and not self._loop.is_closed():
            self._loop.call_soon_threadsafe(self._woken.set)


def serve(config: uvicorn.Config) -> None:
    """One process: the server in this one."""
    server = QuietServer(config)
    server.run()
    if not server.started:
        raise SystemExit(STARTUP_FAILURE)


class ServerProcess:
    """One API process of several, started on the shared sockets, and the supervisor's end of
    its health-check pipe."""

    def __init__(self, config: uvicorn.Config, sockets: list[socket.socket]):
        self.health, child_end = _spawn.Pipe()
        self.process = _spawn.Process(target=_run_server_process, args=(config, sockets, child_end), daemon=False)
        self.process.start()
        child_end.close()

    def answers(self, timeout: float) -> bool:
        try:
            self.health.send(b"ping")
            return self.health.poll(timeout) and self.health.recv() is True
        except (OSError, EOFError):
            return False

    def end(self, kill: bool = False) -> None:
        if self.process.is_alive() and kill:
            self.process.kill()
        elif self.process.is_alive():
            self.process.terminate()
        self.process.join()
        self.health.close()


def serve_in_processes(config: uvicorn.Config, processes: int) -> None:
    """`processes` servers on one socket, each restarted when it dies or stops answering. Ends
    them all on SIGINT or SIGTERM, or when one fails to start (it would fail again)."""
    sockets = [config.bind_socket()]
    wake_reader, wake_writer = socket.socketpair()
    wake_writer.setblocking(False)
    previous_wakeup_fd = signal.set_wakeup_fd(wake_writer.fileno())
    previous_handlers = {sig: signal.signal(sig, lambda *_: None) for sig in STOP_SIGNALS}
    log.info("Started parent process of %d API processes", processes)
    servers = [ServerProcess(config, sockets) for _ in range(processes)]
    try:
        next_check = time.monotonic() + HEALTH_CHECK_SECONDS
        while True:
            sentinels = [server.process.sentinel for server in servers]
            woken = wait([wake_reader, *sentinels], timeout=max(0.0, next_check - time.monotonic()))
            if wake_reader in woken and set(wake_reader.recv(64)) & set(STOP_SIGNALS):
                break
            checking = time.monotonic() >= next_check
            if checking:
                next_check = time.monotonic() + HEALTH_CHECK_SECONDS
            _replace_the_lost(servers, config, sockets, checking)
    finally:
        _end_all(servers)
        signal.set_wakeup_fd(previous_wakeup_fd)
        for sig, handler in previous_handlers.items():
            signal.signal(sig, handler)
        wake_reader.close()
        wake_writer.close()
        log.info("Stopped parent process")


def _replace_the_lost(
    servers: list[ServerProcess], config: uvicorn.Config, sockets: list[socket.socket], checking: bool
) -> None:
    """Start another for each server that died (or, when `checking`, stopped answering); stop
    everything when one could not start at all."""
    for index, server in enumerate(servers):
        exitcode = server.process.exitcode
        if exitcode == STARTUP_FAILURE:
            log.error("API process [%s] failed to start; stopping", server.process.pid)
            raise SystemExit(STARTUP_FAILURE)
        if exitcode is None and (not checking or server.answers(config.timeout_worker_healthcheck)):
            continue
        log.warning("API process [%s] died or stopped answering; starting another", server.process.pid)
        server.end(kill=True)
        servers[index] = ServerProcess(config, sockets)


def _end_all(servers: list[ServerProcess]) -> None:
    for server in servers:
        if server.process.is_alive():
            server.process.terminate()
    for server in servers:
        server.end()


def _run_server_process(config: uvicorn.Config, sockets: list[socket.socket], health: Connection) -> None:
    config.configure_logging()  # the parent's logging setup does not cross a spawn
    threading.Thread(target=_answer_health_checks, args=(health,), name="trainjobs-api-health", daemon=True).start()
    server = QuietServer(config)
    with contextlib.suppress(KeyboardInterrupt):
        server.run(sockets=sockets)
    if not server.started:
        raise SystemExit(STARTUP_FAILURE)


def _answer_health_checks(health: Connection) -> None:
    """Sleeps until the supervisor asks, then answers: an interpreter that is stuck does not."""
    while True:
        try:
            health.recv()
            health.send(True)
        except (OSError, EOFError):
            return
