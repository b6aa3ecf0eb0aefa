"""The turn runtime (docs/architecture.md §5): background turns, delivery, cancel, resume, reaper.

Three modules along its seams, whose public names this package re-exports:

* :mod:`pipeline.runtime.turn_registry` — the turns this process runs
  (:class:`TurnRegistry`, one per process: :func:`registry`): start in the background,
  the chat's lease or queue, following a turn of any process, cancel, the control
  channel; :class:`TurnControl`, what a running turn shares with it;
* :mod:`pipeline.runtime.delivery` — one turn's frames (:class:`Delivery`): coalesced,
  numbered and frame-sized ``stream.delta``, straight to this process's sockets and in
  batches through the channel layer to other processes', snapshots and resume;
* :mod:`pipeline.runtime.reaper` — liveness across processes: the heartbeat (proof of
  life, lease renewal, cancel flags, snapshot saves) and :func:`reap_orphans`, which
  fails the turns of processes that are gone (handlers registered with
  :func:`on_orphan`).
"""

from pipeline.runtime.delivery import Delivery, Subscriber
from pipeline.runtime.reaper import on_orphan, reap_orphans
from pipeline.runtime.turn_registry import (
    ActiveTurn,
    TurnControl,
    TurnFactory,
    TurnRegistry,
    registry,
    user_group,
)

__all__ = [
    "ActiveTurn",
    "Delivery",
    "Subscriber",
    "TurnControl",
    "TurnFactory",
    "TurnRegistry",
    "on_orphan",
    "reap_orphans",
    "registry",
    "user_group",
]
