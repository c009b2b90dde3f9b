#!/usr/bin/env python3
"""The writer's step of examples/workers/command.toml: write a draft into the run's directory.

The command executor runs it in the run's own working directory with the task JSON on stdin
(``stdin = "task_json"``: ``{"task": ..., "run": ..., "attempt": ..., "instructions": ...,
"workdir": ...}``); what it prints becomes ``output`` events of the run, and exit 0 is mapped to
the trigger ``submit``. Only the standard library: any ``python3`` runs it.
"""

import json
import sys
from pathlib import Path

doc = json.load(sys.stdin)
task = doc["task"]
draft = Path("draft.md")
body = task.get("description") or "A first draft."
if doc.get("instructions"):  # set when the reviewer sent it back (the transition's instructions)
    body += f"\n\nReworked after review: {doc['instructions']}"
draft.write_text(f"# {task['title']}\n\n{body}\n")
print(f"wrote {draft.resolve()} ({draft.stat().st_size} bytes), attempt {doc['attempt']}")
