from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("openmates", "0002_aicall"),
    ]

    operations = [
        migrations.AddField(
            model_name="aicall",
            name="error_reason",
            field=models.CharField(blank=True, db_index=True, max_length=32),
        ),
        migrations.AddField(
            model_name="aicall",
            name="error_message",
            field=models.CharField(blank=True, max_length=300),
        ),
    ]
