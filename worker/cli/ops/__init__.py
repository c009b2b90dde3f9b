"""The operator subcommands of ``backlog-worker`` (``pipeline``, ``task``, ``submit``, ``queue``,
``plugins``, ``demo``): one module each, registered by :mod:`worker.cli.ops.commands`."""
