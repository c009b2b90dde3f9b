"""The wire contract as data, neutral ground for every side that speaks it.

``table`` is the operations table and its lookups (the rows in ``operations``, their shape in
``contract_types``, the extension names in ``extensions``), ``wire_models`` and
``batch_models`` the bodies and answers (with the batch limits), ``wire_errors`` the two-way
error table. The HTTP client (:mod:`tracker_client.nulltickets`), the served tracker
(:mod:`tracker_client.serve`), the rails and the worker import it; it imports no transport, so
a rail or the worker that reads the contract never loads the HTTP client. Nothing is imported
here: each module is loaded only by whoever needs it (an embedded worker loads the batch models
without the table).
"""
