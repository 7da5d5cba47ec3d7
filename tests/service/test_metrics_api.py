"""GET /v1/jobs/{id}/metrics as JSON and as CSV: a column per figure, a model's own included, and
an empty cell where an epoch lacks one."""

import csv
import io

from devstack import tiny_wavenet_spec
from trainjobs.jobs.db import transaction
from trainjobs.jobs.repositories import epoch_metrics

EPOCH = {"lr": 0.01, "epoch_seconds": 1.5, "samples_per_second": 100.0, "val_accuracy": None}  # as a regression has it


def test_the_metrics_csv_has_a_column_per_figure_in_table_order(api, alice, writer_sessions):
    job_id = api.post("/v1/jobs", json=tiny_wavenet_spec(), headers=alice).json()["id"]
    with transaction(writer_sessions) as session:
        epoch_metrics.record(
            session, job_id, 1, 1, {"epoch": 1, "train_loss": 2.0, "val_loss": 2.5, "val_mae": 0.7, **EPOCH}
        )
        epoch_metrics.record(
            session,
            job_id,
            2,
            1,
            {"epoch": 2, "train_loss": 1.0, "val_loss": 1.5, "train_mae": 0.4, "val_mae": 0.5, **EPOCH},
        )
    items = api.get(f"/v1/jobs/{job_id}/metrics", headers=alice).json()["items"]
    assert [row.get("val_mae") for row in items] == [0.7, 0.5]  # JSON carries a model's own figures as they are

    response = api.get(f"/v1/jobs/{job_id}/metrics", params={"format": "csv"}, headers=alice)
    assert response.status_code == 200 and response.headers["content-type"].startswith("text/csv")
    rows = list(csv.reader(io.StringIO(response.text)))
    assert rows[0][:6] == ["epoch", "train_loss", "val_loss", "train_mae", "val_mae", "lr"]
    by_name = [dict(zip(rows[0], row, strict=True)) for row in rows[1:]]
    assert [(row["epoch"], row["train_mae"], row["val_mae"]) for row in by_name] == [
        ("1", "", "0.7"),
        ("2", "0.4", "0.5"),
    ]


def test_an_unknown_metrics_format_is_a_422_naming_it(api, alice):
    job_id = api.post("/v1/jobs", json=tiny_wavenet_spec(), headers=alice).json()["id"]
    response = api.get(f"/v1/jobs/{job_id}/metrics", params={"format": "xlsx"}, headers=alice)
    assert response.status_code == 422 and "format" in response.text
