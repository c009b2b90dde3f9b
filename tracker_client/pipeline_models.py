"""The answer of ``pipeline apply`` and ``pipeline diff``: what a new definition changes.

A pipeline's definition evolves by versions (docs/operate/pipelines.md): an apply that changes
something stores a new version, moves the tasks of renamed or removed stages (its ``moves``),
brings waiting tasks to the new version and leaves running ones to finish under their own. A
diff answers the same :class:`PipelinePlan` without writing.

Pure data (pydantic only), so the seam, the served rail and the remote client share it.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["PipelineApplyBody", "PipelinePlan"]


class PipelinePlan(BaseModel):
    """What applying a definition does (``applied``: did it), or would do (a diff)."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    #: The pipeline's name (the file's).
    name: str
    #: Its id; None when the apply would create it (a diff of a new pipeline).
    pipeline_id: str | None = None
    #: The apply creates the pipeline (version 1).
    created: bool = False
    #: The definition is the current one and every move was applied before: nothing to do.
    unchanged: bool = False
    #: The apply wrote it (False for a diff, and for an unchanged apply).
    applied: bool = False
    #: The current version before the apply (None: no pipeline yet).
    from_version: int | None = None
    #: The version after the apply (the current one when unchanged).
    version: int = 1
    stages_added: list[str] = Field(default_factory=list)
    stages_removed: list[str] = Field(default_factory=list)
    #: One line per changed stage: ``"review: agent_role 'a' -> 'b'"``.
    stages_changed: list[str] = Field(default_factory=list)
    #: Transitions as ``from:trigger:to``.
    transitions_added: list[str] = Field(default_factory=list)
    transitions_removed: list[str] = Field(default_factory=list)
    #: One line per changed top-level setting (``retry``, ``initial``, ...).
    settings_changed: list[str] = Field(default_factory=list)
    #: The stage moves of this apply (old stage -> new stage).
    moves: dict[str, str] = Field(default_factory=dict)
    #: Per moved stage, how many of its tasks move now (running ones move when their run ends).
    tasks_moving: dict[str, int] = Field(default_factory=dict)
    #: Tasks not running that are brought to the new version now.
    tasks_updated: int = 0
    #: Running tasks that finish under the version they were claimed with.
    tasks_running: int = 0

    def changes(self) -> list[str]:
        """Every change as one short line, in a stable order (empty: unchanged)."""
        out: list[str] = []
        for label, items in (
            ("stage added", self.stages_added),
            ("stage removed", self.stages_removed),
            ("stage changed", self.stages_changed),
            ("transition added", self.transitions_added),
            ("transition removed", self.transitions_removed),
            ("setting changed", self.settings_changed),
        ):
            out += [f"{label}: {item}" for item in items]
        for old, new in self.moves.items():
            out.append(f"move: {old} -> {new} ({self.tasks_moving.get(old, 0)} task(s) now)")
        return out


class PipelineApplyBody(BaseModel):
    """``POST /pipelines/apply`` and ``/pipelines/diff``: a named definition and its moves."""

    model_config = ConfigDict(extra="forbid")

    name: str
    definition: dict[str, Any]
    #: Old stage -> stage of the new definition, for the tasks of stages it removes.
    moves: dict[str, str] | None = None
