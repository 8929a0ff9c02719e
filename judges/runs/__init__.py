"""Judge runs: start, cancel, resume, re-run; claiming and recording jobs; verdicts; sweeping.

Services for writes (house style): keyword-only, typed, each owning its `transaction.atomic`,
no network I/O inside. The executor (`judges/executor.py`) calls `jobs_claim`, makes the calls
with no transaction open, then calls `jobs_record_with_verdicts` (one statement recording a
chunk and the verdicts of its one-job subjects) and `verdicts_build` for the other subjects.

Decisions worth knowing (also in docs/judges.md):

- **Jobs are unique per judge version**, not per run: (judge version, criterion, subject,
  sample index, order). A second run of the same judge version over the same subjects does not
  call the provider again for a job that already finished (done, unparseable, or failed
  permanently) in an earlier run — its verdict already exists. It *adopts* (moves to itself and
  re-queues) the jobs earlier runs left cancelled or failed for a transient reason, and leaves
  jobs still queued or running in another active run to that run. `creation_stats` says how
  many of each. A new judge version (changed prompt/model/parser) always gets fresh jobs.
- **Pairwise subjects are `Comparison` rows.** If the selected items have no comparison at
  all, the run creates one per pair of candidates' outputs on the same item, in canonical
  order (output_a = the output of the candidate with the lower id). If any comparison exists
  for the selected items, the curated set is used as is and nothing is added.
- **Selection** (stored on the run, with the seed for samples):
  `{"kind": "all"}`, `{"kind": "stratum", "dimension": key, "label": label}`,
  `{"kind": "candidate", "candidate": name}`, `{"kind": "sample", "n": N, "seed": S}`.
  For single-output criteria it selects outputs; for pairwise criteria it selects comparisons
  (stratum: of items in the stratum; candidate: comparisons involving the candidate; sample: N
  comparisons drawn with the same seed).
- **Budgets**: `max_calls` counts provider calls (every claim, retries included) and is exact:
  claims happen under the run row lock. `max_cost` is checked before each claim against the
  cost recorded so far plus the average cost of a call for the calls in flight, so a run can
  overshoot by at most the spread of the calls in flight. Hitting either stops the run:
  queued jobs are cancelled, running ones finish, `status=stopped`, `stop_reason` has figures;
  a retry one of those calls asks for is cancelled too (`run_settle`), so a stopped run never
  keeps queued jobs. Calls under a lapsed lease do not count as in flight.
- **Attempts**: each claim is one attempt. Transient errors re-queue the job with a jittered,
  capped exponential backoff that honours Retry-After (a Retry-After above the cap is honoured
  as sent); after `REVIEWHUB_JUDGE_MAX_ATTEMPTS` the job fails with `error_kind="transient"`.
  Resuming a run re-queues such jobs with their attempt count reset.

Modules: `selection` (which subjects a run judges), `lifecycle` (start, cancel, resume, re-run),
`claim` (leasing jobs under the budgets), `record` (storing call outcomes), `verdicts`
(combining calls into verdicts, finishing a run), `sweep` (wake, settle, the periodic sweep) and
`stall` (telling a stalled run from a slow one). This package re-exports their public names.
"""

from .claim import COST_PROBE_CALLS, ClaimedJob, ClaimResult, SubjectTexts, jobs_claim
from .common import ACTIVE_JOB_STATUSES, INACTIVE_RUN_STATUSES, JOB_BULK_BATCH
from .lifecycle import (
    JOB_INSERT_BATCH,
    Enqueue,
    judge_run_cancel,
    judge_run_rerun,
    judge_run_resume,
    judge_run_start,
    run_enqueue_register,
)
from .record import JobOutcome, jobs_record
from .selection import (
    SELECTION_KINDS,
    comparisons_ensure,
    selection_comparisons,
    selection_normalise,
    selection_outputs,
)
from .stall import STALL_GRACE_MIN_S, RunStall, run_stall, run_stall_grace_s
from .sweep import RunWake, SweepResult, judge_sweep, run_settle, run_wake
from .verdicts import (
    JobRow,
    SubjectKey,
    job_row_for_outcome,
    jobs_record_with_verdicts,
    run_finish_if_complete,
    subject_key,
    verdicts_build,
    verdicts_finalize,
)

__all__ = [
    "ACTIVE_JOB_STATUSES",
    "COST_PROBE_CALLS",
    "INACTIVE_RUN_STATUSES",
    "JOB_BULK_BATCH",
    "JOB_INSERT_BATCH",
    "SELECTION_KINDS",
    "STALL_GRACE_MIN_S",
    "ClaimResult",
    "ClaimedJob",
    "Enqueue",
    "JobOutcome",
    "JobRow",
    "RunStall",
    "RunWake",
    "SubjectKey",
    "SubjectTexts",
    "SweepResult",
    "comparisons_ensure",
    "job_row_for_outcome",
    "jobs_claim",
    "jobs_record",
    "jobs_record_with_verdicts",
    "judge_run_cancel",
    "judge_run_rerun",
    "judge_run_resume",
    "judge_run_start",
    "judge_sweep",
    "run_enqueue_register",
    "run_finish_if_complete",
    "run_settle",
    "run_stall",
    "run_stall_grace_s",
    "run_wake",
    "selection_comparisons",
    "selection_normalise",
    "selection_outputs",
    "subject_key",
    "verdicts_build",
    "verdicts_finalize",
]
