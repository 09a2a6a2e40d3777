"""The README's tables say what the code does: each row of the guardrails, check codes and
decide tables is run against the library, and a code or rule the table leaves out fails."""

from __future__ import annotations

import re
import textwrap
from pathlib import Path
from typing import Any, Literal

import pytest
from pydantic import BaseModel

import loopwise
from loopwise import Agent, Budget, LoopDetection, Status, Workflow, check, decide, tool
from loopwise.core.shape import Kind, Limits, Shape, ToolShape
from loopwise.errors import ToolError
from loopwise.testing import ScriptedModel, call, refuse, reply
from tests.support import ROOT

# The README and the docs it sends readers to: the tables live in docs/ now.
README = "\n".join(
    p.read_text() for p in [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
)


def table(header: str) -> list[list[str]]:
    """The rows of the README table whose header line starts with ``header``."""
    start = README.index(header)
    rows = []
    for line in README[start:].splitlines()[2:]:
        if not line.startswith("|"):
            break
        rows.append([cell.strip() for cell in line.strip().strip("|").split("|")])
    assert rows, f"no table under {header!r}"
    return rows


def ticked(cell: str) -> list[str]:
    return re.findall(r"`([^`]+)`", cell)


# --- guardrails -----------------------------------------------------------------------


@tool
def lookup(n: int) -> str:
    """Look a number up. Call it for every number."""
    return f"n{n}"


@tool
def broken(n: int) -> str:
    """Fails every time. Call it to see it fail."""
    raise RuntimeError("down")


def _agent(**settings: Any) -> Agent:
    return Agent(name="guarded", tools=[lookup, broken], **settings)


def _endless(request: Any) -> Any:
    return call("lookup", {"n": len(request.messages)})


GUARDRAILS: dict[str, Any] = {
    "step_limit": lambda: loopwise.run(_agent(), "?", model=ScriptedModel(_endless)),
    "budget_exceeded": lambda: loopwise.run(
        _agent(budget=Budget(max_tokens=150)), "?", model=ScriptedModel(_endless)
    ),
    "the loop goes on": lambda: loopwise.run(
        _agent(),
        "?",
        model=ScriptedModel([call("broken", {"n": 1}), call("nope", {}), reply("ok")]),
    ),
    "tool_failed": lambda: loopwise.run(
        _agent(), "?", model=ScriptedModel([call("broken", {"n": i}) for i in range(3)])
    ),
    "stuck": lambda: loopwise.run(
        _agent(), "?", model=ScriptedModel([call("lookup", {"n": 1})] * 3)
    ),
    "refused": lambda: loopwise.run(_agent(), "?", model=ScriptedModel([refuse()])),
    "ToolError": lambda: Agent(name="bad", tools=[tool(effect="irreversible")(_irreversible)]),
}


def _irreversible(n: int) -> str:
    """Delete a thing for good. Call it never."""
    return "gone"


def test_the_guardrails_table_matches_the_defaults_and_the_statuses() -> None:
    rows = table("| guardrail | setting | status |")
    outcomes = {}
    for _, setting, status in rows:
        settings = [t.split("=", 1) for t in ticked(setting) if re.match(r"^\w+=[^.]*$", t)]
        for name, value in settings:
            default = getattr(Agent(name="d"), name)
            assert default == eval(value, {"LoopDetection": LoopDetection}), (name, value)
        names = ticked(status)
        outcomes[names[0] if names else status] = status
    assert set(outcomes) == set(GUARDRAILS), "a guardrail row was added or removed"
    for key, scenario in GUARDRAILS.items():
        if key == "ToolError":
            with pytest.raises(ToolError, match="gate"):
                scenario()
            continue
        result = scenario()
        expected = Status.COMPLETED if key == "the loop goes on" else Status(key)
        assert result.status == expected, (key, result.detail)


# --- check codes ----------------------------------------------------------------------


class _Hand:
    """A hand-rolled step that says what it is."""

    def __init__(self, shape: Shape) -> None:
        self.name = shape.name
        self._shape = shape

    def describe(self) -> Shape:
        return self._shape

    async def run(self, input: Any, ctx: Any) -> Any:
        return None


def _shape(*tools: ToolShape, max_steps: int | None = 5, budget: Budget | None = None) -> _Hand:
    limits = Limits(max_steps=max_steps, budget=budget or Budget(max_tokens=1000))
    return _Hand(Shape(kind=Kind.AGENT, name="hand", tools=tools, limits=limits))


def _tool(name: str, description: str = "Look it up. Call it when asked.", **kw: Any) -> ToolShape:
    fields: dict[str, Any] = {"effect": "read", "gated": False, "untrusted": False}
    fields.update(kw)
    return ToolShape(name=name, description=description, parameters={"q": "the query"}, **fields)


class Kind3(BaseModel):
    category: Literal["a", "b"]


def _route_gap() -> Workflow:
    @loopwise.step
    def classify(x: dict[str, Any]) -> Kind3:
        return Kind3(category="a")

    @loopwise.step
    def handle(k: Kind3) -> str:
        return "a"

    flow = Workflow("routes", input_type=dict)
    flow.add("classify", classify)
    flow.add_route("by", "category", {"a": "handle"}, after=["classify"])
    flow.add("handle", handle)
    return flow


def _type_mismatch() -> Workflow:
    @loopwise.step
    def number(x: dict[str, Any]) -> int:
        return 1

    @loopwise.step
    def needs_text(t: Kind3) -> str:
        return "x"

    flow = Workflow("typed", input_type=dict)
    flow.add("number", number)
    flow.add("needs_text", needs_text, after=["number"])
    return flow


CHECKED: dict[str, Any] = {
    "ungated-irreversible": lambda: _shape(_tool("wipe", effect="irreversible")),
    "no-step-limit": lambda: _shape(_tool("look"), max_steps=None),
    "graph": _type_mismatch,
    "non-exhaustive-route": _route_gap,
    "no-budget": lambda: _shape(_tool("look"), budget=Budget()),
    "large-step-limit": lambda: _shape(_tool("look"), max_steps=51),
    "tool-no-description": lambda: _shape(_tool("look", "")),
    "tool-description-short": lambda: _shape(_tool("look", "Looks.")),
    "tool-description-when": lambda: _shape(_tool("look", "Look the order up by its number.")),
    "param-no-description": lambda: _shape(
        ToolShape(
            name="look",
            description="Look it up. Call it when asked.",
            effect="read",
            gated=False,
            untrusted=False,
            parameters={"q": None},
        )
    ),
    "near-duplicate-tools": lambda: _shape(_tool("get_order"), _tool("get_orders")),
    "too-many-tools": lambda: _shape(
        *(
            _tool(f"tool_{i}", f"Tool number {i} of the {'x' * i} set. Call it when {i}.")
            for i in range(13)
        )
    ),
    "untrusted-beside-write": lambda: _shape(
        _tool("read_mail", untrusted=True),
        _tool("add_note", "Note it. Call it after.", effect="write"),
    ),
    "tool-no-effect": lambda: _shape(_tool("look", effect=None)),
    "tool-origin": lambda: _shape(_tool("look", origin="MCP server 'x': look -> read")),
    "tool-left-out": lambda: _shape(_tool("look", left_out=("bad-name: not a valid name",))),
}

DECLARATION = """
from loopwise import Agent

broken = Agent(name="x", max_steps=-1)
"""


def test_the_check_codes_table_matches_what_check_finds(tmp_path: Path) -> None:
    rows = table("| code | level | what |")
    documented = {code: cells[1] for cells in rows for code in ticked(cells[0])}
    emitted = set(re.findall(r'_(?:error|warning)\(\s*"([a-z-]+)"', _source("evidence/check.py")))
    emitted |= set(re.findall(r'code="([a-z-]+)"', _source("evidence/check.py")))
    assert emitted - set(documented) == set(), "a check code is missing from the README table"
    assert set(documented) == set(CHECKED) | {"declaration"}
    for code, build in CHECKED.items():
        found = {(f.code, str(f.level)) for f in check(build())}
        assert (code, documented[code]) in found, (code, found)
    module = tmp_path / "declared.py"
    module.write_text(textwrap.dedent(DECLARATION))
    from loopwise.cli.check import check_target
    from loopwise.evidence.check import Level

    (finding,) = check_target(f"{module}:broken")
    assert (finding.code, finding.level) == ("declaration", Level(documented["declaration"]))


def _source(name: str) -> str:
    return (ROOT / "src" / "loopwise" / name).read_text()


def test_near_duplicate_descriptions_are_judged_as_the_readme_says() -> None:
    same = "Look up the order of a customer by number. Call it when asked."
    close = "Look up the order of a customer by number. Call it when told."
    loose = "Fetch the latest shipment event of a parcel. Call it when a parcel is late."
    codes = {f.code for f in check(_shape(_tool("alpha", same), _tool("omega", close)))}
    assert "near-duplicate-tools" in codes
    codes = {f.code for f in check(_shape(_tool("alpha", same), _tool("omega", loose)))}
    assert "near-duplicate-tools" not in codes


# --- decide rules ---------------------------------------------------------------------


def test_the_decide_table_is_the_rule() -> None:
    rows = table("| steps known | wrong step | → | because |")
    assert len(rows) == 6
    for known, cost, arrow, _ in rows:
        assert decide(known, cost).architecture == arrow, (known, cost)
    assert {(r[0], r[1]) for r in rows} == {
        (k, c) for k in ("yes", "no", "partly") for c in ("cheap", "expensive")
    }


def test_decide_volume_and_latency_thresholds_are_as_written() -> None:
    flat = " ".join(README.split())
    assert "≥ 10,000 counts as high" in flat and "< 5 counts as tight" in flat
    assert decide("no", "cheap", volume=10_000).cautions
    assert not decide("no", "cheap", volume=9_999).cautions
    assert decide("no", "cheap", latency_seconds=4.9).cautions
    assert not decide("no", "cheap", latency_seconds=5).cautions
    # They only add cautions: the architecture stays the two questions' answer.
    assert decide("no", "cheap", volume=10**6, latency_seconds=1).architecture == "agent"


def test_every_status_the_readme_names_is_a_status() -> None:
    named = set(re.findall(r"`([a-z_]+)`", README)) & {
        "completed",
        "step_limit",
        "budget_exceeded",
        "tool_failed",
        "stuck",
        "invalid_output",
        "refused",
        "awaiting_approval",
        "denied",
        "error",
        "cancelled",
    }
    assert named == {s.value for s in Status}
