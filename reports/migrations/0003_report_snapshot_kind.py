"""Agreement reports become report snapshots of a kind; existing rows are agreement reports."""

from django.db import migrations, models


def existing_results_are_version_1(apps, schema_editor):  # type: ignore[no-untyped-def]
    # Every result stored before this migration was written by agreement result version 1.
    ReportSnapshot = apps.get_model("reports", "ReportSnapshot")
    ReportSnapshot.objects.filter(result__isnull=False).update(result_version=1)


class Migration(migrations.Migration):

    dependencies = [
        ("reports", "0002_agreementreport_started_at_and_more"),
        ("studies", "0001_initial"),
    ]

    operations = [
        migrations.RenameModel(old_name="AgreementReport", new_name="ReportSnapshot"),
        migrations.AlterField(
            model_name="reportsnapshot",
            name="study",
            field=models.ForeignKey(
                on_delete=models.deletion.CASCADE,
                related_name="report_snapshots",
                to="studies.study",
            ),
        ),
        migrations.AddField(
            model_name="reportsnapshot",
            name="kind",
            field=models.CharField(
                choices=[("agreement", "Agreement")], default="agreement", max_length=16
            ),
        ),
        migrations.AddField(
            model_name="reportsnapshot",
            name="result_version",
            field=models.PositiveSmallIntegerField(blank=True, null=True),
        ),
        migrations.RunPython(existing_results_are_version_1, migrations.RunPython.noop),
    ]
