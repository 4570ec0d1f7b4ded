"""The status page in a real browser (Debian's Chromium, headless, through Selenium) against the
service in its own process: it loads with nothing from the network, shows the running revision
and the pending proposal, shows the include file's diff and asks for the operator's name before an
approve, refuses an action without the right token, and an approve with the token changes the
running revision in the store and records who approved and the diff shown."""

from __future__ import annotations

import os
import re
import time

import pytest

from autosched.live.store import RevisionStore
from service_kit import TOKEN, live_values, seed, serve_process

pytestmark = pytest.mark.browser  # fixture `browser`: tests/testbed.py


@pytest.fixture
def served(tmp_path):
    state = tmp_path / "state"
    store = seed(state)
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN)
    os.chmod(token_file, 0o600)
    with serve_process(state, "--token-file", str(token_file)) as (url, _):
        yield url, store


def wait_for(browser, css: str, pattern: str, timeout: float = 30):
    from selenium.common.exceptions import StaleElementReferenceException, WebDriverException
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    # the page reloads itself after an action: an element found before may be gone, which
    # Chromium may also report as "Node with given id does not belong to the document" (a plain
    # WebDriverException; seen once in CI). The wait still fails when the text never comes.
    return WebDriverWait(browser, timeout,
                         ignored_exceptions=[StaleElementReferenceException, WebDriverException]).until(
        lambda d: (els := d.find_elements(By.CSS_SELECTOR, css))
        and re.search(pattern, els[0].text) and els[0])


def test_page_loads_offline_and_shows_running_and_pending(browser, served):
    from selenium.webdriver.common.by import By

    url, _ = served
    browser.get(url + "/")
    assert browser.title == "autosched agent"
    assert re.match(r"revision 1 \(baseline\), applied \d{4}-\d\d-\d\d ",
                    browser.find_element(By.ID, "running-rev").text)
    assert browser.find_element(By.ID, "mode").text == "propose"
    pending = browser.find_element(By.ID, "pending")
    assert "Pending proposal: revision 2" in pending.text
    assert browser.find_element(By.ID, "predicted-gain").text == "+8.0% ± 2.0%"
    assert "PriorityWeightAge 1000 (1000) 5000 (5000)" in pending.text
    running = browser.find_element(By.ID, "running").text
    assert "PriorityMaxAge 604800.0 (7-0) 7-0 1" in running  # simulator units, Slurm's, as read
    assert browser.find_element(By.ID, "rev-2").get_attribute("class") == "state-proposed"
    # nothing came from elsewhere: every resource the page loaded is the page itself
    urls = browser.execute_script(
        "return performance.getEntriesByType('resource').map(e => e.name)")
    assert all(u.startswith(url) for u in urls), urls
    assert browser.execute_script("return document.querySelectorAll('[src]').length") == 0


def test_approve_needs_the_token_then_changes_the_running_revision(browser, served):
    from selenium.webdriver.common.by import By

    url, store = served
    browser.get(url + "/")
    browser.execute_script("sessionStorage.clear()")
    browser.get(url + "/")
    # the first click shows the include file's diff (a read: no token needed on localhost)
    browser.find_element(By.ID, "approve").click()
    wait_for(browser, "#include-diff", r"\+PriorityWeightAge=5000")
    # no name: nothing is sent
    browser.find_element(By.ID, "confirm-approve").click()
    wait_for(browser, "#message", "enter your name")
    browser.find_element(By.ID, "operator-name").send_keys("alice")
    # no token: the page asks for it; cancelling sends nothing
    browser.find_element(By.ID, "confirm-approve").click()
    alert = browser.switch_to.alert
    assert "token" in alert.text
    alert.dismiss()
    wait_for(browser, "#message", "an action needs the token")
    # a wrong token: the service's 401 is shown, nothing changes
    browser.find_element(By.ID, "token").send_keys("not-the-token-0123456789")
    browser.find_element(By.ID, "confirm-approve").click()
    wait_for(browser, "#message", r"^401: a valid bearer token is required")
    assert store.running().id == 1 and store.pending().id == 2
    # the token: the proposal goes live, the page reloads showing it
    tok = browser.find_element(By.ID, "token")
    tok.clear()
    tok.send_keys(TOKEN)
    browser.find_element(By.ID, "confirm-approve").click()
    wait_for(browser, "#running-rev", r"^revision 2 \(period\)")
    assert store.running().id == 2 and store.pending() is None
    assert store.get(2).events[-1].actor == "operator:alice"
    assert live_values(store.state_dir)["PriorityWeightAge"] == "5000"  # the cluster runs it
    assert "none" in browser.find_element(By.ID, "pending").text
    # the token is kept for the tab: freezing needs no prompt now
    browser.find_element(By.ID, "freeze-reason").send_keys("holiday")
    browser.find_element(By.ID, "freeze").click()
    banner = wait_for(browser, "#frozen", "holiday")
    assert banner.text.startswith("Frozen by service:token: holiday.")
    assert store.flags().frozen
    # unfreeze, and roll back to the baseline from the history table
    browser.find_element(By.ID, "unfreeze").click()
    wait_for(browser, "#freeze", "Freeze")  # the reloaded, unfrozen page
    assert not store.flags().frozen
    browser.find_element(By.ID, "rollback-1").click()
    wait_for(browser, "#running-rev", r"^revision 3 \(rollback to 1\)")
    assert RevisionStore(store.state_dir).running().config == store.get(1).config
    assert live_values(store.state_dir)["PriorityWeightAge"] == "1000"


