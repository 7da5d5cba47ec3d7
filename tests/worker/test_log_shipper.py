"""The launcher's log shipper on real files: whole lines, numbered per rank, in bounded batches,
with the last partial line sent when it stops; asleep until a rank writes."""

import time

import pytest

from trainjobs.contract.events import MAX_LOG_LINE_CHARS, MAX_LOG_LINES_PER_EVENT, LogLines
from trainjobs.worker.directory_changes import DirectoryChanges
from trainjobs.worker.log_shipper import LogShipper


def test_new_whole_lines_go_out_numbered_per_rank_and_the_rest_on_stop(tmp_path):
    sent: list[LogLines] = []
    shipper = LogShipper(tmp_path, sent.append)
    (tmp_path / "rank0.log").write_text("a\nb\npart")
    (tmp_path / "rank1.log").write_text("x\n")
    (tmp_path / "launcher.log").write_text("not a rank's\n")
    shipper.ship()
    assert [(batch.rank, batch.first_line, batch.lines) for batch in sent] == [(0, 0, ["a", "b"]), (1, 0, ["x"])]

    with open(tmp_path / "rank0.log", "a") as file:
        file.write("ial\nc\n" + "long" * 1000 + "\n" + "last, no newline")
    sent.clear()
    shipper.stop()
    assert [(batch.rank, batch.first_line) for batch in sent] == [(0, 2)]
    lines = sent[0].lines
    assert lines[:2] == ["partial", "c"] and lines[3] == "last, no newline"
    assert len(lines[2]) == MAX_LOG_LINE_CHARS and lines[2].endswith("…")


def test_a_burst_of_output_goes_out_in_bounded_batches(tmp_path):
    sent: list[LogLines] = []
    (tmp_path / "rank0.log").write_text("".join(f"line {n}\n" for n in range(1234)))
    LogShipper(tmp_path, sent.append).ship()
    assert [len(batch.lines) for batch in sent] == [MAX_LOG_LINES_PER_EVENT, MAX_LOG_LINES_PER_EVENT, 234]
    assert [batch.first_line for batch in sent] == [0, 500, 1000]
    assert sent[-1].lines[-1] == "line 1233"


def test_past_the_service_s_cap_nothing_more_is_sent(tmp_path):
    """The collector keeps at most the cap; lines past it were sent only to be dropped."""
    sent: list[LogLines] = []
    rank_log = tmp_path / "rank0.log"
    rank_log.write_text("".join(f"line {n}\n" for n in range(700)))
    shipper = LogShipper(tmp_path, sent.append, cap_lines=600)
    shipper.ship()
    with rank_log.open("a") as more:
        more.write("".join(f"line {n}\n" for n in range(700, 5000)))
    shipper.ship()
    shipper.ship(final=True)
    assert sum(len(batch.lines) for batch in sent) == 700  # the cap passed: the rest stays in the file


class CountingShipper(LogShipper):
    """A shipper that counts its looks at the files."""

    looks = 0

    def ship(self, final: bool = False) -> None:
        self.looks += 1
        super().ship(final)


def lines_shipped_after_a_write(run_path, sent: list[LogLines]) -> list[list[str]]:
    """Rank 0 writes a line; the batches sent within 5 s of it."""
    (run_path / "rank0.log").write_text("first line\n")
    deadline = time.monotonic() + 5
    while not sent and time.monotonic() < deadline:
        time.sleep(0.02)
    return [batch.lines for batch in sent]


def test_a_running_shipper_sleeps_while_no_rank_writes_and_ships_soon_after_one_does(tmp_path):
    changes = DirectoryChanges.open(tmp_path)
    if changes is None:
        pytest.skip("no inotify on this host: the shipper polls instead")
    changes.close()
    sent: list[LogLines] = []
    (tmp_path / "rank0.log").write_text("")
    shipper = CountingShipper(tmp_path, sent.append, every_seconds=0.1).start()
    try:
        time.sleep(1.0)
        (tmp_path / "launcher.log").write_text("the launcher's own line\n")
        time.sleep(0.5)
        assert shipper.looks == 0  # a timer would have looked 15 times by now
        assert lines_shipped_after_a_write(tmp_path, sent) == [["first line"]]
    finally:
        started = time.monotonic()
        shipper.stop()
    assert time.monotonic() - started < 2  # a sleeping shipper is woken to stop, not waited for


def test_a_shipper_without_inotify_still_ships_on_its_timer(tmp_path, monkeypatch):
    monkeypatch.setattr(DirectoryChanges, "open", classmethod(lambda cls, directory: None))
    sent: list[LogLines] = []
    (tmp_path / "rank0.log").write_text("")
    shipper = LogShipper(tmp_path, sent.append, every_seconds=0.1).start()
    try:
        assert lines_shipped_after_a_write(tmp_path, sent) == [["first line"]]
    finally:
        shipper.stop()
