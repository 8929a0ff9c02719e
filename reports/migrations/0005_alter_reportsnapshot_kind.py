"""Report snapshots gain the selection kind."""

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ("reports", "0004_alter_reportsnapshot_kind"),
    ]

    operations = [
        migrations.AlterField(
            model_name="reportsnapshot",
            name="kind",
            field=models.CharField(
                choices=[
                    ("agreement", "Agreement"),
                    ("calibration", "Calibration"),
                    ("selection", "Selection"),
                ],
                default="agreement",
                max_length=16,
            ),
        ),
    ]