def test_page_follows_changes_made_elsewhere(browser, served):
    """Someone freezes the agent from the shell: the open page shows it by itself."""
    from selenium.webdriver.common.by import By

    url, store = served
    browser.get(url + "/")
    assert not browser.find_elements(By.ID, "frozen")
    store.freeze("operator:carol", "from the shell")  # as `autosched agent freeze` writes it
    banner = wait_for(browser, "#frozen", "from the shell", timeout=60)  # polls every 10 s
    assert banner.text.startswith("Frozen by operator:carol: from the shell.")


def test_approve_shows_the_include_diff_as_written_and_records_who(browser, served):
    """Who approved: the page shows the include file's diff exactly as the apply writes it and
    asks for a name before the final click; the store records both with the revision."""
    from selenium.webdriver.common.by import By

    from autosched.live.fake import FakeConnector

    url, store = served
    include = FakeConnector(store.state_dir.parent / "fake").include
    assert not include.exists()  # the fake cluster has not been written to yet
    browser.get(url + "/")
    browser.find_element(By.ID, "token").send_keys(TOKEN)
    assert not browser.find_element(By.ID, "confirm").is_displayed()
    browser.find_element(By.ID, "approve").click()
    wait_for(browser, "#include-diff", r"\+PriorityWeightAge=5000")
    shown = browser.execute_script("return document.getElementById('include-diff').textContent")
    assert browser.find_element(By.ID, "include-path").text == str(include)
    # Cancel sends nothing; Approve shows it again
    browser.find_element(By.ID, "cancel-approve").click()
    assert not browser.find_element(By.ID, "confirm").is_displayed()
    assert store.pending().id == 2
    browser.find_element(By.ID, "approve").click()
    wait_for(browser, "#include-diff", r"\+PriorityWeightAge=5000")
    browser.find_element(By.ID, "operator-name").send_keys("bob.smith")
    browser.find_element(By.ID, "confirm-approve").click()
    wait_for(browser, "#running-rev", r"^revision 2 \(period\)")
    rev = store.get(2)
    assert rev.approval is not None
    assert (rev.approval.actor, rev.approval.confirmed) == ("operator:bob.smith", True)
    assert rev.approval.include_diff == shown  # recorded as shown ...
    written = include.read_text()  # ... and it is what was written: every line added to no file
    assert shown.splitlines()[:3] == [f"--- {include} (now)", f"+++ {include} (revision 2)",
                                      f"@@ -0,0 +1,{len(written.splitlines())} @@"]
    assert [line[1:] for line in shown.splitlines()[3:]] == written.splitlines()
    assert "PriorityWeightAge=5000" in written.splitlines()


