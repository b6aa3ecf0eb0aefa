from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("chats", "0005_message_language"),
    ]

    operations = [
        migrations.AddField(
            model_name="message",
            name="tools_offered",
            field=models.JSONField(blank=True, default=list),
        ),
    ]
