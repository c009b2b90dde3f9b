"""``backlog-worker systemd-unit``: write hardened systemd units for a worker or a served rail."""
