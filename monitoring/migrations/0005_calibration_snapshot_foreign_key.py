"""A deployment's calibration snapshot becomes a foreign key on the same column
(`calibration_snapshot_id`, SET_NULL when the snapshot is deleted).

The column first loses the non-negative check of a positive integer (a key needs none), the
state then swaps the integer for an unconstrained key over the same column, and a real
AlterField adds the constraint and the key's index (0004 cleared the references it would
reject)."""

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ("monitoring", "0004_null_orphan_snapshots"),
        ("snapshots", "0001_initial"),
    ]

    operations = [
        migrations.AlterField(
            model_name="deployment",
            name="calibration_snapshot_id",
            field=models.BigIntegerField(blank=True, null=True),
        ),
        migrations.SeparateDatabaseAndState(
            database_operations=[],
            state_operations=[
                migrations.RemoveField(model_name="deployment", name="calibration_snapshot_id"),
                migrations.AddField(
                    model_name="deployment",
                    name="calibration_snapshot",
                    field=models.ForeignKey(
                        blank=True, null=True, db_column="calibration_snapshot_id",
                        db_constraint=False, db_index=False,
                        on_delete=django.db.models.deletion.SET_NULL, related_name="+",
                        to="snapshots.reportsnapshot"),
                ),
            ],
        ),
        migrations.AlterField(
            model_name="deployment",
            name="calibration_snapshot",
            field=models.ForeignKey(
                blank=True, null=True, db_column="calibration_snapshot_id",
                on_delete=django.db.models.deletion.SET_NULL, related_name="+",
                to="snapshots.reportsnapshot"),
        ),
    ]
