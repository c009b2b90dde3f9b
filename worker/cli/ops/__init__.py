"""The operator subcommands of ``backlog-worker`` (``pipeline``, ``task``, ``submit``, ``queue``,
``plugins``, ``demo``): one module each (``task``, a group, is a package of a module per
command), registered by :mod:`worker.cli.ops.commands`.

They may touch a tracker (opened by :mod:`worker.cli.ops.common` through
:mod:`tracker_client.factory`, used through the ``Tracker`` protocol), the configuration, the
operator's input files and the terminal; ``plugins`` also the plugin registry. None of them imports
the daemon (:mod:`worker.daemon`, :mod:`worker.run`).
"""
