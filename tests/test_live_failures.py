"""What a round makes of a failure, by the error's type (live/failures.py), on the fake cluster:
Slurm falling silent at any read of the first round, an error of Slurm's the runner does not
recognise, and the guard's rollback meeting a silent slurmctld. The same three run against a
real slurmctld in test_live_slurm.py."""

from __future__ import annotations

import pytest

from autosched.errors import InputError
from autosched.live.errors import (
    ActionNotAllowed,
    ApplyFailed,
    ApplyUnreachable,
    Frozen,
    LiveError,
    RestorePending,
    SlurmUnavailable,
    apply_failed,
)
from autosched.live.failures import Part, caught, failure
from autosched.live.fake import FakeConnector
from autosched.live.records import RevisionKind, RevisionState
from autosched.live.round import Action
from live_helpers import SMALL_FIRST, FakeTime, apply_change, make, period_rows


class SilentAfter(FakeConnector):
    """A fake cluster that answers `answers` more calls, then none (as a slurmctld that stops
    between two reads): set `answers` to start counting."""

    answers: int | None = None

    def _log(self, call):
        if self.answers is not None:
            if self.answers == 0:
                self.update(down=True)
            self.answers -= 1
        return super()._log(call)


# The first round of a propose-mode agent asks the fake, in order: `scontrol show config` (the
# live values), `scontrol show config` again (the baseline it records), the setup, sacct, sdiag
# (what backfill costs); then it tunes without asking anything more. Silent after 0 to 4 of them,
# the round is blocked.
FIRST_ROUND_CALLS = 5


@pytest.mark.parametrize("answers", range(FIRST_ROUND_CALLS))
def test_slurm_silent_between_two_reads_of_the_first_round_blocks_it_with_a_retry(tmp_path, answers):
    agent, fake = make(tmp_path, connector=SilentAfter)
    fake.answers = answers
    out = agent.step()
    assert out.action is Action.BLOCKED and out.why.startswith("Slurm does not answer: `"), out
    assert "fake cluster is down" in out.why
    assert out.retry_after == 30.0 and out.exit_code == 4
    assert agent.store.last_round().action == "blocked"
    assert agent.status().blocked == out.why
    fake.answers = None
    fake.update(down=False)
    assert agent.step().action is Action.PROPOSED
    assert agent.store.get(1).kind is RevisionKind.BASELINE and not agent.status().blocked


def test_the_first_round_with_every_read_answered_proposes(tmp_path):
    """The other end of the test above: FIRST_ROUND_CALLS answers are all the round needs."""
    agent, fake = make(tmp_path, connector=SilentAfter)
    fake.answers = FIRST_ROUND_CALLS
    assert agent.step().action is Action.PROPOSED


class Misconfigured(FakeConnector):
    """A cluster whose `scontrol show config` fails in words the runner does not know (not one
    that says Slurm is down)."""

    def live_values(self):
        self._log("scontrol show config")
        raise LiveError("`scontrol show config` failed (exit 1): scontrol: error: something new")


def test_an_unrecognised_slurm_error_blocks_the_round_and_the_loop_goes_on(tmp_path):
    agent, fake = make(tmp_path, connector=Misconfigured, drift=False)
    ft = FakeTime()
    out = agent.run(rounds=3, poll=1000, sleep=ft.sleep, clock=ft.clock)
    assert [o.action for o in out] == [Action.BLOCKED] * 3
    assert out[0].why == ("cannot read the live settings: `scontrol show config` failed (exit 1): "
                          "scontrol: error: something new")
    # not a failure time ends: the next round comes a period on, and the exit code says so
    assert [o.retry_after for o in out] == [None] * 3 and out[0].exit_code == 5
    assert ft.sleeps == [600.0, 600.0]
    assert agent.status().blocked == out[0].why and agent.store.running() is None


class SilentReconfigure(FakeConnector):
    """A slurmctld that does not answer the next `scontrol reconfigure` of an apply (one timeout;
    the restore after it gets through), once `silent` is set."""

    silent = False

    def _reconfigure(self, restoring=False):
        if self.silent and not restoring:
            self.silent = False
            raise SlurmUnavailable("`scontrol reconfigure` did not answer within 5 s (is slurmctld "
                                   "running?)")
        super()._reconfigure(restoring)


