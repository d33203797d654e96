# course.ProbeEffect takes over the model state messaging 0008 dropped, on the same
# table (messaging_probeeffect, created by messaging 0002): no database change, so
# existing databases keep their rows and fresh ones get the same table.

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("course", "0002_permissions"),
        ("messaging", "0008_probe_effect_to_course"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.CreateModel(
                    name="ProbeEffect",
                    fields=[
                        (
                            "id",
                            models.BigAutoField(
                                auto_created=True,
                                primary_key=True,
                                serialize=False,
                                verbose_name="ID",
                            ),
                        ),
                        ("run", models.CharField(db_index=True, max_length=40)),
                        ("seq", models.PositiveIntegerField()),
                        (
                            "mode",
                            models.CharField(default="deduplication", max_length=20),
                        ),
                        ("created_at", models.DateTimeField(auto_now_add=True)),
                        (
                            "message",
                            models.ForeignKey(
                                null=True,
                                on_delete=django.db.models.deletion.CASCADE,
                                to="messaging.outboxmessage",
                            ),
                        ),
                    ],
                    options={
                        "db_table": "messaging_probeeffect",
                        "ordering": ["id"],
                    },
                ),
            ],
            database_operations=[],
        ),
    ]
