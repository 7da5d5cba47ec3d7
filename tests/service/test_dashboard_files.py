"""The dashboard's words come from the contract: the API writes them into /ui/contract.js."""

from __future__ import annotations

import json
import re

from trainjobs.contract.states import ACTIVE_STATES, JOB_STATES, TERMINAL_STATES
from trainjobs.service.api.dashboard_files import DASHBOARD


def test_the_dashboard_reads_the_job_states_that_the_contract_defines(api):
    answer = api.get("/ui/contract.js")
    assert answer.status_code == 200
    assert answer.headers["content-type"].startswith("text/javascript")
    constants = dict(re.findall(r"const (\w+) = (?:new Set\()?(\[[^\]]*\])", answer.text))
    assert json.loads(constants["JOB_STATES"]) == list(JOB_STATES)
    assert set(json.loads(constants["ACTIVE_STATES"])) == ACTIVE_STATES
    assert set(json.loads(constants["TERMINAL_STATES"])) == TERMINAL_STATES


def test_the_dashboard_s_own_scripts_spell_no_list_of_states():
    # A list of states written into app.js would drift from the contract: it uses the served one.
    quoted = "|".join(JOB_STATES)
    for script in DASHBOARD.glob("*.js"):
        lists = re.findall(rf'\[\s*"(?:{quoted})"\s*,\s*"(?:{quoted})"', script.read_text())
        assert lists == [], f"{script.name} spells states itself: {lists}"
    assert '<script src="contract.js"></script>' in (DASHBOARD / "index.html").read_text()
