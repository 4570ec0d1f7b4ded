"""Make docs/img/status-page.png: the status page of a demo agent, in headless Chromium.

    PYTHONPATH=src .venv/bin/python scripts/status_page_screenshot.py [OUT.png]

The demo agent runs on the fake connector (autosched.live.fake) in a temporary directory; its
history is made through the agent's own actions (approve, rollback by the guard, reject) with
evidence and outcomes written as a round and its judge write them. The page is served by
`autosched agent serve` in its own process (stopped by its pid) and shot with the Chromium the
browser tests use (tests/chromium_kit.py; it needs selenium, from the `test` extra).
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "tests"))

from autosched.service.serve import serve_in_process  # noqa: E402
from chromium_kit import start_chromium  # noqa: E402


def demo_state(tmp: Path) -> Path:
    from autosched.live.agent import AgentSettings, init_agent
    from autosched.live.fake import FakeConnector
    from autosched.live.records import Evidence, JudgedOutcome

    FakeConnector.create(tmp / "fake")
    state = tmp / "state"
    agent = init_agent(state, AgentSettings(connector={"kind": "fake",
                                                       "directory": str(tmp / "fake")}))
    s = agent.store
    base = agent.view.running_or_baseline().config

    def propose(changes, gain, spread, why):
        run = s.running()
        return s.create({**run.config, **changes}, trigger="period", actor="agent:propose",
                        parent=run.id, note=why,
                        evidence=Evidence(predicted_gain=gain, spread=spread, samples=3,
                                          tuning_cost={"trials": 20}, metric="avg_jct", reason=why))

    def judged(rev, observed, verdict):
        s.record_outcome(rev.id, JudgedOutcome("avg_jct", {}, {}, rev.evidence.predicted_gain, verdict,
                                               observed))

    r = propose({"PriorityWeightAge": 4000}, 0.061, 0.018, "gain 6.1% > 2 x s.e.")
    agent.approve(r.id, "operator:alice")
    judged(r, 0.048, "kept: avg_jct 5210.0 -> 4960.0 (+4.8%)")
    r = propose({"PriorityWeightJobSize": 3000, "PriorityFavorSmall": True}, 0.034, 0.012,
                "gain 3.4% > 2 x s.e.")
    agent.approve(r.id, "operator:bob")
    judged(r, 0.041, "kept: avg_jct 4960.0 -> 4757.0 (+4.1%)")
    r = propose({"PriorityMaxAge": 1209600.0}, 0.025, 0.011, "gain 2.5% > 2 x s.e.")
    agent.approve(r.id, "operator:alice")
    judged(r, -0.052, "worse: avg_jct 4757.0 -> 5004.0 (-5.2%, margin 2.0%); rolled back")
    agent.rollback(r.parent, "agent:guard", note="worse by 5.2% (margin 2.0%)")
    r = propose({"PriorityWeightFairshare": 2000}, 0.022, 0.015, "gain 2.2% > 2 x s.e.")
    agent.reject(r.id, "operator:bob", "fair share matters more this month")
    propose({"PriorityWeightAge": 6000, "PriorityDecayHalfLife": 259200.0}, 0.057, 0.016,
            "gain 5.7% > 2 x s.e.")
    s.record_round({"action": "proposed", "revision": s.pending().id,
                    "why": "gain 5.7% > 2 x s.e."})
    assert base is not None
    return state


def main() -> None:
    out = Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "docs" / "img" / "status-page.png"
    with tempfile.TemporaryDirectory(prefix="autosched-shot-") as tmp:
        state = demo_state(Path(tmp))
        with serve_in_process(state, src=str(ROOT / "src")) as (url, _):
            driver = start_chromium(Path(tmp) / "profile", "--window-size=1200,900", "--hide-scrollbars")
            try:
                driver.get(url + "/")
                height = driver.execute_script("return document.documentElement.scrollHeight")
                driver.set_window_size(1200, height + 40)
                time.sleep(0.5)  # let the resized page lay out before the shot
                out.parent.mkdir(parents=True, exist_ok=True)
                driver.save_screenshot(str(out))
            finally:
                driver.quit()
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
