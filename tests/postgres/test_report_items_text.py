"""A batch's report items as JSON text made the short way, and a batch's keyed lease tokens.

``bw_finish_many_tx`` reads its items from JSON text; :func:`tracker._items_text` makes that
text with each move's shared fields encoded once, so it must decode to what the plain encoder
makes of the same items, whatever a key holds (quotes, control characters, non-ASCII, None)
and however items of one batch differ. A keyed claim's tokens
(:func:`~tracker_client.rules.leasekeys.keyed_tokens`, the PostgreSQL claim's batch) must be the
tokens :func:`~tracker_client.rules.leasekeys.keyed_token` derives one by one: a replay on the
rail's other path derives them that way, and the stored digests must match.
"""

from __future__ import annotations

import json
from typing import Any

from tracker_client.postgres.tracker import _ENCODE_ITEMS, _ITEM_FIELDS, REMEMBERED, _items_text
from tracker_client.rules.leasekeys import keyed_token, keyed_tokens

EVENT = '{"trigger":"complete","from":"todo","to":"done","instructions":"say \\"hi\\""}'
RESULT = '{"event_ids":[],"transition":{"previous_stage":"todo","new_stage":"done"}}'


def _item(n: int, **changes: Any) -> dict[str, Any]:
    item: dict[str, Any] = {
        "run": f"01a24c44-c93c-4ae2-9e25-ea42ba5a2d{n:02d}",
        "token": f"{n:064x}",
        "pipeline": "pid@3",
        "stage": "todo",
        "version": None,
        "to": "done",
        "role": None,
        "terminal": 1,
        "usage": None,
        "event": EVENT,
        "key": f"key-{n}",
        "fp": f"{n + 1:064x}",
        "result": RESULT,
    }
    item.update(changes)
    assert set(item) == set(_ITEM_FIELDS)  # every field the statement reads, no other
    return item


ITEMS = [
    _item(0),
    _item(1, key=None, fp=None),
    _item(2, key='quote " back \\ line\n nul \x00 zoë \u2028 \U0001f600'),
    _item(3, version=7, usage='{"tokens":10}', role="review", terminal=0, to="review"),
    _item(4, pipeline="other@1", stage="zoë", event='{"x":"\u00e9"}'),
    _item(5),
]


def test_items_text_decodes_to_the_plain_encoding() -> None:
    heads: dict[tuple[Any, ...], str] = {}
    assert json.loads(_items_text(ITEMS, heads)) == json.loads(_ENCODE_ITEMS(ITEMS))
    assert len(heads) == 3  # items 0, 1, 2 and 5 share their move's text
    # again with the heads kept: the same text
    assert json.loads(_items_text(ITEMS, heads)) == json.loads(_ENCODE_ITEMS(ITEMS))


def test_items_text_of_one_item_and_of_none() -> None:
    assert json.loads(_items_text([ITEMS[2]], {})) == [ITEMS[2]]
    assert _items_text([], {}) == "[]"


def test_items_text_forgets_heads_beyond_its_bound() -> None:
    heads: dict[tuple[Any, ...], str] = {}
    items = [_item(n % 100, version=n) for n in range(REMEMBERED + 5)]
    assert json.loads(_items_text(items, heads)) == json.loads(_ENCODE_ITEMS(items))
    assert len(heads) <= REMEMBERED


def test_keyed_tokens_are_keyed_token_of_each_lease() -> None:
    key = bytes(range(32))
    lease_ids = ["6f1d2c3b-0000-4000-8000-000000000001", "zoë", ""]
    for idem in ("claim-ahead-1-2", "k\u00e9y\x00", ""):
        assert keyed_tokens(key, lease_ids, idem) == [
            keyed_token(key, lease_id, idem) for lease_id in lease_ids
        ]
    assert keyed_tokens(key, [], "k") == []
