"""A calibrated score's snapshot becomes a foreign key on the same column (`snapshot_id`).

The state swaps the plain integer for an unconstrained foreign key over the same column (no
change to the table), then a real AlterField adds the constraint (0004 removed the rows it
would reject). The indexes keep their names and columns; the key gets no index of its own."""

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ("calibration", "0004_drop_orphan_scores"),
        ("snapshots", "0001_initial"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            database_operations=[],
            state_operations=[
                migrations.RemoveField(model_name="calibratedscore", name="snapshot_id"),
                migrations.AddField(
                    model_name="calibratedscore",
                    name="snapshot",
                    field=models.ForeignKey(
                        db_column="snapshot_id", db_constraint=False, db_index=False,
                        on_delete=django.db.models.deletion.CASCADE, related_name="+",
                        to="snapshots.reportsnapshot"),
                    preserve_default=False,
                ),
            ],
        ),
        migrations.AlterField(
            model_name="calibratedscore",
            name="snapshot",
            field=models.ForeignKey(
                db_column="snapshot_id", db_index=False,
                on_delete=django.db.models.deletion.CASCADE, related_name="+",
                to="snapshots.reportsnapshot"),
        ),
    ]
