"""The embedded default: PostgreSQL, Redis, OpenBao and the local model from PyPI wheels.

``manage.py runlocal`` and the test session both start their services through the
classes in this package, so the embedded default is exercised by every test run.
"""
