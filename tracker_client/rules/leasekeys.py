"""The lease token of a claim made with an idempotency key: derived, so a replay answers it.

A claim's answer can be lost and retried with the same idempotency key, and the two requests can
reach the rail in either order. The rail stores only the SHA-256 of a lease token
(:func:`.runs.token_hash`), so it cannot hand back a random token it minted before; a replay
that minted a fresh one took the lease away from whoever held the first answer (their next
heartbeat was ``invalid_token``). So a keyed claim's token is
``HMAC-SHA256(rail key, lease id + idempotency key)``: the replay computes the same token, the
stored hash still matches, and nothing but the hash is stored. A claim without a key keeps a
random token (nothing can replay it).

The rail key is 32 random bytes (``secrets``) made once per rail and kept in the
``rail_secrets`` table: on an embedded rail (schema 8) on its first keyed claim, on PostgreSQL
(schema 13) when the schema is migrated, so the one-statement claim, which derives its token
before it is sent, has it from the open on. It is a secret: with it and a lease id and key
(neither secret) anyone could compute a live lease's token. It is never logged or answered; a
backup holds it as it holds every other row, and ``rail copy`` leaves it behind (the copy has
or makes its own: no lease is live across a copy, so no token derived from the old key is
needed there, and two rails never share a key).
"""

from __future__ import annotations

import hashlib
import hmac
import secrets

from tracker_client.rules.common import Ctx

__all__ = ["KEY_NAME", "keyed_token", "keyed_tokens", "rail_key", "stored_rail_key"]

#: The ``rail_secrets`` row holding the key lease tokens are derived with.
KEY_NAME = "lease_token_key"


def stored_rail_key(ctx: Ctx) -> bytes | None:
    """The rail's lease-token key if it has one (a read: the PostgreSQL rail loads it at open)."""
    value = ctx.scalar("leasekeys.read", (KEY_NAME,))
    return None if value is None else bytes.fromhex(str(value))


def rail_key(ctx: Ctx) -> bytes:
    """The rail's lease-token key, made (32 random bytes) on first use; inside a write.

    Two first uses at once (PostgreSQL hosts) both insert-or-ignore and both read the row that
    won, so every host derives with one key."""
    value = ctx.scalar("leasekeys.read", (KEY_NAME,))
    if value is None:
        ctx.exec("leasekeys.make", (KEY_NAME, secrets.token_hex(32)))
        value = ctx.scalar("leasekeys.read", (KEY_NAME,))
    return bytes.fromhex(str(value))


def keyed_token(key: bytes, lease_id: str, idempotency_key: str) -> str:
    """The lease token (64 hex digits, as a random one) of the claim that made ``lease_id``
    under ``idempotency_key``: the same for the claim and every replay of it."""
    message = b"lease-token\x00" + lease_id.encode() + b"\x00" + idempotency_key.encode()
    return hmac.new(key, message, hashlib.sha256).hexdigest()


def keyed_tokens(key: bytes, lease_ids: list[str], idempotency_key: str) -> list[str]:
    """:func:`keyed_token` of each of ``lease_ids`` (a claim's batch): the same tokens, the
    HMAC keyed once and copied per lease (``hmac.new`` pads and hashes the key at every
    call: ~1.5 us a lease against ~1.0)."""
    keyed = hmac.new(key, digestmod=hashlib.sha256)
    tail = b"\x00" + idempotency_key.encode()
    out: list[str] = []
    for lease_id in lease_ids:
        mac = keyed.copy()
        mac.update(b"lease-token\x00" + lease_id.encode() + tail)
        out.append(mac.hexdigest())
    return out