def test_a_guard_rollback_that_meets_a_silent_slurmctld_is_tried_again_soon(tmp_path):
    """The change did worse in the counterfactual (the judge's figures as in
    test_live_agent.py): the guard's rollback meets a reconfigure that times out, the apply is
    undone, and the next round comes after the first back-off (30 s), not a period on."""
    agent, fake = make(tmp_path, connector=SilentReconfigure, drift=False)
    apply_change(agent, SMALL_FIRST)
    at = apply_change(agent, agent.store.get(1).config)
    fake.update(sacct=period_rows(int(at), small_first=False), clock=at + 700)
    fake.silent = True
    ft = FakeTime()
    out = agent.run(rounds=2, poll=1000, sleep=ft.sleep, clock=ft.clock)
    assert [o.action for o in out] == [Action.ROLLBACK_FAILED, Action.ROLLED_BACK]
    assert "did not answer within 5 s" in out[0].why and "previous" in out[0].why
    assert out[0].retry_after == 30.0 and ft.sleeps == [30.0]
    failed, back = agent.store.get(4), agent.store.running()
    assert failed.kind is RevisionKind.ROLLBACK and failed.state is RevisionState.FAILED
    assert back.id == 5 and back.trigger == "rollback to 2" and agent.store.get(3).state is RevisionState.ROLLED_BACK


def test_an_auto_mode_apply_that_meets_a_silent_slurmctld_is_tried_again_soon(tmp_path):
    agent, fake = make(tmp_path, connector=SilentReconfigure, mode="auto", max_step=0.5)
    fake.silent = True
    out = agent.step()
    assert out.action is Action.APPLY_FAILED and out.retry_after == 30.0, out
    assert agent.store.get(out.revision).state is RevisionState.FAILED


def test_an_error_that_wraps_a_temporary_one_stays_temporary():
    down = SlurmUnavailable("`scontrol reconfigure` could not reach Slurm")
    odd = LiveError("`scontrol reconfigure` failed (exit 1): odd")
    assert type(apply_failed("x", down)) is ApplyUnreachable
    # the apply failed in odd words, then its restore met a silent Slurm: worth trying soon
    both = apply_failed("x", odd, down)
    assert isinstance(both, ApplyFailed) and isinstance(both, SlurmUnavailable) and both.temporary
    assert type(apply_failed("x", odd)) is ApplyFailed and not ApplyFailed.temporary
    assert RestorePending.temporary and not ActionNotAllowed.temporary and not LiveError.temporary


def test_the_table_row_by_row():
    """The first row of the part that the error is an instance of; the retry from the class."""
    f = failure(Part.READ, ApplyUnreachable("it timed out"), 30.0, what="read the live settings")
    assert (f.action.value, f.why, f.retry_after) == ("blocked", "Slurm does not answer: it timed out", 30.0)
    f = failure(Part.READ, RestorePending("an apply of revision 3 ..."), 60.0, what="finish it")
    assert (f.why, f.retry_after) == ("an apply of revision 3 ...", 60.0)
    f = failure(Part.READ, ActionNotAllowed("adopt the live config"), 30.0, what="read")
    assert (f.why, f.retry_after) == ("adopt the live config", None)
    f = failure(Part.READ, LiveError("bad row"), 30.0, what="read the history")
    assert (f.why, f.retry_after) == ("cannot read the history: bad row", None)
    f = failure(Part.TUNE, InputError("no workload"), 30.0)
    assert (f.action.value, f.why, f.retry_after) == ("tuning failed", "tuning failed: no workload", None)
    f = failure(Part.APPLY, ActionNotAllowed("revision 4 is running"), 30.0, revision=5)
    assert (f.action.value, f.why) == ("wait", "revision 5 not applied: revision 4 is running")
    assert failure(Part.APPLY, ApplyUnreachable("gone"), 30.0).outcome(5).retry_after == 30.0
    f = failure(Part.ROLLBACK, ApplyFailed("held 1000 (wanted 5)"), 30.0)
    assert (f.action.value, f.retry_after) == ("rollback failed", None)
    assert caught(Part.ROLLBACK) == (Frozen, LiveError)
    # a freeze stored while the round ran: its apply's own transaction refused it
    f = failure(Part.APPLY, Frozen("the agent is frozen by operator:carol"), 30.0, revision=5)
    assert (f.action.value, f.why, f.retry_after) == (
        "frozen", "revision 5 not applied: the agent is frozen by operator:carol", None)
    with pytest.raises(InputError, match="not live"):  # no row of the part: raised again
        failure(Part.READ, InputError("not live"), 30.0)
