"""Seeds the Memory skill (memory_search, memory_save) where 0002 ran before it existed."""

from typing import Any

from django.db import migrations

from skills.catalog import catalog_seed

SLUGS = ["memory"]


def seed(apps: Any, schema_editor: Any) -> None:
    catalog_seed(
        apps.get_model("skills", "Skill"), apps.get_model("skills", "SkillVersion"), slugs=SLUGS
    )


def unseed(apps: Any, schema_editor: Any) -> None:
    apps.get_model("skills", "Skill").objects.filter(slug__in=SLUGS).delete()


class Migration(migrations.Migration):
    dependencies = [("skills", "0002_seed_catalog")]

    operations = [migrations.RunPython(seed, unseed)]
