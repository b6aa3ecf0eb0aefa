"""The channel manager: the adapters this process runs, kept in line with ``ChannelConfig``.

docs/channels.md §2. Every serving process has one manager. Every
``MESSAGING_RECONCILE_S`` it reads the enabled channels (one query of ids and change
stamps) and starts what is new or changed, stops what was disabled, deleted or changed, so
a change in the admin takes effect without a restart; then each adapter's desk adopts the
messages whose leading process died (``Desk.sweep``). The adapters start and stop side
by side, each within ``START_TIMEOUT_S`` / ``STOP_TIMEOUT_S``, so a platform that hangs
delays no other channel. Each adapter starts on its own: one that fails (bad
credentials, platform unreachable, a bug) is recorded as ``error`` with its reason
(``ChannelConfig.last_error``) and tried again after a pause that doubles with each
failure (5 s, 10 s, … at most 5 minutes) or at once when its row changes, while the
others run. A channel without credentials is skipped (``stopped``, "no credentials").
A channel that is disabled or deleted is retired on the platform (Telegram: its webhook
deleted); a process that ends only stops its adapters, leaving the platform side to the
processes that go on.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.db.utils import ProgrammingError
from psycopg.errors import UndefinedTable

from instances.models import ChannelConfig, Instance
from instances.services import channel_credentials_get
from messaging import services
from messaging.adapters.base import ChannelAdapter, redact
from messaging.models import ChannelState
from openmates.db import db_call

logger = logging.getLogger(__name__)

START_TIMEOUT_S = 30.0
# A stop (and a retire) that takes longer is given up and logged.
STOP_TIMEOUT_S = 30.0
# A failed start is tried again after RETRY_FIRST_S, the pause doubling up to RETRY_MAX_S.
RETRY_FIRST_S = 5.0
RETRY_MAX_S = 300.0
AdapterFactory = Callable[..., ChannelAdapter]


def _telegram(**kwargs: Any) -> ChannelAdapter:
    # Imported when a Telegram channel starts: python-telegram-bot adds about 16 MiB to a
    # process (docs/architecture.md §10's idle budget), which servers without one skip.
    from messaging.adapters.telegram import TelegramAdapter

    return TelegramAdapter(**kwargs)


def _slack(**kwargs: Any) -> ChannelAdapter:
    # As _telegram: slack-sdk only in processes that run a Slack channel (about 3 MiB).
    from messaging.adapters.slack import SlackAdapter

    return SlackAdapter(**kwargs)


def default_factories() -> dict[str, AdapterFactory]:
    """The adapter factory of each ``ChannelConfig.Kind`` (keyword arguments of
    ``ChannelAdapter``); each imports its platform's client library on first use."""
    return {"telegram": _telegram, "slack": _slack}


def api_base(kind: str) -> str:
    """The platform's API base URL from the settings (tests point it at loopback)."""
    if kind == "telegram":
        return str(settings.MESSAGING_TELEGRAM_API_BASE)
    return str(settings.MESSAGING_SLACK_API_BASE)


@dataclass(frozen=True)
class Wanted:
    """An enabled channel as the database has it; ``stamp`` changes with its credentials."""

    config_id: int
    kind: str
    instance_id: int
    stamp: tuple[Any, ...]
    has_credentials: bool


def wanted_channels() -> list[Wanted]:
    """The enabled channels (one query, no credentials opened)."""
    rows = (
        ChannelConfig.objects.filter(enabled=True)
        .order_by("pk")
        .values_list(
            "pk", "kind", "instance_id", "credentials_set_at", "key_version", "credentials_sealed"
        )
    )
    return [
        Wanted(
            config_id=pk,
            kind=kind,
            instance_id=instance_id,
            stamp=(kind, instance_id, set_at, key_version),
            has_credentials=sealed is not None,
        )
        for pk, kind, instance_id, set_at, key_version, sealed in rows
    ]


def _opened(config_id: int) -> tuple[Instance, dict[str, str] | None]:
    config = ChannelConfig.objects.select_related("instance").get(pk=config_id)
    return config.instance, channel_credentials_get(channel=config)


