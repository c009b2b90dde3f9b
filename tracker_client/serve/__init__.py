"""``backlog-worker tracker serve``: the embedded tracker served over the NullTickets API.

``app`` builds the Starlette application; the routes, auth and OpenAPI document are derived from
the wire contract (:mod:`tracker_client.contract.table`).

Its modules may touch Starlette, the wire contract and error table
(:mod:`tracker_client.nulltickets`) and the tracker they serve, through the ``Tracker`` protocol
(plus the embedded tracker's early lease check, in :mod:`~tracker_client.serve.helpers`); the server
process and its sockets are :mod:`worker.cli.serve`'s.
"""
