"""The dashboard in headless Chromium (Debian's chromium and chromedriver, driven by Selenium):
sign in, see the job, watch its curve gain a point per epoch, cancel from the page."""

import os
import shutil
import time
from pathlib import Path

import pytest
from selenium import webdriver
from selenium.common.exceptions import StaleElementReferenceException
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import Select, WebDriverWait

from devstack import tiny_wavenet_spec, wait_for_terminal, wait_until

pytestmark = pytest.mark.e2e

CHROMIUM, CHROMEDRIVER = "/usr/bin/chromium", "/usr/bin/chromedriver"


@pytest.fixture
def browser(tmp_path):
    assert Path(CHROMIUM).exists() and Path(CHROMEDRIVER).exists(), (
        "Debian's chromium and chromium-driver are needed (scripts/ensure-services browser installs them)"
    )
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        f"--user-data-dir={tmp_path / 'chromium'}",
        "--window-size=1280,1100",
    ):
        options.add_argument(flag)
    driver = webdriver.Chrome(options=options, service=Service(executable_path=CHROMEDRIVER))
    yield driver
    driver.quit()


def train_points(browser) -> int:
    return len(browser.find_elements(By.CSS_SELECTOR, "#loss-chart circle.train-point"))


def test_sign_in_watch_a_job_s_curve_grow_and_cancel_from_the_page(stack_on, sqlite_url, browser, tmp_path):
    stack = stack_on(sqlite_url)
    token = stack.token("alice")
    client = stack.client(token)
    # Epochs of about a second (0.15 s per 320 samples on 2 cores), so the page is seen growing.
    data = {"name": "synthetic-audio", "params": {"num_samples": 2048, "length": 256, "mu": 32}}
    spec = tiny_wavenet_spec(name="dashboard-demo", epochs=8, data=data)
    job_id = client.post("/v1/jobs", json=spec).json()["id"]
    wait = WebDriverWait(browser, 60, poll_frequency=0.2)

    browser.get(stack.url + "/")
    token_box = wait.until(lambda b: b.find_element(By.ID, "token"))
    assert browser.find_elements(By.ID, "jobs") == []  # nothing but the shell before signing in
    token_box.send_keys(token)
    browser.find_element(By.ID, "sign-in-button").click()

    row = wait.until(lambda b: b.find_element(By.CSS_SELECTOR, f'tr[data-job="{job_id}"]'))
    assert "dashboard-demo" in row.text and "wavenet" in row.text
    row.click()

    watch_the_curve_grow_to_the_end(browser, wait, client, job_id, tmp_path)
    cancel_from_the_page(browser, wait, stack.url, client)


def shown_jobs(browser) -> list[str]:
    return browser.execute_script(
        "return [...document.querySelectorAll('#jobs tr.job-row')].map((row) => row.dataset.job);"
    )


def test_filter_load_more_label_chips_and_delete_behind_a_confirmation(stack_on, sqlite_url, browser):
    stack = stack_on(sqlite_url, with_worker=False)
    token = stack.token("alice")
    client = stack.client(token)
    made = []
    for i in range(56):
        labels = {"team": "vision" if i % 7 == 0 else "speech", "sweep": str(i % 2)}
        made.append(client.post("/v1/jobs", json=tiny_wavenet_spec(name=f"run-{i:02d}", labels=labels)).json())
    cancelled = [job["id"] for job in made[::10]]
    for job_id in cancelled:
        client.post(f"/v1/jobs/{job_id}/cancel")
    newest_first = [job["id"] for job in reversed(made)]
    wait = WebDriverWait(browser, 30, poll_frequency=0.2, ignored_exceptions=[StaleElementReferenceException])

    browser.get(stack.url + "/ui/")
    browser.execute_script("sessionStorage.setItem('trainjobs-token', arguments[0]);", token)
    browser.get(stack.url + "/ui/#/")
    wait.until(lambda b: len(shown_jobs(b)) == 50)
    assert shown_jobs(browser) == newest_first[:50]
    browser.find_element(By.ID, "load-more").click()
    wait.until(lambda b: shown_jobs(b) == newest_first and not b.find_element(By.ID, "load-more").is_displayed())

    filter_by_label_state_chip_and_name(browser, wait, stack.url, made, cancelled)
    delete_from_its_page_after_a_confirmation(browser, wait, stack.url, client, cancelled[0], made[-1]["id"])


