# The probes' effect table moved to the course app (course.ProbeEffect): messaging
# drops the model from its state only; the table, its rows and its name stay, and
# course 0003 takes the state over. The type's choices are now the registered types.

from django.db import migrations, models

import messaging.registry


class Migration(migrations.Migration):
    dependencies = [
        ("messaging", "0007_history_indexes_and_view_operations"),
    ]

    operations = [
        migrations.AlterField(
            model_name="outboxmessage",
            name="type",
            field=models.CharField(
                choices=messaging.registry.message_type_choices, max_length=40
            ),
        ),
        migrations.SeparateDatabaseAndState(
            state_operations=[migrations.DeleteModel(name="ProbeEffect")],
            database_operations=[],
        ),
    ]
