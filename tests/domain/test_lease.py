"""The lease decisions: who leads after a try, until when, and what changed."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from keeper.domain.lease import (
    Attempt,
    LeaseRow,
    LeaseState,
    LeaseTimings,
    Standing,
    after_attempt,
    after_failure,
    fenced_out,
    holder_id,
    is_leader,
)

T = LeaseTimings(lease_seconds=10.0, renew_seconds=1.0)
ME = holder_id("a", 1, "x")
OTHER = holder_id("b", 2, "y")


def row(holder: str, epoch: int, expires: float, renewed: float | None = None) -> LeaseRow:
    return LeaseRow(
        holder, holder.split(":")[0], epoch, expires, expires - 10 if renewed is None else renewed
    )


class TestTimings:
    def test_defaults_are_chainlinks(self) -> None:
        assert (LeaseTimings().lease_seconds, LeaseTimings().renew_seconds) == (10.0, 1.0)

    @pytest.mark.parametrize(("lease", "renew"), [(10, 6), (1, 1), (0, 0), (10, -1), (10, 0)])
    def test_renewal_must_fit_twice_in_the_lease(self, lease: float, renew: float) -> None:
        with pytest.raises(ValueError):
            LeaseTimings(lease, renew)

    def test_a_renewal_of_exactly_half_the_lease_is_taken(self) -> None:
        assert LeaseTimings(10, 5).renew_seconds == 5


class TestAfterAttempt:
    def test_first_grant_acquires_without_a_failover(self) -> None:
        out = after_attempt(LeaseState(), Attempt(None, row(ME, 1, 110), 100), ME, 50.0, T)
        assert out.change == "acquired"
        assert out.leaderless_seconds is None
        assert out.state == LeaseState(Standing.LEADER, 1, 60.0, ME)
        assert is_leader(out.state, 59.9) and not is_leader(out.state, 60.0)

    def test_takeover_measures_the_time_without_a_leader(self) -> None:
        before = row(OTHER, 3, expires=104.0, renewed=94.0)
        out = after_attempt(LeaseState(), Attempt(before, row(ME, 4, 115), 105.5), ME, 7.0, T)
        assert out.change == "acquired"
        assert out.leaderless_seconds == pytest.approx(11.5)  # 105.5 - 94.0
        assert out.state.epoch == 4

    def test_renewal_keeps_the_epoch_and_extends_from_the_send_time(self) -> None:
        leading = LeaseState(Standing.LEADER, 4, 17.0, ME)
        out = after_attempt(leading, Attempt(row(ME, 4, 115), row(ME, 4, 116), 106), ME, 8.0, T)
        assert out.change == "renewed"
        assert out.state.valid_until == 18.0

    def test_a_grant_at_a_new_epoch_is_a_new_acquisition(self) -> None:
        """Our own lease expired, someone took it and let it go, we took it back."""
        leading = LeaseState(Standing.LEADER, 4, 17.0, ME)
        out = after_attempt(leading, Attempt(row(OTHER, 5, 100), row(ME, 6, 120), 110), ME, 9, T)
        assert out.change == "acquired"
        assert out.state.epoch == 6

    def test_someone_else_holding_it_means_standby_or_lost(self) -> None:
        held = Attempt(row(OTHER, 5, 120), row(OTHER, 5, 120), 110)
        assert after_attempt(LeaseState(), held, ME, 9, T).change == "standby"
        leading = LeaseState(Standing.LEADER, 4, 17.0, ME)
        out = after_attempt(leading, held, ME, 9, T)
        assert out.change == "lost"
        assert out.state.standing is Standing.STANDBY
        assert out.state.holder_seen == OTHER
        assert out.state.epoch == 5  # the epoch held now, not the one we led at
        assert not is_leader(out.state, -math.inf)

    def test_a_row_of_ours_already_expired_by_the_database_clock_is_not_a_grant(self) -> None:
        out = after_attempt(LeaseState(), Attempt(None, row(ME, 1, 100.0), 100.0), ME, 1, T)
        assert out.state.standing is Standing.STANDBY


class TestFailures:
    def test_a_leader_that_cannot_renew_leads_until_its_grant_ends(self) -> None:
        leading = LeaseState(Standing.LEADER, 2, 20.0, ME)
        assert after_failure(leading, 19.0).state == leading
        out = after_failure(leading, 20.0)
        assert out.change == "expired"
        assert not is_leader(out.state, 20.0)

    def test_a_standby_that_cannot_ask_stays_standby(self) -> None:
        assert after_failure(LeaseState(), 5.0).change == "standby"

    def test_fenced_out_stops_leading_at_once(self) -> None:
        out = fenced_out(LeaseState(Standing.LEADER, 2, 1e9, ME))
        assert out.change == "lost"
        assert not is_leader(out.state, 0.0)


@given(
    st.lists(
        st.tuples(
            st.sampled_from([ME, OTHER, None]),  # who the row names after the try
            st.floats(0.1, 5.0),  # seconds between tries (local = database clock)
            st.booleans(),  # whether the try reached the database
        ),
        max_size=40,
    )
)
def test_never_leads_past_the_grant_and_epochs_never_go_back(
    tries: list[tuple[str | None, float, bool]],
) -> None:
    """Whatever the database answers, a leader's belief ends by its last grant's expiry."""
    state = LeaseState()
    now, epoch, granted_until = 0.0, 1, -math.inf
    holder: str | None = None
    for who, gap, reached in tries:
        now += gap
        if not reached:
            out = after_failure(state, now)
        else:
            if who is not None and who != holder:
                epoch += 1  # the store bumps the epoch on every change of holder
            holder = who
            after = None if who is None else row(who, epoch, now + T.lease_seconds)
            out = after_attempt(state, Attempt(None, after, now), ME, now, T)
            if who == ME:
                granted_until = now + T.lease_seconds
        assert out.state.epoch >= state.epoch or out.state.standing is Standing.LEADER
        state = out.state
        if is_leader(state, now):
            assert holder == ME
            assert state.valid_until <= granted_until
            assert state.epoch == epoch
