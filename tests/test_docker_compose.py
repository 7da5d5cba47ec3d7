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
    secrets = {"TRAINJOBS_POSTGRES_PASSWORD": "pg-secret", "TRAINJOBS_REDIS_PASSWORD": "redis-secret"}
    result = subprocess.run(command, capture_output=True, text=True, env={**bare, **secrets}, cwd="/")
    assert result.returncode == 0, result.stderr
    services = yaml.safe_load(result.stdout)["services"]
    assert {"postgres", "redis", "migrate", "api", "worker"} <= services.keys()
    redis_command = " ".join(map(str, services["redis"]["command"]))
    assert "--appendonly" in redis_command and "--requirepass redis-secret" in redis_command
    assert services["api"]["environment"]["TRAINJOBS_REDIS_URL"] == "redis://:redis-secret@redis:6379/0"
    assert "pg-secret" in services["api"]["environment"]["TRAINJOBS_DATABASE_URL"]
    devices = services["worker"]["deploy"]["resources"]["reservations"]["devices"]
    assert devices[0]["capabilities"] == ["gpu"]
