"""How an MCP tool's annotations become a loopwise effect, gate and taint (see
:mod:`loopwise.integrations.mcp.servers`, whose module docs give the rules), and what the user
says over them for one tool (:class:`Override`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from loopwise.errors import ConfigError
from loopwise.tools.gates import Gate, PolicyFn
from loopwise.tools.tool import Effect

if TYPE_CHECKING:
    from mcp.types import Tool as ListedTool

__all__ = ["Override", "ToolMapping", "map_annotations", "tool_mapping"]


@dataclass(frozen=True, kw_only=True, slots=True)
class Override:
    """What the user says about one tool, over whatever its annotations say.

    Unset fields (``None``) keep the mapped value. An ``irreversible`` tool always has a
    gate: a person's unless ``gate`` names another.
    """

    effect: Effect | str | None = None
    """The tool's effect (``read``, ``write``, ``irreversible``)."""
    gate: Gate | PolicyFn | None = None
    """The gate in front of the tool (see :mod:`loopwise.tools.gates`)."""
    untrusted_output: bool | None = None
    """Whether the tool's output is untrusted (taints later effects)."""
    validators: dict[str, object] = field(default_factory=dict)
    """Allow-list validators by top-level argument: ``{"order_id": IdPattern(r"O-\\d{4}")}``."""


@dataclass(frozen=True, kw_only=True, slots=True)
class ToolMapping:
    """How one MCP tool's annotations became a loopwise effect, gate and taint."""

    server: str
    """The server's name."""
    tool: str
    """The tool's name."""
    hints: dict[str, bool]
    """The annotation hints the server sent (``readOnlyHint``...), as sent."""
    trusted: bool
    """Whether the hints were trusted (``trust_annotations``)."""
    effect: Effect
    """The effect applied."""
    gated: bool
    """Whether the tool has a gate."""
    untrusted_output: bool
    """Whether its output taints later effects."""
    overridden: tuple[str, ...] = ()
    """Which of effect, gate, untrusted_output and validators the user overrode."""

    def describe(self) -> str:
        """One line: the hints, then what they were mapped to and why."""
        hints = ", ".join(f"{k}={str(v).lower()}" for k, v in self.hints.items()) or "no hints"
        if not self.trusted:
            hints += " (server not trusted: hints ignored)"
        applied = [str(self.effect)]
        applied += ["gated"] if self.gated else []
        applied += ["untrusted output"] if self.untrusted_output else []
        overridden = f" [overridden: {', '.join(self.overridden)}]" if self.overridden else ""
        return f"{self.tool}: {hints} -> {', '.join(applied)}{overridden}"


_HINTS = {
    "read_only_hint": "readOnlyHint",
    "destructive_hint": "destructiveHint",
    "idempotent_hint": "idempotentHint",
    "open_world_hint": "openWorldHint",
}


def map_annotations(hints: dict[str, bool], *, trusted: bool) -> tuple[Effect, bool]:
    """The effect and output taint MCP hints (``readOnlyHint``...) map to; see the module docs.

    A server that is not trusted gets the most careful answer whatever it hints.
    """
    if not trusted:
        return Effect.IRREVERSIBLE, True
    untrusted = hints.get("openWorldHint") is not False
    if hints.get("readOnlyHint") is True:
        return Effect.READ, untrusted
    if hints.get("destructiveHint") is False:
        return Effect.WRITE, untrusted
    return Effect.IRREVERSIBLE, untrusted


def tool_mapping(
    server: str, listed: ListedTool, override: Override, *, trusted: bool
) -> ToolMapping:
    """How ``listed``'s annotations map, with the user's ``override`` over them."""
    given = listed.annotations.model_dump() if listed.annotations is not None else {}
    hints = {wire: given[name] for name, wire in _HINTS.items() if given.get(name) is not None}
    effect, untrusted = map_annotations(hints, trusted=trusted)
    declared = {
        "effect": override.effect,
        "gate": override.gate,
        "untrusted_output": override.untrusted_output,
    }
    overridden = [name for name, value in declared.items() if value is not None] + (
        ["validators"] if override.validators else []
    )
    if override.effect is not None:
        try:
            effect = Effect(override.effect)
        except ValueError as e:
            raise ConfigError(
                f"MCP server {server!r}: override of {listed.name!r} has effect "
                f"{override.effect!r}; use read, write or irreversible",
                name=listed.name,
            ) from e
    if override.untrusted_output is not None:
        untrusted = override.untrusted_output
    return ToolMapping(
        server=server,
        tool=listed.name,
        hints=hints,
        trusted=trusted,
        effect=effect,
        gated=override.gate is not None or effect is Effect.IRREVERSIBLE,
        untrusted_output=untrusted,
        overridden=tuple(overridden),
    )
