"""The worker daemon and the command line: the top floor of the house.

``daemon`` claims and paces, ``lease`` owns one claimed lease (clock, keys, budgeted retry),
``run`` supervises one task's executor run, ``cli`` is every command. It may use everything
below it (``plugins``, ``tracker_client``) and nothing uses it.

All of it is internal (docs/reference/stability.md): there is no public Python API for running
a worker inside another process yet; ``backlog-worker run`` is the way in.
"""