class ChannelManager:
    """Starts, stops and finds this process's adapters.

    ``factories`` maps a kind to the adapter class (tests swap one in); a failed start is
    tried again ``retry_first_s`` later, the pause doubling up to ``retry_max_s`` (seconds
    of ``clock``, ``time.monotonic``).
    """

    def __init__(
        self,
        *,
        factories: Mapping[str, AdapterFactory] | None = None,
        retry_first_s: float = RETRY_FIRST_S,
        retry_max_s: float = RETRY_MAX_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.factories = dict(factories or default_factories())
        self.adapters: dict[int, ChannelAdapter] = {}
        self.stamps: dict[int, tuple[Any, ...]] = {}
        # config id → (failed starts in a row, when the next try is due on ``clock``)
        self.retries: dict[int, tuple[int, float]] = {}
        self.retry_first_s, self.retry_max_s, self.clock = retry_first_s, retry_max_s, clock
        self._lock = asyncio.Lock()

    def adapter(self, config_id: int) -> ChannelAdapter | None:
        """The running adapter of the channel, or None."""
        return self.adapters.get(config_id)

    async def reconcile(self) -> None:
        """Bring the running adapters in line with the enabled channels (see the module)."""
        async with self._lock:
            wanted = {w.config_id: w for w in await db_call(wanted_channels)}
            # Each stop and start is bounded by its own timeout and they run side by side,
            # so a platform that hangs holds up no other channel.
            await asyncio.gather(
                *(
                    self._stop(config_id, retire=config_id not in wanted)
                    for config_id in list(self.adapters)
                    if config_id not in wanted or wanted[config_id].stamp != self.stamps[config_id]
                )
            )
            for config_id in [c for c in list(self.stamps) if c not in wanted]:
                del self.stamps[config_id]
                self.retries.pop(config_id, None)
            due = []
            for item in wanted.values():
                if self.stamps.get(item.config_id) != item.stamp:
                    self.stamps[item.config_id] = item.stamp
                    self.retries.pop(item.config_id, None)
                elif not self._retry_due(item.config_id):
                    continue
                due.append(item)
            started = await asyncio.gather(*(self._start(item) for item in due))
            for item, ok in zip(due, started, strict=True):
                if ok:
                    self.retries.pop(item.config_id, None)
                else:
                    self._retry_later(item.config_id)
            await self._sweep()

    async def _sweep(self) -> None:
        """Take over the waiting messages whose leading process died (docs/channels.md §5)."""
        for config_id, adapter in self.adapters.items():
            try:
                await adapter.desk.sweep()
            except Exception as exc:  # Redis away for a moment: the next round
                logger.warning("channel %s: burst sweep failed: %s", config_id, exc)

    def _retry_due(self, config_id: int) -> bool:
        """Whether a channel whose last start failed is due another try."""
        failed = self.retries.get(config_id)
        return failed is not None and self.clock() >= failed[1]

    def _retry_later(self, config_id: int) -> None:
        failures = self.retries.get(config_id, (0, 0.0))[0] + 1
        pause = min(self.retry_first_s * 2 ** (failures - 1), self.retry_max_s)
        self.retries[config_id] = (failures, self.clock() + pause)

    async def _start(self, item: Wanted) -> bool:
        """Start one adapter; whatever it raises is recorded, never propagated. False when
        it failed (to be tried again), True when it runs or has no credentials."""
        if not item.has_credentials:
            await self._record(item.config_id, ChannelState.Status.STOPPED, "no credentials")
            return True
        adapter: ChannelAdapter | None = None
        credentials: dict[str, str] | None = None
        try:
            instance, credentials = await db_call(_opened, item.config_id)
            if not credentials:
                await self._record(item.config_id, ChannelState.Status.STOPPED, "no credentials")
                return True
            adapter = self.factories[item.kind](
                config_id=item.config_id,
                instance=instance,
                credentials=credentials,
                api_base=api_base(item.kind),
            )
            await asyncio.wait_for(adapter.start(), START_TIMEOUT_S)
        except Exception as exc:
            reason = _reason(exc, credentials)
            logger.warning("channel %s (%s) did not start: %s", item.config_id, item.kind, reason)
            if adapter is not None:
                await _quietly_stop(adapter)
            await self._record(item.config_id, ChannelState.Status.ERROR, reason)
            return False
        self.adapters[item.config_id] = adapter
        await self._record(item.config_id, ChannelState.Status.RUNNING, "", mode=adapter.mode)
        return True

    async def _stop(self, config_id: int, *, retire: bool) -> None:
        """Stop a channel's adapter; ``retire`` (it was disabled or deleted) first undoes
        its set-up on the platform."""
        adapter = self.adapters.pop(config_id)
        if retire:
            try:
                await asyncio.wait_for(adapter.retire(), STOP_TIMEOUT_S)
            except Exception as exc:
                logger.warning("channel %s was not retired cleanly: %s", config_id, exc)
        await _quietly_stop(adapter)
        await self._record(config_id, ChannelState.Status.STOPPED, "disabled or changed")

    async def stop_all(self) -> None:
        """Stop every adapter (the process is ending); states are left as they are for
        the processes that go on."""
        async with self._lock:
            adapters = list(self.adapters.values())
            self.adapters.clear()
            await asyncio.gather(*(_quietly_stop(adapter) for adapter in adapters))
            self.stamps.clear()

    async def run(self, stopping: asyncio.Event) -> None:
        """Reconcile now and every ``MESSAGING_RECONCILE_S`` until ``stopping`` is set."""
        while not stopping.is_set():
            try:
                await self.reconcile()
            except ProgrammingError as exc:
                if not isinstance(exc.__cause__, UndefinedTable):
                    logger.exception("channel reconcile failed")
                else:  # a first start serves while its migrations run: the tables come
                    logger.info("channels start once the database is migrated")
            except Exception:  # the database away for a moment: try again next round
                logger.exception("channel reconcile failed")
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stopping.wait(), settings.MESSAGING_RECONCILE_S)
        await self.stop_all()

    async def _record(self, config_id: int, status: str, reason: str, **kwargs: Any) -> None:
        try:
            await db_call(
                services.state_record, config_id=config_id, status=status, reason=reason, **kwargs
            )
        except Exception:
            logger.exception("channel %s: its state could not be recorded", config_id)


