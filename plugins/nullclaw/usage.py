"""NullClaw's token usage, read from what it prints (docs/executors/nullclaw.md, "Cost").

NullClaw has no JSON output and prints no usage by default. It prints it in two places when
asked, and the executor counts what it finds there, as ``ctx.report_cost(tokens=...)``, so a
task's ``max_tokens`` budget (docs/operate/budgets.md) sees it:

* with ``diagnostics.log_llm_io`` on (a role's ``config`` option), every answer of the model is
  logged on stderr as ``info(agent): llm response ... usage={"prompt_tokens":..,
  "completion_tokens":..,"total_tokens":..} content=...``: each such line is one model call,
  and their ``total_tokens`` add up (prompt plus completion when the total is missing);
* with a usage mode set in its session, its reply ends with a footer
  ``[usage] total_tokens=N`` or ``[usage] prompt=.. completion=.. total=N ...``: read only when
  no stderr line was seen (the two count the same calls).

Pure text handling: it touches nothing but the text it is fed.
"""

from __future__ import annotations

import json
import re

__all__ = ["TokenCount"]

#: One model answer's log line: the usage object comes before the (quoted) content.
_RESPONSE = re.compile(r"\bllm response session=\S+ .*?\busage=(\{[^{}]*\})")
#: The reply's usage footer (its last ``[usage]`` line).
_FOOTER = re.compile(r"^\[usage\] .*?\btotal(?:_tokens)?=(\d+)", re.MULTILINE)


def _tokens(usage: str) -> int:
    try:
        data = json.loads(usage)
    except ValueError:
        return 0
    if not isinstance(data, dict):
        return 0
    total = data.get("total_tokens")
    if isinstance(total, int) and not isinstance(total, bool) and total > 0:
        return total
    parts = [data.get("prompt_tokens"), data.get("completion_tokens")]
    return sum(p for p in parts if isinstance(p, int) and not isinstance(p, bool) and p > 0)


class TokenCount:
    """Fed nullclaw's stderr as it arrives (whole lines are scanned, a partial one is kept for
    the next chunk); :meth:`total` adds the reply's footer when stderr had none."""

    def __init__(self) -> None:
        self._partial = ""
        #: Tokens of the model answers logged on stderr so far.
        self.logged = 0
        #: How many model answers were logged.
        self.calls = 0

    def feed(self, text: str) -> None:
        """Scan the complete lines of ``text`` (stderr, decoded)."""
        lines = (self._partial + text).split("\n")
        self._partial = lines.pop()
        if len(self._partial) > 1 << 20:  # a runaway line: it was no usage line anyway
            self._partial = ""
        for line in lines:
            self._scan(line)

    def _scan(self, line: str) -> None:
        if "llm response" not in line or "usage=" not in line:
            return
        found = _RESPONSE.search(line)
        if found is not None:
            self.calls += 1
            self.logged += _tokens(found.group(1))

    def total(self, stdout_tail: str) -> int:
        """The run's tokens: the logged answers', else the reply footer's (0: none printed)."""
        if self._partial:
            self._scan(self._partial)
            self._partial = ""
        if self.calls:
            return self.logged
        footers = _FOOTER.findall(stdout_tail)
        return int(footers[-1]) if footers else 0
