"""The selection report: which candidate to ship, per stratum and for the deployment mix
(docs/reports.md, "Selection report").

params (pure: validation), load (the one lean read of a study), compute (the statistics and
the decision, no database), results (the typed JSON and its schema), actions (the sampling
plan of the next labels). The kind registers in reports/kinds.py.
"""
