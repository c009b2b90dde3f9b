"""The NullTickets HTTP client: :class:`~tracker_client.nulltickets.client.RemoteTracker`.

The wire contract as data is :mod:`tracker_client.contract`; here ``transport`` is the one HTTP
request with its credentials and errors, ``client`` the ``Tracker`` built on them by composition.
"""
