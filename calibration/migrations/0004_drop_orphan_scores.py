"""Calibrated scores whose snapshot no longer exists are deleted, so that 0005 can add the
foreign key constraint on a database that has them (a snapshot deleted by hand, or before the
reference was constrained, left its rows behind: nothing could read them as a snapshot)."""

from django.db import migrations


def orphans_deleted(apps, schema_editor):  # type: ignore[no-untyped-def]
    CalibratedScore = apps.get_model("calibration", "CalibratedScore")
    ReportSnapshot = apps.get_model("snapshots", "ReportSnapshot")
    CalibratedScore.objects.exclude(
        snapshot_id__in=ReportSnapshot.objects.values("pk")).delete()


class Migration(migrations.Migration):

    dependencies = [
        ("calibration", "0003_fewer_row_indexes"),
        ("snapshots", "0001_initial"),
    ]

    operations = [
        migrations.RunPython(orphans_deleted, migrations.RunPython.noop),
    ]
