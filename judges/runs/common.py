"""Names every judge-run module shares: the logger, batch sizes and job/run status groups."""

from __future__ import annotations

import logging

from ..models import JudgeJob, JudgeRun

# One logger name for every judge-run module, so log routing and filters see one source.
logger = logging.getLogger("judges.runs")

JOB_BULK_BATCH = 1000
ACTIVE_JOB_STATUSES = (JudgeJob.Status.QUEUED, JudgeJob.Status.RUNNING)


INACTIVE_RUN_STATUSES = (JudgeRun.Status.DONE, JudgeRun.Status.CANCELLED,
                         JudgeRun.Status.STOPPED, JudgeRun.Status.FAILED)
