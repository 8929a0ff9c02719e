"""A calibrated score's one-subject check takes the name every subject model's check has
(`<model>_one_subject`, from `studies.models.OutputOrComparison`); the condition is unchanged."""

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ("calibration", "0005_snapshot_foreign_key"),
    ]

    operations = [
        migrations.RemoveConstraint(model_name="calibratedscore", name="calscore_one_subject"),
        migrations.AddConstraint(
            model_name="calibratedscore",
            constraint=models.CheckConstraint(
                condition=models.Q(output__isnull=False, comparison__isnull=True)
                | models.Q(output__isnull=True, comparison__isnull=False),
                name="calibratedscore_one_subject",
            ),
        ),
    ]
