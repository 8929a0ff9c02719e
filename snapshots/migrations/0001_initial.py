"""The report snapshot model moves here from `reports`, keeping its table.

State only: the table `reports_reportsnapshot` (created by reports 0001 to 0005) is left where it
is and this app takes over its model; reports 0006 removes the model from the `reports` state
without dropping the table. An existing database migrates without copying a row."""

import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models


def content_type_moved(apps, schema_editor):  # type: ignore[no-untyped-def]
    # Admin log entries and permissions point to the model's content type: relabel it rather
    # than leave it behind under the old app (post_migrate would make a second, empty one).
    ContentType = apps.get_model("contenttypes", "ContentType")
    if not ContentType.objects.filter(app_label="snapshots", model="reportsnapshot").exists():
        ContentType.objects.filter(app_label="reports", model="reportsnapshot").update(
            app_label="snapshots")


def content_type_back(apps, schema_editor):  # type: ignore[no-untyped-def]
    ContentType = apps.get_model("contenttypes", "ContentType")
    if not ContentType.objects.filter(app_label="reports", model="reportsnapshot").exists():
        ContentType.objects.filter(app_label="snapshots", model="reportsnapshot").update(
            app_label="reports")


class Migration(migrations.Migration):

    initial = True

    dependencies = [
        ("contenttypes", "0002_remove_content_type_name"),
        ("reports", "0005_alter_reportsnapshot_kind"),
        ("studies", "0008_item_recorded_request"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            database_operations=[],
            state_operations=[
                migrations.CreateModel(
                    name="ReportSnapshot",
                    fields=[
                        ("id", models.BigAutoField(auto_created=True, primary_key=True,
                                                   serialize=False, verbose_name="ID")),
                        ("kind", models.CharField(
                            choices=[("agreement", "Agreement"), ("calibration", "Calibration"),
                                     ("selection", "Selection")],
                            default="agreement", max_length=16)),
                        ("params", models.JSONField(default=dict)),
                        ("input_fingerprint", models.CharField(blank=True, max_length=64)),
                        ("status", models.CharField(
                            choices=[("pending", "Pending"), ("running", "Running"),
                                     ("done", "Done"), ("failed", "Failed")],
                            default="pending", max_length=8)),
                        ("error", models.TextField(blank=True)),
                        ("result", models.JSONField(blank=True, null=True)),
                        ("result_version", models.PositiveSmallIntegerField(blank=True,
                                                                            null=True)),
                        ("created_at", models.DateTimeField(auto_now_add=True)),
                        ("started_at", models.DateTimeField(blank=True, null=True)),
                        ("computed_at", models.DateTimeField(blank=True, null=True)),
                        ("created_by", models.ForeignKey(
                            blank=True, null=True,
                            on_delete=django.db.models.deletion.SET_NULL, related_name="+",
                            to=settings.AUTH_USER_MODEL)),
                        ("plan", models.ForeignKey(
                            blank=True, null=True,
                            on_delete=django.db.models.deletion.PROTECT, related_name="+",
                            to="studies.analysisplan")),
                        ("study", models.ForeignKey(
                            on_delete=django.db.models.deletion.CASCADE,
                            related_name="report_snapshots", to="studies.study")),
                    ],
                    options={
                        "db_table": "reports_reportsnapshot",
                        "ordering": ["-id"],
                        "indexes": [models.Index(fields=["study", "-id"],
                                                 name="agreementreport_study")],
                    },
                ),
            ],
        ),
        migrations.RunPython(content_type_moved, content_type_back),
    ]
