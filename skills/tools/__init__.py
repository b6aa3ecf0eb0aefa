"""Tool modules: each registers one or more tools with ``skills.registry.register_tool``.

``SkillsConfig.ready`` imports every module here; ``tests/skills/test_registry.py`` fails
when one of them registers nothing.
"""
