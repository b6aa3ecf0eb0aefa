"""Fixtures of the channel adapter tests: the loopback platform server, settings pointing
the client libraries at it, channels configured through the real service, and a channel
manager running on the test's event loop."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest

from instances.models import ChannelConfig
from instances.services import channel_config_set
from messaging import runtime
from messaging.manager import ChannelManager
from tests.messaging.platform import PlatformServer

TELEGRAM_TOKEN = "123456:telegram-test-token"
SLACK_TOKEN = "xoxb-slack-test-token"
SLACK_SECRET = "slack-signing-secret"


@pytest.fixture
def platform(settings: Any) -> Iterator[PlatformServer]:
    """The fake Telegram and Slack APIs, with the settings pointing at them."""
    server = PlatformServer().start()
    settings.MESSAGING_TELEGRAM_API_BASE = f"{server.url}/bot"
    settings.MESSAGING_SLACK_API_BASE = f"{server.url}/api/"
    settings.MESSAGING_PUBLIC_URL = "https://mates.example"
    settings.MESSAGING_BURST_S = 0.05
    yield server
    server.stop()


@pytest.fixture
def telegram_channel(instance: Any) -> ChannelConfig:
    """The ``demo`` instance's Telegram bot, enabled."""
    return channel_config_set(
        instance=instance, kind="telegram", credentials={"bot_token": TELEGRAM_TOKEN}, enabled=True
    )


@pytest.fixture
def slack_channel(instance: Any) -> ChannelConfig:
    """The ``demo`` instance's Slack app, enabled."""
    return channel_config_set(
        instance=instance,
        kind="slack",
        credentials={"bot_token": SLACK_TOKEN, "signing_secret": SLACK_SECRET},
        enabled=True,
    )


@pytest.fixture
async def manager(platform: PlatformServer) -> AsyncIterator[ChannelManager]:
    """A channel manager on this test's loop, installed for the webhook views; afterwards
    the turns it started have ended and this loop's turn registry is stopped."""
    import asyncio

    from pipeline.runtime import registry

    channel_manager = ChannelManager()
    runtime.install(channel_manager, asyncio.get_running_loop())
    yield channel_manager
    await channel_manager.stop_all()
    runtime.install(None, None)
    # The turns run in this loop's turn registry: their post-processing ends before the
    # loop does, and the registry's loops stop.
    await asyncio.wait_for(registry().wait_idle(), 20)
    await asyncio.wait_for(registry().stop(), 20)


def script_turn(llm_script: Any, answer: str | list[str], *, first: bool = True) -> None:
    """Queue the model calls of one turn: safety, a first message's title, the answer,
    post-processing."""
    llm_script.reply(text='{"harmful": 0, "misuse": 0}', model="fast")
    if first:
        llm_script.reply(
            text='{"title": "Chat", "icon": "chat", "category": "general", "tags": []}',
            model="fast",
        )
    llm_script.reply(text=answer, model="standard")
    llm_script.reply(
        text='{"follow_ups": [], "topic_changed": false, "summary": "Talked."}', model="fast"
    )


async def wait_calls(platform: PlatformServer, method: str, count: int = 1) -> list[Any]:
    """The platform's calls of ``method`` once there are ``count`` (10 s at most)."""
    import asyncio

    for _ in range(500):
        calls = platform.of(method)
        if len(calls) >= count:
            return calls
        await asyncio.sleep(0.02)
    raise AssertionError(f"{count} calls of {method} expected, got {len(platform.of(method))}")


class SendGate:
    """Holds an adapter's answers: its ``send_message`` waits for :meth:`open`. A turn's
    leader cannot step down (nor take the next batch) while its answer waits, so whatever
    arrives meanwhile arrives while the turn runs. ``reached`` is set once an answer
    waits at the gate."""

    def __init__(self, adapter: Any, monkeypatch: pytest.MonkeyPatch) -> None:
        import asyncio

        self.reached = asyncio.Event()
        self._open = asyncio.Event()
        real = adapter.send_message

        async def gated(target: Any, markdown: str) -> None:
            self.reached.set()
            await self._open.wait()
            await real(target, markdown)

        monkeypatch.setattr(adapter, "send_message", gated)

    async def wait_reached(self) -> None:
        """Wait until an answer waits at the gate (10 s at most)."""
        import asyncio

        await asyncio.wait_for(self.reached.wait(), 10)

    def open(self) -> None:
        """Let the answers through."""
        self._open.set()


class LeadGate:
    """Holds a desk's workers before their first ``take``: the messages posted while it
    is shut are all waiting when the leader first looks, so they are one burst however
    slowly they were posted."""

    def __init__(self, desk: Any, monkeypatch: pytest.MonkeyPatch) -> None:
        import asyncio

        self._open = asyncio.Event()
        real = desk._work

        async def gated(line: Any, token: str) -> None:
            await self._open.wait()
            await real(line, token)

        monkeypatch.setattr(desk, "_work", gated)

    def open(self) -> None:
        """Let the workers go on."""
        self._open.set()
