"""``backlog-worker tracker serve``: the embedded tracker served over the NullTickets API.

``app`` builds the Starlette application; the routes, auth and OpenAPI document are derived from
the wire contract (:mod:`tracker_client.nulltickets.contract`).
"""