def test_the_page_never_offers_an_apply_in_flight_and_shows_slurms_own_values(browser, tmp_path):
    from selenium.webdriver.common.by import By

    from autosched.live.agent import open_agent
    from autosched.live.fake import FakeConnector

    state = tmp_path / "state"
    store = seed(state)
    FakeConnector(tmp_path / "fake").hand_edit("PriorityWeightAge", "777")
    open_agent(state).view.live_values()  # what a round or an action reads (and records)
    store.begin_apply(2, actor="test", previous={"include": None})  # an apply that never ended
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN)
    os.chmod(token_file, 0o600)
    with serve_process(state, "--token-file", str(token_file)) as (url, _):
        browser.get(url + "/")
        pending = browser.find_element(By.ID, "pending")
        assert "Revision 2: being applied or interrupted" in pending.text
        assert browser.find_elements(By.ID, "approve") == []
        row = [r for r in browser.find_elements(By.CSS_SELECTOR, "#running tr")
               if r.text.startswith("PriorityWeightAge ")][0]
        assert row.text == "PriorityWeightAge 1000 (1000) 777 1"
        assert row.find_element(By.CSS_SELECTOR, ".in-slurm .differs").text == "777"
        read = store.last_reading().time
        assert f"read {time.strftime('%Y-%m-%d %H:%M:%SZ', time.gmtime(read))}" in \
            browser.find_element(By.ID, "slurm-read-at").text
        # the Revisions table says so too (it said "proposed")
        assert browser.find_element(By.CSS_SELECTOR, "#rev-2 td:nth-child(3)").text == \
            "being applied or interrupted"


@pytest.fixture
def one_replay(tmp_path):
    """The seeded agent with its proposal rejected and a new one as a single-replay round makes
    it (one workload: spread 0.0), with the tuner's cost; served in its own process."""
    from autosched.live.records import Evidence, RevisionState

    state = tmp_path / "state"
    store = seed(state)
    store.transition(2, RevisionState.REJECTED, actor="operator:x")
    base = store.get(1).config
    store.create({**base, "PriorityWeightAge": 65000, "PriorityWeightFairshare": 0,
                  "PriorityMaxAge": 1209600.0}, trigger="drift: arrival rate x5.73 (rate-ratio "
                 "test p=4.5e-16)", actor="agent:propose", parent=1,
                 evidence=Evidence(predicted_gain=0.1266, spread=0.0, samples=1,
                                   metric="avg_jct",
                                   tuning_cost={"trials": 30, "simulations": 90,
                                                "trial_seconds": 11.0, "wall_seconds": 12.43,
                                                "seconds": 12.43}))
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN)
    os.chmod(token_file, 0o600)
    with serve_process(state, "--token-file", str(token_file)) as (url, _):
        yield url


def test_a_single_replay_has_no_spread_and_the_cost_is_words(browser, one_replay):
    """The page showed "± 0.0%" for a gain measured on one workload, and the tuning cost as a
    raw JSON object."""
    from selenium.webdriver.common.by import By

    browser.get(one_replay + "/")
    assert browser.find_element(By.ID, "predicted-gain").text == \
        "+12.7% (one workload: no spread measured)"
    assert browser.find_element(By.ID, "tuning-cost").text == "30 trials, 90 simulations, 12.4 s"
    assert "{" not in browser.find_element(By.ID, "pending").text


def test_the_page_fits_a_390_px_phone(browser, one_replay):
    """At 390 x 844 the page was 949 px wide and the proposed values were cut off."""
    from selenium.webdriver.common.by import By

    browser.execute_cdp_cmd("Emulation.setDeviceMetricsOverride", {
        "width": 390, "height": 844, "deviceScaleFactor": 3, "mobile": True})
    try:
        browser.get(one_replay + "/")
        width = browser.execute_script("return document.documentElement.scrollWidth")
        assert width <= 390, width
        cells = browser.find_elements(By.CSS_SELECTOR, "#pending td.proposed")
        assert len(cells) == 3
        for cell in cells:  # each proposed value is on screen, with its label
            box = browser.execute_script("const r = arguments[0].getBoundingClientRect(); "
                                         "return [r.left, r.right]", cell)
            assert 0 <= box[0] and box[1] <= 390, (cell.text, box)
            assert cell.is_displayed()
        assert "PriorityWeightAge" in browser.find_element(By.ID, "pending").text
        # the approve's name check answers beside the button, not at the top of the page
        browser.execute_script("arguments[0].hidden = false",
                               browser.find_element(By.ID, "confirm"))
        browser.find_element(By.ID, "confirm-approve").click()
        said = browser.find_element(By.ID, "confirm-message")
        assert said.text.startswith("enter your name") and said.is_displayed()
    finally:
        browser.execute_cdp_cmd("Emulation.clearDeviceMetricsOverride", {})


def test_the_page_asks_for_no_favicon(browser, served):
    """Chromium logged the 404 of /favicon.ico as a console error."""
    from selenium.webdriver.common.by import By

    url, _ = served
    browser.get(url + "/")
    icon = browser.find_element(By.CSS_SELECTOR, "link[rel=icon]")
    assert icon.get_attribute("href") == "data:,"
