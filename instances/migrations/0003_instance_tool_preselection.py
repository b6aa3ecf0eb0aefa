import django.core.validators
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("instances", "0002_instance_api_limits"),
    ]

    operations = [
        migrations.AddField(
            model_name="instance",
            name="model_tool_preselection",
            field=models.BooleanField(
                default=False,
                help_text="With model pre-processing on: the fast tier also picks tools for first messages, added to the local picks (falls back to them on error or after 3 s).",
            ),
        ),
        migrations.AddField(
            model_name="instance",
            name="tools_offer_all_up_to",
            field=models.PositiveSmallIntegerField(
                default=0,
                help_text="Offer every enabled tool when the instance has at most this many (0-5; 0: never), the main model deciding which to call.",
                validators=[django.core.validators.MaxValueValidator(5)],
            ),
        ),
    ]
