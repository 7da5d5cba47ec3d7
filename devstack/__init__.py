"""A whole trainjobs stack on one machine, as the tests and the benchmarks start it: real SQL,
Redis, API and worker processes, moto's S3 server, hosts in network namespaces. Not installed
with the package; the tests and `python -m bench` import it from the checkout."""

from devstack.archives import (
    EXAMPLE_PROJECT,
    OWN_TASK_PROJECT,
    archive_of,
    example_files,
    header_bomb,
    member,
    wheel,
)
from devstack.hosts import NetworkHosts
from devstack.processes import (
    child_pids,
    descendants,
    find_launcher,
    kill_launchers_of,
    launchers_matching,
    pid_alive,
    processes_of_job,
    rank_pids,
    waiting_launchers,
)
from devstack.servers import MotoS3, PrivateRedis
from devstack.services import (
    POSTGRES_URL,
    REDIS_URL,
    clear_namespace,
    free_port,
    job_sessions,
    new_token,
    sql_database,
    wait_until,
)
from devstack.specs import HALF_SECOND_EPOCHS, plugin_spec, tiny_wavenet_spec
from devstack.stack import Stack, wait_for_terminal

__all__ = [
    "EXAMPLE_PROJECT",
    "OWN_TASK_PROJECT",
    "header_bomb",
    "HALF_SECOND_EPOCHS",
    "POSTGRES_URL",
    "REDIS_URL",
    "MotoS3",
    "NetworkHosts",
    "PrivateRedis",
    "Stack",
    "archive_of",
    "child_pids",
    "clear_namespace",
    "descendants",
    "example_files",
    "find_launcher",
    "free_port",
    "job_sessions",
    "kill_launchers_of",
    "launchers_matching",
    "member",
    "new_token",
    "pid_alive",
    "plugin_spec",
    "processes_of_job",
    "rank_pids",
    "sql_database",
    "tiny_wavenet_spec",
    "wait_for_terminal",
    "wait_until",
    "waiting_launchers",
    "wheel",
]
