"""The command line's own rules, without a server: YAML specs, the progress line, and the client's
reconnect pace."""

from __future__ import annotations

import io

from trainjobs.cli import Progress, yaml_spec
from trainjobs.client import RECONNECT_CAP_SECONDS, reconnect_delay


def test_yaml_specs_read_numbers_as_yaml_1_2_does():
    spec = yaml_spec("optimizer:\n  name: adamw\n  lr: 3e-4\nepochs: 10\nname: '3e-4'\nbatch_size: 0x10\n")
    assert spec == {"optimizer": {"name": "adamw", "lr": 0.0003}, "epochs": 10, "name": "3e-4", "batch_size": 16}
    assert isinstance(spec["epochs"], int)


def test_the_progress_line_is_clipped_to_the_terminal(monkeypatch):
    monkeypatch.setenv("COLUMNS", "40")
    out = io.StringIO()
    monkeypatch.setattr("sys.stdout", out)
    job = {
        "id": "j" * 17,
        "spec": {"epochs": 10},
        "epoch": 3,
        "state": "running",
        "stop_reason": None,
        "waiting_reason": None,
        "metrics": {"train_loss": 1.0, "val_loss": 2.0, "samples_per_second": 50.0, "epoch_seconds": 3.0},
    }
    Progress(interactive=True).show(job)
    drawn = out.getvalue().removeprefix("\r\033[K")
    assert len(drawn) < 40 and drawn.endswith("…")


def test_reconnects_back_off_exponentially_up_to_a_cap_with_jitter():
    delays = [[reconnect_delay(failures) for _ in range(200)] for failures in range(1, 12)]
    means = [sum(row) / len(row) for row in delays]
    assert all(later > earlier for earlier, later in zip(means[:4], means[1:5], strict=True))  # below the cap
    assert max(max(row) for row in delays) <= RECONNECT_CAP_SECONDS
    assert min(min(row) for row in delays) > 0.1  # never a tight loop
    assert len({round(value, 6) for value in delays[-1]}) > 100  # jittered, not in step


def test_names_reach_the_terminal_with_control_and_bidi_characters_escaped():
    from trainjobs.cli import printable

    assert printable("evil\x1b]0;owned\x07 \u202eright") == "evil\\x1b]0;owned\\x07 \\u202eright"
    assert printable("plain name, caf\u00e9") == "plain name, caf\u00e9"
