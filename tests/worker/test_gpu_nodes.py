"""Exactly the leased GPUs in a job's sandbox (trainjobs.worker.gpu_nodes), on a host with no GPU:
the worker's device folder is a temporary one holding fake NVIDIA nodes (mknod, with /dev/null's
numbers), and each test looks from inside a real sandbox (bubblewrap) at what it holds. Only the
CUDA runtime cannot exist here; the nodes, the sandbox and the fork server are the real ones."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from trainjobs.contract.run import RunRequest
from trainjobs.worker.gpu_nodes import CONTROL_NODES, GpuNodes
from trainjobs.worker.sandbox import unavailable_because
from trainjobs.worker.slot import Slot

pytestmark = pytest.mark.skipif(unavailable_because() is not None, reason=f"no sandbox: {unavailable_because()}")

NULL = os.makedev(1, 3)  # /dev/null's major and minor: a node anything may open, on any host
LIST_GPUS = """
import json, os
nodes = sorted(name for name in os.listdir("/dev") if name.startswith("nvidia"))
for name in nodes:  # each one a node the ranks' user can open
    with open("/dev/" + name, "w") as node:
        node.write("x")
print(json.dumps({"nodes": nodes, "order": os.environ.get("CUDA_DEVICE_ORDER")}))
"""


@pytest.fixture
def gpu_host(tmp_path) -> GpuNodes:
    """Four GPUs (nvidia0..3) and the driver's control nodes, and its /proc state for each GPU."""
    devices = tmp_path / "dev"
    devices.mkdir()
    for name in (*CONTROL_NODES[:3], *(f"nvidia{gpu}" for gpu in range(4))):
        os.mknod(devices / name, 0o666 | 0o020000, NULL)  # S_IFCHR
        os.chmod(devices / name, 0o666)  # as the driver makes them (mknod's mode passed the umask)
    driver = tmp_path / "driver"
    for gpu in range(4):
        entry = driver / "gpus" / f"0000:0{gpu + 1}:00.0"
        entry.mkdir(parents=True)
        (entry / "information").write_text(f"Model: Fake GPU\nDevice Minor: {gpu}\n")
    return GpuNodes(devices, driver)


def slot_for(tmp_path: Path, name: str, gpu_host: GpuNodes) -> Slot:
    slots = tmp_path / name
    return Slot.claim(slots, tmp_path / "data", False, 64, 1 << 24, gpu_host)


