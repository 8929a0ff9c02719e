"""The SIMULATED demo study: its deterministic data (`demo_data`) and `manage.py demo_seed`.

This app owns no table. It sits at the top of the app order because seeding the demo walks the
whole product (study file, outputs, simulated verdicts and labels, a sampling plan, an
agreement and a selection report), so it may import every app and none imports it.
"""
