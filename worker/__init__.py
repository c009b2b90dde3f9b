"""The worker daemon and the command line: the top floor of the house.

``daemon`` claims and paces, ``lease`` owns one claimed lease (clock, keys, budgeted retry),
``run`` supervises one task's executor run, ``cli`` is every command. It may use everything
below it (``plugins``, ``tracker_client``) and nothing uses it.
"""
