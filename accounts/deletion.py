"""The explicit registry through which apps above ``accounts`` take part in account deletion.

``accounts`` owns deleting an account (docs/architecture.md §2) but may not import the
apps that keep a user's data (``chats`` sits above it). Such an app registers one
:class:`AccountDataOwner` in its ``AppConfig.ready()``; ``accounts.services.account_delete``
calls every registered owner explicitly and synchronously, after the user's transit key is
shredded and inside the transaction that then deletes the user row, so a failing owner
rolls the row deletion back (unlike a signal, nothing happens later or out of sight).
"""

from __future__ import annotations

from typing import Protocol


class AccountDataOwner(Protocol):
    """An app's part in deleting an account. ``name`` identifies it (its app label)."""

    name: str

    def account_data_delete(self, *, user_id: int) -> None:
        """Remove what of ``user_id`` the user row's cascade does not reach, and lock
        what it does.

        Runs inside ``account_delete``'s transaction, after the user's transit key is
        gone (nothing of theirs decrypts any more) and before the user row is deleted:
        drop out-of-database copies (cache entries), take the row locks the cascade
        needs in the app's lock order. Raising rolls the deletion back.
        """


_owners: dict[str, AccountDataOwner] = {}


def account_data_owner_register(owner: AccountDataOwner) -> None:
    """Register ``owner`` under its ``name``; registering the same one again is a no-op.

    Raises:
        ValueError: another owner already holds that name.
    """
    current = _owners.get(owner.name)
    if current is not None and current is not owner:
        raise ValueError(f"account data owner {owner.name!r} is already registered")
    _owners[owner.name] = owner


def account_data_owners() -> list[AccountDataOwner]:
    """The registered owners in registration order."""
    return list(_owners.values())
