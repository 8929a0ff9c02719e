"""The report snapshot model now lives in the `snapshots` app (snapshots 0001 took over its
table): remove it from this app's state only, so the table and its rows stay."""

from django.db import migrations


class Migration(migrations.Migration):

    dependencies = [
        ("reports", "0005_alter_reportsnapshot_kind"),
        ("snapshots", "0001_initial"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            database_operations=[],
            state_operations=[migrations.DeleteModel(name="ReportSnapshot")],
        ),
    ]