def filter_by_label_state_chip_and_name(browser, wait, url: str, made: list[dict], cancelled: list[str]) -> None:
    # A label filter, then a state on top of it.
    labels = browser.find_element(By.ID, "label-filter")
    labels.send_keys("team=vision")
    labels.submit()
    vision = [job["id"] for job in reversed(made) if job["spec"]["labels"]["team"] == "vision"]
    wait.until(lambda b: shown_jobs(b) == vision)
    assert browser.current_url.endswith("#/?label=team%3Dvision")  # the filters are in the address, to share
    Select(browser.find_element(By.ID, "state-filter")).select_by_value("cancelled")
    wait.until(lambda b: shown_jobs(b) == [job_id for job_id in vision if job_id in cancelled])

    # A chip adds its label to the filter; the name filter narrows by substring.
    browser.get(url + "/ui/#/?name=RUN-1")
    named = [job["id"] for job in reversed(made) if job["name"].startswith("run-1")]
    wait.until(lambda b: shown_jobs(b) == named)
    chip = next(c for c in browser.find_elements(By.CSS_SELECTOR, "#jobs .chip") if c.text == "sweep=1")
    chip.click()
    wait.until(
        lambda b: (
            shown_jobs(b)
            == [j["id"] for j in reversed(made) if j["id"] in named and j["spec"]["labels"]["sweep"] == "1"]
        )
    )


def delete_from_its_page_after_a_confirmation(browser, wait, url: str, client, doomed: str, unfinished: str) -> None:
    # Delete a finished job from its page, after saying yes once more.
    browser.get(f"{url}/ui/#/jobs/{doomed}")
    wait.until(lambda b: b.find_element(By.ID, "delete").click() or True)
    wait.until(lambda b: b.find_element(By.ID, "delete-keep").click() or True)  # changed our mind
    assert client.get(f"/v1/jobs/{doomed}").status_code == 200
    wait.until(lambda b: b.find_element(By.ID, "delete").click() or True)
    assert "cannot be undone" in wait.until(lambda b: b.find_element(By.ID, "delete-question")).text
    browser.find_element(By.ID, "delete-confirm").click()
    wait.until(lambda b: b.current_url.endswith("#/") and len(shown_jobs(b)) == 50)
    assert client.get(f"/v1/jobs/{doomed}").status_code == 404 and doomed not in shown_jobs(browser)
    # A job that has not ended offers no delete.
    browser.get(f"{url}/ui/#/jobs/{unfinished}")
    wait.until(lambda b: "queued" in b.find_element(By.ID, "job-header").text)
    assert browser.find_elements(By.ID, "delete") == []


def watch_the_curve_grow_to_the_end(browser, wait, client, job_id: str, tmp_path: Path) -> None:
    # The curve gains points as epochs finish, live, without reloading the page.
    wait.until(lambda b: train_points(b) >= 1)
    seen, bars = {train_points(browser)}, set()
    while client.get(f"/v1/jobs/{job_id}").json()["state"] not in ("succeeded", "failed"):
        seen.add(train_points(browser))
        # Progress inside the epoch: a bar in the job's header while it runs.
        steps = browser.execute_script(
            "const bar = document.getElementById('job-progress'); return bar && bar.dataset.steps;"
        )
        if steps:
            bars.add(steps)
        time.sleep(0.2)
    finished = wait_for_terminal(client, job_id)
    assert finished["state"] == "succeeded"
    wait.until(lambda b: train_points(b) == 8 and "succeeded" in b.find_element(By.ID, "job-header").text)
    assert len(seen) >= 3, f"the curve did not grow point by point: saw {sorted(seen)}"
    assert len(browser.find_elements(By.CSS_SELECTOR, "#loss-chart circle.val-point")) == 8
    assert bars and all(int(steps) > 0 for steps in bars), bars
    # Memory per epoch beside the loss, and each epoch's data wait, memory and GPU in a table.
    assert len(browser.find_elements(By.CSS_SELECTOR, "#memory-chart circle.memory-point")) == 8
    rows = browser.find_elements(By.CSS_SELECTOR, "#epochs tr.epoch-row")
    assert len(rows) == 8 and all("MiB" in row.text and "%" in row.text for row in rows)
    assert len(browser.find_elements(By.CSS_SELECTOR, "#checkpoints button.download")) == 3
    wait.until(lambda b: "[rank 0]" in b.find_element(By.ID, "logs").text)
    browser.save_screenshot(str(tmp_path / "job-page.png"))
    if os.environ.get("TRAINJOBS_SCREENSHOT_DIR"):
        shutil.copy(tmp_path / "job-page.png", Path(os.environ["TRAINJOBS_SCREENSHOT_DIR"]) / "dashboard-job.png")


