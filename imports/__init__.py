"""Importers of existing ratings and public data sets, and the demo seeding.

This app owns no table: every write goes through a service of the app that owns the table
(studies, judges, annotations), so each validation rule lives once.
"""
