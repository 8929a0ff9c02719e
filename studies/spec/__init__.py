"""Validation of study specs: rubric criteria, strata dimensions, analysis plans and the
`import_study` file. REST and CLI share these functions, so both give the same messages.

Every problem is reported with the JSON path of the offending value (``criteria[2].points``,
``spec.deployment_mix.language``) and raised together as one `ValidationFailed` whose details
are ``{"errors": [{"path", "message"}, ...], "error_count": n}`` (the one collector,
`reviewhub.errors.Problems`, re-exported here). The validators return normalised copies (with
defaults filled in) that the services store as they are.
"""

from __future__ import annotations

# One module per section of the study file: common (slugs, numbers, the path joiner), rubric
# (criteria and the rubric rule), dimensions (strata), plan (the analysis plan and its
# sections), study (the study fields and the whole file).
from reviewhub.errors import Problems
from studies.spec.common import (
    DIMENSION_KINDS,
    MAX_ERRORS,
    MIX_TOLERANCE,
    SCALES,
    SLUG_RE,
    join,
)
from studies.spec.dimensions import (
    dimensions_validate,
)
from studies.spec.plan import (
    DEFAULT_PLAN_COSTS,
    DEFAULT_PLAN_POLICY,
    GATE_KEYS,
    GATES_MIN,
    PLAN_METRICS,
    PLAN_SCHEMA,
    POLICY_KINDS,
    POLICY_SCORES,
    PRIMARY_METRICS,
    SEVERITY_LEVELS,
    PlanContext,
    plan_costs,
    plan_policy,
    plan_policy_section_problems,
    plan_selection,
    plan_spec_validate,
    plan_strata_defaults,
)
from studies.spec.rubric import (
    RUBRIC_RULE_KINDS,
    CriterionShape,
    criteria_validate,
    rubric_aggregate_validate,
)
from studies.spec.study import (
    ROLES,
    STUDY_FIELDS,
    STUDY_FILE_SECTIONS,
    StudyFile,
    study_fields_validate,
    study_file_validate,
)

_Shape = CriterionShape  # the name tests have long used

__all__ = [
    "DEFAULT_PLAN_COSTS",
    "DEFAULT_PLAN_POLICY",
    "DIMENSION_KINDS",
    "GATES_MIN",
    "GATE_KEYS",
    "MAX_ERRORS",
    "MIX_TOLERANCE",
    "PLAN_METRICS",
    "PLAN_SCHEMA",
    "POLICY_KINDS",
    "POLICY_SCORES",
    "PRIMARY_METRICS",
    "ROLES",
    "RUBRIC_RULE_KINDS",
    "SCALES",
    "SEVERITY_LEVELS",
    "SLUG_RE",
    "STUDY_FIELDS",
    "STUDY_FILE_SECTIONS",
    "CriterionShape",
    "PlanContext",
    "Problems",
    "StudyFile",
    "criteria_validate",
    "dimensions_validate",
    "join",
    "plan_costs",
    "plan_policy",
    "plan_policy_section_problems",
    "plan_selection",
    "plan_spec_validate",
    "plan_strata_defaults",
    "rubric_aggregate_validate",
    "study_fields_validate",
    "study_file_validate",
]
