import os
import shutil
import subprocess
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]


def test_docker_compose_file_validates_and_holds_the_stack():
    binary = shutil.which("docker-compose")
    assert binary, "docker-compose is not installed (the README's setup installs Debian's package)"
    command = [binary, "-f", str(ROOT / "docker-compose.yml"), "config"]
    bare = {key: value for key, value in os.environ.items() if not key.startswith("TRAINJOBS_")}
    refused = subprocess.run(command, capture_output=True, text=True, env=bare, cwd="/")
    assert refused.returncode != 0 and "TRAINJOBS_POSTGRES_PASSWORD" in refused.stderr + refused.stdout
    secrets = {
        "TRAINJOBS_POSTGRES_PASSWORD": "pg-secret",
        "TRAINJOBS_REDIS_PASSWORD": "redis-secret",
        "TRAINJOBS_MINIO_PASSWORD": "minio-secret",
    }
    result = subprocess.run(command, capture_output=True, text=True, env={**bare, **secrets}, cwd="/")
    assert result.returncode == 0, result.stderr
    services = yaml.safe_load(result.stdout)["services"]
    assert {"postgres", "redis", "minio", "bucket", "migrate", "api", "worker"} <= services.keys()
    assert services["api"]["environment"]["TRAINJOBS_CHECKPOINT_DIR"].startswith("s3://")
    redis_command = " ".join(map(str, services["redis"]["command"]))
    assert "--appendonly" in redis_command and "--requirepass redis-secret" in redis_command
    assert services["api"]["environment"]["TRAINJOBS_REDIS_URL"] == "redis://:redis-secret@redis:6379/0"
    assert "pg-secret" in services["api"]["environment"]["TRAINJOBS_DATABASE_URL"]
    devices = services["worker"]["deploy"]["resources"]["reservations"]["devices"]
    assert devices[0]["capabilities"] == ["gpu"]


def test_a_gpu_host_compose_file_runs_a_worker_alone_against_the_api_host():
    binary = shutil.which("docker-compose")
    assert binary, "docker-compose is not installed (the README's setup installs Debian's package)"
    env = {key: value for key, value in os.environ.items() if not key.startswith("TRAINJOBS_")}
    env.update(
        TRAINJOBS_POSTGRES_PASSWORD="pg",
        TRAINJOBS_REDIS_PASSWORD="rd",
        TRAINJOBS_MINIO_PASSWORD="mn",
        TRAINJOBS_API_HOST="10.0.0.5",
    )
    result = subprocess.run(
        [binary, "-f", str(ROOT / "docker-compose.gpu-host.yml"), "config"],
        capture_output=True,
        text=True,
        env=env,
        cwd="/",
    )
    assert result.returncode == 0, result.stderr
    services = yaml.safe_load(result.stdout)["services"]
    assert set(services) == {"worker"}
    environment = services["worker"]["environment"]
    assert environment["TRAINJOBS_REDIS_URL"] == "redis://:rd@10.0.0.5:6379/0"
    assert environment["AWS_ENDPOINT_URL"] == "http://10.0.0.5:9000"
