"""GET /v1/models and /v1/datasets: what a spec may name, and what each model reports."""


def test_the_model_catalog_says_which_figures_each_model_reports(api, alice, own_task_installed):
    models = {entry["name"]: entry for entry in api.get("/v1/models", headers=alice).json()["items"]}
    assert models["wavenet"]["figures"] == ["train_loss", "val_loss", "val_accuracy"]
    assert models["regressor"]["figures"] == ["train_loss", "train_mae", "val_loss", "val_mae"]
    assert all(entry["figures"] is None for entry in api.get("/v1/datasets", headers=alice).json()["items"])
