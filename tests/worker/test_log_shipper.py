"""The launcher's log shipper on real files: whole lines, numbered per rank, in bounded batches,
with the last partial line sent when it stops."""

from trainjobs.contract.events import MAX_LOG_LINE_CHARS, MAX_LOG_LINES_PER_EVENT, LogLines
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
