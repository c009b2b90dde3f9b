"""The NullTickets HTTP client: :class:`~tracker_client.nulltickets.client.RemoteTracker`.

``contract`` is the wire contract as data, ``transport`` the one HTTP request with its
credentials and errors, ``client`` the ``Tracker`` built on them by composition.
"""
