"""``backlog-worker systemd-unit``: write hardened systemd units for a worker or a served rail.

Its modules may touch the install's paths, the ``--config`` files (read, never written) and stdout
(the units are printed); they never write a file or call systemd.
"""
