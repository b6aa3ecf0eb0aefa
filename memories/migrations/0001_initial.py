"""Memories and their settings; the HNSW index of every existing instance (memories.vectors:
a partial index per instance and dimension over the dimensionless ``embedding`` column,
cosine, m = 24, ef_construction = 100; instances made later get theirs with their first
memory)."""

import django.contrib.postgres.fields
import django.contrib.postgres.indexes
import django.db.models.deletion
import pgvector.django.vector
import uuid
from django.conf import settings
from django.db import migrations, models
from pgvector.django import VectorExtension


def _index_sql(instance_id, dims):
    name = f"memories_vec_i{int(instance_id)}_d{int(dims)}"
    cast, ops = (
        ("vector", "vector_cosine_ops") if dims <= 2000 else ("halfvec", "halfvec_cosine_ops")
    )
    return (
        f"CREATE INDEX IF NOT EXISTS {name} ON memories_memory "
        f"USING hnsw ((embedding::{cast}({int(dims)})) {ops}) "
        "WITH (m = 24, ef_construction = 100) "
        f"WHERE instance_id = {int(instance_id)} AND vector_dims(embedding) = {int(dims)}"
    )


def instance_indexes_create(apps, schema_editor):
    Instance = apps.get_model("instances", "Instance")
    for instance_id, dims in Instance.objects.values_list("id", "embedding_dimensions"):
        if 0 < dims <= 4000:
            schema_editor.execute(_index_sql(instance_id, dims))


def instance_indexes_drop(apps, schema_editor):
    Instance = apps.get_model("instances", "Instance")
    for instance_id, dims in Instance.objects.values_list("id", "embedding_dimensions"):
        schema_editor.execute(f"DROP INDEX IF EXISTS memories_vec_i{int(instance_id)}_d{int(dims)}")


class Migration(migrations.Migration):

    initial = True

    dependencies = [
        ('instances', '0001_initial'),
        ('openmates', '0001_pgvector'),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        VectorExtension(),
        migrations.CreateModel(
            name='Memory',
            fields=[
                ('id', models.UUIDField(default=uuid.uuid4, editable=False, primary_key=True, serialize=False)),
                ('category', models.CharField(choices=[('preference', 'Preference'), ('fact', 'Fact'), ('event', 'Event'), ('relationship', 'Relationship'), ('decision', 'Decision'), ('general', 'General')], max_length=16)),
                ('content_sealed', models.BinaryField()),
                ('embedding', pgvector.django.vector.VectorField()),
                ('embedding_model', models.CharField(max_length=200)),
                ('blind_index', django.contrib.postgres.fields.ArrayField(base_field=models.BigIntegerField(), default=list, size=None)),
                ('source_chat_id', models.CharField(blank=True, default='', max_length=36)),
                ('created_at', models.DateTimeField(auto_now_add=True)),
                ('updated_at', models.DateTimeField(auto_now=True)),
                ('instance', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='memories', to='instances.instance')),
                ('user', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='memories', to=settings.AUTH_USER_MODEL)),
            ],
            options={
                'indexes': [models.Index(fields=['instance', 'user', '-created_at', '-id'], name='memory_owner_created'), models.Index(fields=['instance', 'user', 'category'], name='memory_owner_category'), django.contrib.postgres.indexes.GinIndex(fields=['blind_index'], name='memory_blind_index')],
            },
        ),
        migrations.CreateModel(
            name='MemorySettings',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('enabled', models.BooleanField(default=True)),
                ('key_generation', models.PositiveIntegerField(default=1)),
                ('updated_at', models.DateTimeField(auto_now=True)),
                ('instance', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='memory_settings', to='instances.instance')),
                ('user', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='memory_settings', to=settings.AUTH_USER_MODEL)),
            ],
            options={
                'verbose_name_plural': 'memory settings',
                'constraints': [models.UniqueConstraint(fields=('instance', 'user'), name='memory_settings_unique')],
            },
        ),
        migrations.RunPython(instance_indexes_create, instance_indexes_drop),
    ]
