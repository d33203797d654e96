from typing import Any

from django.db import migrations, models

from messaging.signatures import error_signature


def signatures_fill(apps: Any, schema_editor: Any) -> None:
    """Give the letters already kept their signature, as a new save would."""
    dead_letter = apps.get_model("messaging", "DeadLetter")
    letters = list(dead_letter.objects.only("pk", "last_error"))
    for letter in letters:
        letter.error_signature = error_signature(letter.last_error)
    dead_letter.objects.bulk_update(letters, ["error_signature"], batch_size=500)


class Migration(migrations.Migration):
    dependencies = [
        ("messaging", "0009_delivery_group_tries"),
    ]

    operations = [
        migrations.AddField(
            model_name="deadletter",
            name="error_signature",
            field=models.CharField(
                blank=True, default="", editable=False, max_length=500
            ),
        ),
        migrations.RunPython(signatures_fill, migrations.RunPython.noop),
    ]
