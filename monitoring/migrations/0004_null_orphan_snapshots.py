"""Deployments whose calibration snapshot no longer exists lose the reference (what SET_NULL
would have done), so that 0005 can add the foreign key constraint on an existing database."""

from django.db import migrations


def orphans_cleared(apps, schema_editor):  # type: ignore[no-untyped-def]
    Deployment = apps.get_model("monitoring", "Deployment")
    ReportSnapshot = apps.get_model("snapshots", "ReportSnapshot")
    (Deployment.objects.filter(calibration_snapshot_id__isnull=False)
     .exclude(calibration_snapshot_id__in=ReportSnapshot.objects.values("pk"))
     .update(calibration_snapshot_id=None))


class Migration(migrations.Migration):

    dependencies = [
        ("monitoring", "0003_langfuse_source"),
        ("snapshots", "0001_initial"),
    ]

    operations = [
        migrations.RunPython(orphans_cleared, migrations.RunPython.noop),
    ]
