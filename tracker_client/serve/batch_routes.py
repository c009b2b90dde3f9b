"""Route handlers of the served tracker's batching extensions: ``claim_many``.

A row alone cannot say it: the leases' tokens are answered in clear (as ``claim`` answers its
one). Named after its
operation in :data:`tracker_client.nulltickets.contract.OPERATIONS`, as in
:mod:`tracker_client.serve.routes`.

It may touch the request and the tracker of the request (through ``call`` by operation name);
never the storage directly.
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response

from tracker_client.nulltickets.batch_models import ClaimManyBody
from tracker_client.serve.helpers import dump, idem_key, tracker_of
from tracker_client.serve.http import Handlers, json_response, read_model

__all__ = ["HANDLERS"]

#: This module's handlers by operation name.
HANDLERS = Handlers()


@HANDLERS
async def claim_many(request: Request) -> Response:
    """``POST /leases/claim-many``: up to ``n`` leases of the role in one write (a JSON array,
    empty when there is no work; each lease with its token, as ``claim`` answers it)."""
    body = await read_model(request, ClaimManyBody)
    leases = await tracker_of(request).call(
        "claim_many",
        agent_id=body.agent_id,
        agent_role=body.agent_role,
        lease_ttl_ms=body.lease_ttl_ms,
        n=body.n,
        concurrency=body.concurrency,
        idempotency_key=idem_key(request),
    )
    docs = []
    for lease in leases:
        doc = dump(lease)
        doc["lease_token"] = lease.lease_token.get_secret_value()
        docs.append(doc)
    return json_response(docs)
