"""What a worker hands its launcher, and the launcher each rank: one run of one job attempt."""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel

from trainjobs.contract.spec import JobSpec


class RunRequest(BaseModel):
    job_id: str
    attempt: int
    spec: JobSpec
    devices: list[int] = []  # leased cuda device ids; empty on cpu
    run_dir: str  # the attempt's folder: the launcher's log, and (by default) the ranks' files
    # Where the ranks write their logs, errors, result and checkpoint files [run_dir]; a job's
    # launcher gives its ranks a folder in their sandbox's slot.
    rank_dir: str | None = None
    checkpoint_dir: str  # the checkpoint store's root
    data_root: str  # datasets read files only under it
    # Where rank 0 reports: the service's Redis stream, or (both None: `trainjobs train`) the
    # console, with the ranks' output left on the terminal instead of in log files.
    redis_url: str | None = None
    events_stream: str | None = None
    resume_path: str | None = None  # relative to checkpoint_dir
    init_path: str | None = None  # relative to checkpoint_dir
    process_group_timeout_seconds: float = 120.0
    # A job across hosts: this launcher runs node `node_rank` of `nodes`, ranks
    # node_rank * ranks_per_node onwards. Node 0 serves the rendezvous store at `address` (its
    # worker's --address) and publishes it in Redis under `rendezvous_key`; the others read it.
    nodes: int = 1
    node_rank: int = 0
    hostname: str = "local"  # the worker running this node, named in errors
    address: str = "127.0.0.1"
    rendezvous_key: str | None = None
    rendezvous_host: str | None = None  # node 0's address, as its worker recorded it in SQL (other nodes)
    socket_ifname: str | None = None  # the interface of `address`, for gloo and NCCL
    # CPU threads each rank may use. A worker gives each of its slots an equal share of the
    # host's cores, so concurrent jobs never oversubscribe them; None (`trainjobs train`, which
    # has the host to itself): the cores over this job's ranks.
    threads_per_rank: int | None = None
    progress_interval_seconds: float = 10.0  # rank 0 reports progress inside an epoch this often
    log_lines_cap: int | None = None  # the launcher ships at most about this many lines (None: all)
    # A job's own code: its unpacked archive (first on the ranks' import path) and the packages its
    # requirements.txt installed (next), as the worker's cache holds them, or as the ranks see them.
    code_dir: str | None = None
    packages_dir: str | None = None
    # Rank 0 of a service job hands its reports and checkpoint files to its launcher over this
    # Unix socket; None: `trainjobs train`, whose rank 0 writes to the console and the store.
    channel: str | None = None

    @property
    def run_path(self) -> Path:
        return Path(self.run_dir)

    @property
    def rank_path(self) -> Path:
        return Path(self.rank_dir or self.run_dir)

    @property
    def ranks_here(self) -> int:
        return self.spec.ranks_per_node

    def global_rank(self, local_rank: int) -> int:
        return self.node_rank * self.ranks_here + local_rank

    @property
    def is_local(self) -> bool:
        return self.redis_url is None and self.channel is None


class StoreAddress(BaseModel):
    """Where ranks find their rendezvous store: a file in their folder (the ranks of one node, no
    socket at all), or node 0's TCP store at an address and port (several nodes)."""

    file: str | None = None
    host: str | None = None
    port: int | None = None


class RankResult(BaseModel):
    """Written by rank 0 after the final barrier: every rank has finished its work by then."""

    stop_reason: str
