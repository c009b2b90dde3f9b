"""The rail's Model Context Protocol (MCP) face: ``backlog-worker mcp`` (docs/submit/mcp.md).

An agent that speaks MCP submits tasks, waits for them, reads their results, cancels them,
lists a pipeline's tasks, searches and writes the shared store and moves a task waiting at a
human step, through tools built on the producer API
(:mod:`tracker_client.producer`), so it works on every rail and acts with the credentials it
was given. Needs the ``mcp`` extra (the official MCP Python SDK); nothing else of the package
imports it.

* :mod:`tracker_client.mcp.tools`: the tools and resources on an SDK server;
* :mod:`tracker_client.mcp.http`: streamable HTTP behind a bearer token.
"""
