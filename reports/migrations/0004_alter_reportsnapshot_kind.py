"""Report snapshots gain the calibration kind."""

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ("reports", "0003_report_snapshot_kind"),
    ]

    operations = [
        migrations.AlterField(
            model_name="reportsnapshot",
            name="kind",
            field=models.CharField(
                choices=[("agreement", "Agreement"), ("calibration", "Calibration")],
                default="agreement",
                max_length=16,
            ),
        ),
    ]