def cancel_from_the_page(browser, wait, url: str, client) -> None:
    # Cancel a running job from its page.
    long_id = client.post("/v1/jobs", json=tiny_wavenet_spec(name="to-cancel", epochs=10_000)).json()["id"]
    wait_until(lambda: client.get(f"/v1/jobs/{long_id}").json()["state"] == "running", 60, what="the job to run")
    browser.get(f"{url}/ui/#/jobs/{long_id}")
    # The header is redrawn as events arrive: find and click in one retried step.
    clicking = WebDriverWait(browser, 30, poll_frequency=0.2, ignored_exceptions=[StaleElementReferenceException])
    clicking.until(lambda b: b.find_element(By.ID, "cancel").click() or True)
    ended = wait_for_terminal(client, long_id, timeout=30)
    assert (ended["state"], ended["stop_reason"]) == ("cancelled", "cancelled")
    wait.until(lambda b: "cancelled" in b.find_element(By.ID, "job-header").text)


VAL_HEIGHTS = "return [...document.querySelectorAll('#loss-chart circle.val-point')].map((p) => p.getAttribute('cy'));"


def test_a_job_s_chart_shows_its_objective_s_figure_and_another_when_picked(
    own_task_installed, stack_on, sqlite_url, browser
):
    stack = stack_on(sqlite_url)
    token = stack.token("alice")
    client = stack.client(token)
    spec = {
        "model": {"name": "regressor", "params": {"dims": 4, "hidden": 8}},
        "data": {"name": "linear-targets", "params": {"num_samples": 256, "dims": 4}},
        "device": "cpu",
        "gpus": 1,
        "epochs": 3,
        "batch_size": 16,
        "optimizer": {"name": "adamw", "lr": 0.01},
        "objective": {"metric": "val_mae", "mode": "min"},
    }
    job_id = client.post("/v1/jobs", json=spec).json()["id"]
    assert wait_for_terminal(client, job_id)["state"] == "succeeded"
    wait = WebDriverWait(browser, 60, poll_frequency=0.2)
    browser.get(stack.url + "/")
    wait.until(lambda b: b.find_element(By.ID, "token")).send_keys(token)
    browser.find_element(By.ID, "sign-in-button").click()
    wait.until(lambda b: b.find_element(By.CSS_SELECTOR, f'tr[data-job="{job_id}"]')).click()

    wait.until(lambda b: train_points(b) == 3)
    choice = Select(browser.find_element(By.ID, "figure-choice"))
    assert [option.text for option in choice.options] == ["loss", "mae"]
    assert choice.first_selected_option.text == "mae"  # the objective's, by default
    assert browser.find_element(By.ID, "legend-val").text == "validation mae"
    mae_heights = browser.execute_script(VAL_HEIGHTS)
    choice.select_by_visible_text("loss")
    wait.until(lambda b: b.find_element(By.ID, "legend-val").text == "validation loss")
    loss_heights = browser.execute_script(VAL_HEIGHTS)
    assert len(loss_heights) == 3 and loss_heights != mae_heights  # the chart drew the other figure
