"""The command line's own rules, without a server: YAML specs, the progress line, and the client's
reconnect pace."""

from __future__ import annotations

import io
import re

from rich.console import Console

from trainjobs.cli.output import printable
from trainjobs.cli.progress import Progress
from trainjobs.cli.spec_files import yaml_spec
from trainjobs.client import RECONNECT_CAP_SECONDS, reconnect_delay


def test_yaml_specs_read_numbers_as_yaml_1_2_does():
    spec = yaml_spec("optimizer:\n  name: adamw\n  lr: 3e-4\nepochs: 10\nname: '3e-4'\nbatch_size: 0x10\n")
    assert spec == {"optimizer": {"name": "adamw", "lr": 0.0003}, "epochs": 10, "name": "3e-4", "batch_size": 16}
    assert isinstance(spec["epochs"], int)


def test_the_progress_line_is_clipped_to_the_terminal():
    out = io.StringIO()
    terminal = Console(file=out, width=40, force_terminal=True, color_system=None)
    job = {
        "id": "j" * 17,
        "spec": {"epochs": 10},
        "epoch": 3,
        "state": "running",
        "stop_reason": None,
        "waiting_reason": None,
        "metrics": {"train_loss": 1.0, "val_loss": 2.0, "samples_per_second": 50.0, "epoch_seconds": 3.0},
    }
    progress = Progress(interactive=True, console=terminal)
    progress.show(job)
    progress.close()
    screen = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", out.getvalue())  # without the cursor's moves
    drawn = [line for line in re.split(r"[\r\n]", screen) if line.strip()]
    assert drawn and all(len(line) <= 40 for line in drawn)
    assert drawn[-1].rstrip().endswith("…") and "epoch 3/10" in drawn[-1]


def test_reconnects_back_off_exponentially_up_to_a_cap_with_jitter():
    delays = [[reconnect_delay(failures) for _ in range(200)] for failures in range(1, 12)]
    means = [sum(row) / len(row) for row in delays]
    assert all(later > earlier for earlier, later in zip(means[:4], means[1:5], strict=True))  # below the cap
    assert max(max(row) for row in delays) <= RECONNECT_CAP_SECONDS
    assert min(min(row) for row in delays) > 0.1  # never a tight loop
    assert len({round(value, 6) for value in delays[-1]}) > 100  # jittered, not in step


def test_names_reach_the_terminal_with_control_and_bidi_characters_escaped():
    assert printable("evil\x1b]0;owned\x07 \u202eright") == "evil\\x1b]0;owned\\x07 \\u202eright"
    assert printable("plain name, caf\u00e9") == "plain name, caf\u00e9"
