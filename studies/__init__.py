"""The selection question and its data: studies, members and API tokens, study access
(`studies.access`, the one check every study-scoped view calls), rubrics and criteria, strata
schemes, items, candidates, outputs and comparisons, analysis plans (deployment mix, gates,
costs), the study file, and bulk ingest (`studies.ingest`). Every app above builds on these
tables; this app imports none of theirs."""
