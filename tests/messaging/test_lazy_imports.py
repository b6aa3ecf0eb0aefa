"""The platforms' client libraries load only when a channel of that kind starts
(docs/channels.md §2): python-telegram-bot adds about 16 MiB to a process and slack-sdk
about 3 MiB, which a server without chat channels should not carry (the idle budget of
docs/architecture.md §10)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PROBE = """
import sys
import django
django.setup()
import openmates.asgi
from messaging.manager import default_factories
loaded_at_start = [m for m in ("telegram", "slack_sdk") if m in sys.modules]
factories = default_factories()
print(",".join(loaded_at_start) or "-", sorted(factories))
"""


def test_the_app_loads_without_the_platform_libraries() -> None:
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "openmates.settings"}
    env["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"
    run = subprocess.run(
        [sys.executable, "-c", PROBE], cwd=ROOT, env=env, capture_output=True, text=True, timeout=90
    )
    assert run.returncode == 0, run.stderr[-2000:]
    assert run.stdout.strip().splitlines()[-1] == "- ['slack', 'telegram']"
