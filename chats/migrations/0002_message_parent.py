"""Messages become a tree: ``Message.parent`` (docs/architecture.md §3).

Existing chats were linear; each message gets the message before it as its parent, except
an answer that retried an ended answer (``message.retry``), whose parent is the question
both answer: the two are sibling versions.
"""

from typing import Any

import django.db.models.deletion
from django.db import migrations, models

ENDED = ("failed", "interrupted", "cancelled")


def _chain(apps: Any, schema_editor: Any) -> None:
    message = apps.get_model("chats", "Message")
    rows = message.objects.order_by("chat_id", "created_at").values_list(
        "pk", "chat_id", "role", "status", "created_at"
    )
    changed = []
    chat, previous, question = None, None, None
    # A question and its answer share created_at (one statement): the question first.
    for pk, chat_id, role, status, _ in sorted(
        rows, key=lambda r: (r[1], r[4], r[2] != "user", r[0])
    ):
        if chat_id != chat:
            chat, previous, question = chat_id, None, None
        parent = previous[0] if previous else None
        if role == "assistant" and previous and previous[1] == "assistant" and previous[2] in ENDED:
            parent = question
        if parent is not None:
            changed.append(message(pk=pk, parent_id=parent))
        previous = (pk, role, status)
        if role == "user":
            question = pk
    message.objects.bulk_update(changed, ["parent"], batch_size=1000)


class Migration(migrations.Migration):
    dependencies = [
        ("chats", "0001_initial"),
    ]

    operations = [
        migrations.AddField(
            model_name="message",
            name="parent",
            field=models.ForeignKey(
                blank=True,
                db_constraint=False,
                null=True,
                on_delete=django.db.models.deletion.DO_NOTHING,
                related_name="children",
                to="chats.message",
            ),
        ),
        migrations.RunPython(_chain, migrations.RunPython.noop),
    ]
