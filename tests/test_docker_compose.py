import shutil
import subprocess
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]


def test_docker_compose_file_validates_and_holds_the_stack():
    binary = shutil.which("docker-compose")
    assert binary, "docker-compose is not installed (the README's setup installs Debian's package)"
    result = subprocess.run([binary, "-f", str(ROOT / "docker-compose.yml"), "config"], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    services = yaml.safe_load(result.stdout)["services"]
    assert {"postgres", "redis", "migrate", "api", "worker"} <= services.keys()
    assert "--appendonly" in " ".join(map(str, services["redis"]["command"]))
    devices = services["worker"]["deploy"]["resources"]["reservations"]["devices"]
    assert devices[0]["capabilities"] == ["gpu"]
