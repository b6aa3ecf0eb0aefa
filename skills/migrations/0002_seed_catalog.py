"""Seeds the global skill catalog: Math, Time, Units, Web research, Weather (version 1)."""

from django.db import migrations

from skills.catalog import CATALOG, catalog_seed


def seed(apps, schema_editor):
    catalog_seed(apps.get_model("skills", "Skill"), apps.get_model("skills", "SkillVersion"))


def unseed(apps, schema_editor):
    Skill = apps.get_model("skills", "Skill")
    Skill.objects.filter(slug__in=[entry["slug"] for entry in CATALOG]).delete()


class Migration(migrations.Migration):
    dependencies = [("skills", "0001_initial")]

    operations = [migrations.RunPython(seed, unseed)]