async def _quietly_stop(adapter: ChannelAdapter) -> None:
    """Stop ``adapter`` within ``STOP_TIMEOUT_S``; what it raises is logged."""
    try:
        await asyncio.wait_for(adapter.stop(), STOP_TIMEOUT_S)
    except TimeoutError:
        logger.warning("channel %s did not stop within %.0f s", adapter.config_id, STOP_TIMEOUT_S)
    except Exception:
        logger.exception("channel %s did not stop cleanly", adapter.config_id)


def _reason(exc: BaseException, credentials: Mapping[str, str] | None = None) -> str:
    """What ``exc`` says, for the admin, without the channel's credentials."""
    if isinstance(exc, TimeoutError):
        return f"did not start within {START_TIMEOUT_S:g} s"
    return redact(f"{type(exc).__name__}: {exc}", credentials)[:2000]


async def connection_test(
    *, config_id: int, factories: Mapping[str, AdapterFactory] | None = None
) -> tuple[bool, str]:
    """Check the channel's credentials with the platform without starting it (the admin's
    "test connection"): ``(True, "@bot_name")`` or ``(False, reason)``."""
    try:
        instance, credentials = await db_call(_opened, config_id)
    except Exception as exc:
        return False, _reason(exc)
    if not credentials:
        return False, "no credentials"
    kind = await db_call(lambda: ChannelConfig.objects.get(pk=config_id).kind)
    adapter = (factories or default_factories())[kind](
        config_id=config_id, instance=instance, credentials=credentials, api_base=api_base(kind)
    )
    try:
        return True, await adapter.check()
    except Exception as exc:
        return False, _reason(exc, credentials)
    finally:
        await _quietly_stop(adapter)
