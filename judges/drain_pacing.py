"""When a drain claims: the clocks that judge-run drains (`executor.py`) and candidate-run
drains (`generation/executor.py`) pace their claims by.

A drain keeps up to `target` jobs claimed ahead of the calls in flight and claims again once
`refill` of them are done, unless a claim that found nothing asked for a pause
(`retry_claim_at`); it stops claiming when its time slice ends and is finished once nothing is
in flight. Lapsed leases (a lost worker's jobs) are taken back by a claim at most every
`LAPSED_CHECK_S`: leases last minutes, and the look is a scan of the run's running jobs.
"""

from __future__ import annotations

import time
from typing import Generic, Protocol, TypeVar

LAPSED_CHECK_S = 5.0


class DrainState(Protocol):
    state: str


Report = TypeVar("Report", bound=DrainState)


class DrainPacing(Generic[Report]):
    """The claim clocks of one drain; a drain subclasses it and supplies `claim`."""

    report: Report

    def __init__(self, *, target: int, refill: int, slice_s: float, lease_s: float) -> None:
        self.target, self.refill, self.lease_s = target, refill, lease_s
        now = time.monotonic()
        self.deadline = now + slice_s
        self.next_renew = now + lease_s / 3
        self.next_lapsed = 0.0
        self.pending_since = 0.0
        self.outstanding = 0
        self.claim_open = True
        self.retry_claim_at = 0.0

    def claim(self, now_m: float) -> None:
        """Lease more jobs (up to `target - outstanding`) and start their calls."""
        raise NotImplementedError

    def claim_turn(self, now_m: float) -> bool:
        """Close the claims once the time slice is over, claim if there is room for a refill;
        True once the drain is finishing (no more claims, nothing in flight)."""
        if self.claim_open and now_m >= self.deadline:
            self.claim_open = False
            self.report.state = "sliced"
        if (self.claim_open and self.target - self.outstanding >= self.refill
                and now_m >= self.retry_claim_at):
            self.claim(now_m)
        return not self.claim_open and self.outstanding == 0

    def lapsed_due(self, now_m: float) -> bool:
        """Whether this claim takes back lapsed leases too (then the next one in a while)."""
        if now_m < self.next_lapsed:
            return False
        self.next_lapsed = now_m + LAPSED_CHECK_S
        return True
