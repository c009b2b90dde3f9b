"""Executors and what they are built from: the plugin API, the built-in executors, processes.

``api`` is the public face for executor authors (``Executor``, ``ExecutionContext``,
``Transition``, ``Failure``); ``command``, ``python`` and ``nullclaw`` are the built-ins;
``proc`` runs children without orphans; ``supervise`` maps how a run ends; ``testing`` is the
harness for plugin tests. It may use ``tracker_client``'s models and errors, never the worker.

Public (docs/reference/stability.md): ``api``, ``testing``, and of ``python.sync`` and ``agent``
the names the API reference lists (``ThreadContext``, ``RunCancelled``, ``Store``). The rest,
the built-in executors' classes and options included, is internal.
"""
