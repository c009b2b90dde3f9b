"""The pipeline definitions the evolution tests apply, version by version."""

from __future__ import annotations

from typing import Any


def v1() -> dict[str, Any]:
    """draft (writer) --submit--> review (reviewer) --approve--> done."""
    return {
        "initial": "draft",
        "states": {
            "draft": {"agent_role": "writer"},
            "review": {"agent_role": "reviewer"},
            "done": {"terminal": True},
        },
        "transitions": [
            {"from": "draft", "to": "review", "trigger": "submit"},
            {"from": "review", "to": "done", "trigger": "approve"},
        ],
    }


def renamed() -> dict[str, Any]:
    """v1 with ``review`` renamed ``check`` (same role)."""
    return {
        "initial": "draft",
        "states": {
            "draft": {"agent_role": "writer"},
            "check": {"agent_role": "reviewer"},
            "done": {"terminal": True},
        },
        "transitions": [
            {"from": "draft", "to": "check", "trigger": "submit"},
            {"from": "check", "to": "done", "trigger": "approve"},
        ],
    }


def with_edit() -> dict[str, Any]:
    """v1 plus a stage ``edit`` (role editor) between draft and review, and a way back."""
    return {
        "initial": "draft",
        "states": {
            "draft": {"agent_role": "writer"},
            "edit": {"agent_role": "editor"},
            "review": {"agent_role": "reviewer"},
            "done": {"terminal": True},
        },
        "transitions": [
            {"from": "draft", "to": "edit", "trigger": "submit"},
            {"from": "edit", "to": "review", "trigger": "edited"},
            {"from": "review", "to": "done", "trigger": "approve"},
            {"from": "review", "to": "draft", "trigger": "reject"},
        ],
    }


def sent() -> dict[str, Any]:
    """v1 with the trigger out of ``draft`` renamed ``send`` (the same stages)."""
    definition = v1()
    definition["transitions"][0]["trigger"] = "send"
    return definition
