"""Write services for studies, one module per concern: studies and memberships, API tokens,
strata, rubrics, the analysis plan, whole-study imports and generated outputs. Each service owns
its transaction; they nest (as savepoints) inside an outer `transaction.atomic`, which is how
ingest and `import_study` make a whole import atomic. Callers import them from here.
"""

from __future__ import annotations

from ._common import Outcome
from .generated import (
    GENERATED_BY,
    GeneratedOutput,
    outputs_generated_conflicts,
    outputs_record_generated,
)
from .plans import (
    plan_context,
    plan_create,
    plan_lock,
    plan_new_version,
    plan_update,
)
from .rubrics import (
    RubricUseCheck,
    rubric_create,
    rubric_in_use,
    rubric_update,
    rubric_use_register,
)
from .strata import (
    dimension_set,
    study_quantile_edges,
    study_strata_recompute,
)
from .study import (
    membership_remove,
    membership_set,
    study_create,
    study_status_check,
    study_update,
)
from .study_import import (
    ImportReport,
    study_import,
)
from .tokens import (
    api_token_create,
    api_token_revoke,
)

__all__ = [
    "GENERATED_BY",
    "GeneratedOutput",
    "ImportReport",
    "Outcome",
    "RubricUseCheck",
    "api_token_create",
    "api_token_revoke",
    "dimension_set",
    "membership_remove",
    "membership_set",
    "outputs_generated_conflicts",
    "outputs_record_generated",
    "plan_context",
    "plan_create",
    "plan_lock",
    "plan_new_version",
    "plan_update",
    "rubric_create",
    "rubric_in_use",
    "rubric_update",
    "rubric_use_register",
    "study_create",
    "study_import",
    "study_quantile_edges",
    "study_status_check",
    "study_strata_recompute",
    "study_update",
]
