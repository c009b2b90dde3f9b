#!/usr/bin/env python3
"""The reviewer's step of examples/workers/command.toml: approve, or send the draft back once.

Called as ``review.py TITLE ATTEMPT`` (``{task.title}``, ``{attempt}``: each placeholder is one
argument, never a shell). A title starting with "WIP" is rejected on its first review: the
script writes ``outcome.json`` in the run's directory with the instructions for the writer and
exits 3 (mapped to ``reject``); anything else exits 0 (mapped to ``approve``).
"""

import json
import sys
from pathlib import Path

title, attempt = sys.argv[1], int(sys.argv[2])
if title.startswith("WIP") and attempt <= 2:
    instructions = "Drop the WIP marker and say what changed."
    Path("outcome.json").write_text(json.dumps({"instructions": instructions}))
    print(f"rejected {title!r}: {instructions}")
    sys.exit(3)
print(f"approved {title!r} (attempt {attempt})")