def seen_inside(slot: Slot) -> dict:
    command = slot.sandbox.command([sys.executable, "-c", textwrap.dedent(LIST_GPUS)])
    done = subprocess.run(command, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_a_job_leased_gpus_1_and_3_of_4_sees_exactly_those_and_the_control_nodes(tmp_path, gpu_host):
    slot = slot_for(tmp_path, "slots", gpu_host)
    try:
        slot.hold_gpus([3, 1])
        seen = seen_inside(slot)
    finally:
        slot.release()
    assert seen["nodes"] == sorted([*CONTROL_NODES[:3], "nvidia1", "nvidia3"])
    assert seen["order"] == "PCI_BUS_ID"  # CUDA numbers them as the minors go: nvidia1 is cuda:0


def test_a_sandbox_with_no_lease_holds_no_gpu_and_no_driver_node(tmp_path, gpu_host):
    slot = slot_for(tmp_path, "slots", gpu_host)
    try:
        command = slot.sandbox.command([sys.executable, "-c", "import os; print(sorted(os.listdir('/dev')))"])
        done = subprocess.run(command, capture_output=True, text=True, timeout=60)
    finally:
        slot.release()
    assert "nvidia" not in done.stdout, done.stdout


def test_two_jobs_side_by_side_on_one_host_each_see_only_their_own_gpu(tmp_path, gpu_host):
    first, second = slot_for(tmp_path, "first", gpu_host), slot_for(tmp_path, "second", gpu_host)
    try:
        first.hold_gpus([0])
        second.hold_gpus([2])
        commands = [
            slot.sandbox.command([sys.executable, "-c", textwrap.dedent(LIST_GPUS)]) for slot in (first, second)
        ]
        running = [subprocess.Popen(command, stdout=subprocess.PIPE, text=True) for command in commands]
        seen = [json.loads(process.communicate(timeout=60)[0])["nodes"] for process in running]
    finally:
        first.release()
        second.release()
    controls = list(CONTROL_NODES[:3])
    assert seen == [sorted([*controls, "nvidia0"]), sorted([*controls, "nvidia2"])]


def test_a_gpu_whose_node_is_missing_fails_the_job_naming_it(tmp_path, gpu_host):
    from trainjobs.worker.launcher import _sandbox_without_gpus

    slot = slot_for(tmp_path, "slots", gpu_host)
    request = RunRequest.model_validate(_request(tmp_path, devices=[1, 5]))
    try:
        outcome = _sandbox_without_gpus(request, slot)
    finally:
        slot.release()
    assert outcome is not None and outcome.state == "failed" and outcome.stop_reason == "error"
    assert "GPU 5" in outcome.error and "nvidia5" in outcome.error and "host-a" in outcome.error


def test_the_driver_state_lists_only_the_leased_gpus(gpu_host):
    binds = gpu_host.driver_state([2])  # bound where the driver is loaded (it is not, here)
    gpu_entries = [target for target in binds if target.startswith("/proc/driver/nvidia/gpus")]
    assert gpu_entries == ["/proc/driver/nvidia/gpus", "/proc/driver/nvidia/gpus/0000:03:00.0"]


WARM_THEN_LEASED = """
import json, multiprocessing, os, sys
from pathlib import Path
from trainjobs.contract.run import RunRequest
from trainjobs.worker.gpu_nodes import GpuNodes
from trainjobs.worker.launcher import _sandbox_without_gpus, warm_up
from trainjobs.worker.slot import Slot

LIST = "import os, json; open({out!r}, 'w').write(json.dumps(sorted(os.listdir('/dev'))))"

def nodes(slot):
    # /dev's nvidia nodes, as a process forked from the fork server (as a rank is) finds them; it
    # writes them into the slot, the one place it may write.
    out = slot.path / "mine" / "seen.json"
    child = context.Process(target=exec, args=(LIST.format(out=str(out)),))
    child.start()
    child.join(60)
    assert child.exitcode == 0, child.exitcode
    return [name for name in json.loads(out.read_text()) if name.startswith("nvidia")]

if __name__ == "__main__":
    context = multiprocessing.get_context("forkserver")
    scratch, devices, driver, request = sys.argv[1:]
    slot = Slot.claim(Path(scratch) / "slots", Path(scratch) / "data", False, 64, 1 << 24,
                      GpuNodes(Path(devices), Path(driver)))
    try:
        (slot.path / "mine").mkdir()
        os.chown(slot.path / "mine", slot.sandbox.uid, slot.sandbox.uid)
        warm_up(slot.python)  # as a waiting launcher does, before its job is known
        before = nodes(slot)
        assert _sandbox_without_gpus(RunRequest.model_validate_json(request), slot) is None
        after = nodes(slot)
    finally:
        slot.release()
    print(json.dumps({"before": before, "after": after}))
"""


def test_a_warm_launcher_handed_a_job_forks_its_ranks_with_only_that_jobs_gpus(tmp_path, gpu_host):
    request = json.dumps(_request(tmp_path, devices=[2, 3]))
    folders = [str(tmp_path), str(gpu_host.device_root), str(gpu_host.driver_proc)]
    done = subprocess.run(
        [sys.executable, "-P", "-c", textwrap.dedent(WARM_THEN_LEASED), *folders, request],
        capture_output=True, text=True, timeout=120, cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    seen = json.loads(done.stdout.splitlines()[-1])
    assert seen["before"] == []
    assert seen["after"] == sorted([*CONTROL_NODES[:3], "nvidia2", "nvidia3"])


def test_the_ranks_address_their_leased_gpus_from_zero_inside_the_sandbox(tmp_path, gpu_host):
    from trainjobs.store import CheckpointStore
    from trainjobs.worker.slot import AttemptFiles

    slot = slot_for(tmp_path, "slots", gpu_host)
    request = RunRequest.model_validate(_request(tmp_path, devices=[1, 3]))
    try:
        ranks = AttemptFiles(request, slot, CheckpointStore(str(tmp_path / "store"))).for_ranks()
    finally:
        slot.release()
    assert ranks.devices == [0, 1]  # local rank i: cuda:i, the i-th leased GPU
    assert request.devices == [1, 3]  # the worker's own record keeps the physical ids


def _request(tmp_path: Path, devices: list[int]) -> dict:
    from devstack import tiny_wavenet_spec

    run_path = tmp_path / "run"
    run_path.mkdir(exist_ok=True)
    return {
        "job_id": "job-1",
        "attempt": 1,
        "spec": {**tiny_wavenet_spec(gpus=len(devices)), "device": "cuda"},
        "run_dir": str(run_path),
        "checkpoint_dir": str(tmp_path / "store"),
        "data_root": str(tmp_path / "data"),
        "devices": devices,
        "hostname": "host-a",
    }
