"""Tools through the public API: schemas from signatures, allow-lists, effects, invoke."""

from __future__ import annotations

import asyncio
import json
import threading
from decimal import Decimal
from pathlib import Path
from typing import Annotated, Any

import pytest
from pydantic import AfterValidator, BaseModel, Field

import loopwise
from loopwise import (
    Bounds,
    Effect,
    IdPattern,
    InDirectory,
    OneOf,
    Tool,
    ToolArgumentsError,
    ToolError,
    as_tool,
    tool,
)
from loopwise.testing import ScriptedModel, call, reply
from tests.support import strict_mypy_errors


@tool
def get_order(
    order_id: Annotated[str, IdPattern(r"O-\d{4}"), Field(description="The order, like O-1017.")],
    limit: Annotated[int, Bounds(ge=1, le=20)] = 5,
    kind: Annotated[str, OneOf(["payments", "shipments"])] = "payments",
) -> dict[str, Any]:
    """Get one order and its events. Call it when the user names an order.

    Longer text the model does not need.

    Args:
        limit: How many events,
            newest first.
        kind: Which events.
    """
    return {"order_id": order_id, "limit": limit, "kind": kind}


def test_schema_is_built_from_the_signature_and_docstring() -> None:
    fn = get_order.schema["function"]
    assert get_order.name == "get_order" and get_order.effect is Effect.READ
    assert fn["description"] == (
        "Get one order and its events. Call it when the user names an order."
    )
    assert fn["strict"] is True
    params = fn["parameters"]
    assert params["additionalProperties"] is False
    assert set(params["required"]) == {"order_id", "limit", "kind"}
    props = params["properties"]
    assert props["order_id"]["description"] == "The order, like O-1017."
    assert props["order_id"]["pattern"] == r"^O-\d{4}$"
    assert props["limit"]["description"] == "How many events, newest first."
    assert (props["limit"]["minimum"], props["limit"]["maximum"]) == (1, 20)
    assert props["kind"]["enum"] == ["payments", "shipments"]
    assert props["kind"]["description"] == "Which events."


def test_invoke_validates_and_says_exactly_what_is_wrong() -> None:
    assert asyncio.run(get_order.invoke('{"order_id": "O-1017"}'))["limit"] == 5
    cases = {
        '{"order_id": "X-1"}': "'X-1' does not match the id pattern ^O-\\d{4}$",
        '{"order_id": "O-1017", "limit": 99}': "limit: 99 is above the maximum 20",
        '{"order_id": "O-1017", "kind": "all"}': "'all' is not one of the allowed values",
        '{"order_id": "O-1017", "sql": "DROP"}': "sql: unknown argument",
        "{}": "order_id: missing required argument",
        '{"order_id": ': "are not valid JSON",
        "[1]": "must be a JSON object, got list",
    }
    for raw, expected in cases.items():
        with pytest.raises(ToolArgumentsError) as info:
            asyncio.run(get_order.invoke(raw))
        assert expected in str(info.value), raw
        assert info.value.tool == "get_order"


def test_in_directory_resolves_and_confines(tmp_path: Path) -> None:
    root = tmp_path / "docs"
    (root / "a").mkdir(parents=True)
    (tmp_path / "secret.txt").write_text("no")
    (root / "link").symlink_to(tmp_path / "secret.txt")

    # The annotation names ``root``, a local of this function: given as localns.
    @tool(localns=locals())
    def read_doc(path: Annotated[Path, InDirectory(root)]) -> str:
        """Read one document from the docs folder."""
        return str(path)

    assert asyncio.run(read_doc.invoke({"path": "a/b.md"})) == str(root.resolve() / "a/b.md")
    for escape in ("../secret.txt", str(tmp_path / "secret.txt"), "link", "a/../../x"):
        with pytest.raises(ToolArgumentsError, match="outside the allowed directory"):
            asyncio.run(read_doc.invoke({"path": escape}))
    assert (
        "A path inside"
        in read_doc.schema["function"]["parameters"]["properties"]["path"]["description"]
    )


def test_declaration_mistakes_raise_tool_error_naming_the_tool() -> None:
    with pytest.raises(ToolError, match=r"'untyped'.*'x' has no type annotation") as info:

        @tool
        def untyped(x) -> None:  # type: ignore[no-untyped-def]
            """Do nothing."""

    assert info.value.tool == "untyped"
    with pytest.raises(ToolError, match=r"\*args"):

        @tool
        def variadic(*xs: int) -> None:
            """Do nothing."""

    with pytest.raises(ToolError, match="effect 'delete'"):

        @tool(effect="delete")
        def bad_effect() -> None:
            """Do nothing."""


def test_undocumented_tool_is_allowed_with_an_empty_description() -> None:
    @tool
    def bare(n: int) -> int:
        return n

    assert bare.description == "" and "description" not in bare.schema["function"]


def test_sync_tools_run_off_the_loop_and_async_tools_on_it() -> None:
    main = threading.get_ident()

    @tool
    def sync_tool() -> int:
        """Where am I."""
        return threading.get_ident()

    @tool(name="async-tool", effect="write", untrusted_output=True, timeout=5)
    async def async_tool(ctx: loopwise.Context | None = None) -> int:
        """Where am I (async)."""
        return threading.get_ident()

    assert asyncio.run(sync_tool.invoke({})) != main
    assert async_tool.name == "async-tool" and async_tool.effect is Effect.WRITE
    assert async_tool.untrusted_output and async_tool.timeout == 5
    # ``ctx`` is injected, never part of the schema.
    assert async_tool.schema["function"]["parameters"]["properties"] == {}
    assert isinstance(async_tool, Tool) and sync_tool() == main


def test_timeout_is_enforced() -> None:
    @tool(timeout=0.01)
    async def slow() -> None:
        """Never answers in time."""
        await asyncio.Event().wait()

    with pytest.raises(TimeoutError, match=r"'slow' timed out after 0\.01s"):
        asyncio.run(slow.invoke({}))


def test_as_tool_of_an_untyped_step_gives_every_property_a_type() -> None:
    """Strict function schemas reject a property without a type; an untyped step
    (a structured call, a workflow without input_type) takes the model's text."""

    class Summary(BaseModel):
        text: str

    summarize = loopwise.Structured("summarize", Summary, "Summarise.")
    flow = loopwise.Workflow("echo").then(loopwise.step(lambda x: x, name="same"))
    for step in (summarize, flow):
        made = as_tool(step, description="Use it. Call it when needed.")
        params = made.schema["function"]["parameters"]
        assert params["properties"]["input"]["type"] == "string"
        assert made.parse('{"input": "hello"}').input == "hello"  # type: ignore[attr-defined]


def test_tool_options_are_one_checked_set_for_tool_the_decorator_and_as_tool() -> None:
    def refund(order_id: str) -> str:
        """Refund an order."""
        return order_id

    made = tool(refund, effect="write", timeout=5, name="refund_order")
    assert (made.name, made.effect, made.timeout) == ("refund_order", Effect.WRITE, 5)
    with pytest.raises(ToolError, match=r"unknown option 'efect' \(did you mean 'effect'\?\)"):
        tool(refund, efect="write")  # type: ignore[call-overload]
    with pytest.raises(ToolError, match="unknown option 'retries'") as info:
        tool(retries=3)  # type: ignore[call-overload]  # at the decorator's line
    assert info.value.code == "unknown-option"
    flow = loopwise.Workflow("echo").then(loopwise.step(lambda x: x, name="same"))
    with pytest.raises(ToolError, match="unknown option 'gated'") as info:
        as_tool(flow, description="Echo.", gated=True)  # type: ignore[call-arg]
    assert info.value.tool == "echo"


def test_annotations_resolve_from_the_module_and_the_localns_given_only() -> None:
    class Ticket(BaseModel):
        subject: str

    def file_ticket(ticket: Ticket) -> str:
        """File a ticket."""
        return ticket.subject

    # This module says ``from __future__ import annotations``: ``Ticket`` is a string
    # naming a local of this test, which no module namespace holds.
    with pytest.raises(ToolError, match=r"name 'Ticket' is not defined.*localns=") as info:
        tool(file_ticket)
    assert info.value.tool == "file_ticket"
    made = tool(file_ticket, localns={"Ticket": Ticket})
    assert made.parse('{"ticket": {"subject": "late"}}').ticket.subject == "late"  # type: ignore[attr-defined]
    decorated = tool(localns=locals())(file_ticket)
    assert decorated.schema == made.schema


def _argument_error(t: Tool, raw: str) -> str:
    with pytest.raises(ToolArgumentsError) as info:
        t.parse(raw)
    return str(info.value)


def test_id_pattern_matches_ascii_digits_only_unless_unicode_is_asked() -> None:
    @tool
    def loose(order_id: Annotated[str, IdPattern(r"O-\d{4}", unicode=True)]) -> str:
        """Look up an order with any digits."""
        return order_id

    look_alikes = ("O-١٢٣٤", "O-１２３４", "O-𝟏𝟐𝟑𝟒", "O-۱۲۳۴")  # Arabic-Indic, fullwidth, math
    for order_id in look_alikes:
        raw = json.dumps({"order_id": order_id})
        assert "does not match the id pattern" in _argument_error(get_order, raw), order_id
        assert loose.parse(raw).model_dump() == {"order_id": order_id}
    assert get_order.parse({"order_id": "O-1234"}).model_dump()["order_id"] == "O-1234"
    assert repr(IdPattern(r"\w+", unicode=True)) == r"IdPattern('\\w+', unicode=True)"
    with pytest.raises(ToolError, match="not a valid regex"):
        IdPattern(r"O-(\d")


def test_bounds_reject_nan_infinity_and_booleans_and_keep_the_minimum() -> None:
    @tool
    def refund(amount: Annotated[float, Bounds(ge=0, le=100)]) -> float:
        """Refund an amount."""
        return amount

    for raw in ("NaN", "Infinity", "-Infinity", '"nan"', '"inf"', "1e999"):
        message = _argument_error(refund, f'{{"amount": {raw}}}')
        assert "is not a finite number" in message, raw
    assert "is a boolean, not a number" in _argument_error(refund, '{"amount": true}')
    assert "is below the minimum 0" in _argument_error(refund, '{"amount": -5}')
    assert "is above the maximum 100" in _argument_error(refund, '{"amount": 100.5}')
    assert refund.parse('{"amount": 0}').model_dump() == {"amount": 0}
    assert refund.parse('{"amount": 100}').model_dump() == {"amount": 100}
    props = refund.schema["function"]["parameters"]["properties"]["amount"]
    assert (props["minimum"], props["maximum"]) == (0, 100)


def test_one_of_integers_rejects_booleans() -> None:
    @tool
    def pick(level: Annotated[int, OneOf([1, 2])], flag: Annotated[bool, OneOf([True])]) -> int:
        """Pick a level."""
        return level

    for raw in ("true", "false"):
        message = _argument_error(pick, f'{{"level": {raw}, "flag": true}}')
        assert "is a boolean, not one of the allowed values" in message, raw
    assert pick.parse('{"level": 1, "flag": true}').model_dump() == {"level": 1, "flag": True}
    assert pick.schema["function"]["parameters"]["properties"]["level"]["enum"] == [1, 2]


def test_allow_list_mistakes_raise_tool_error_naming_the_helper() -> None:
    mistakes: list[tuple[str, str, Any]] = [
        ("Bounds", "Bounds() needs ge= and/or le=", Bounds),
        ("OneOf", "OneOf() needs at least one allowed value", lambda: OneOf([])),
        ("IdPattern", "IdPattern('O-(\\\\d') is not a valid regex", lambda: IdPattern(r"O-(\d")),
    ]
    for helper, message, declare in mistakes:
        with pytest.raises(ToolError) as info:
            declare()
        assert str(info.value).startswith(message) and info.value.tool == helper


def test_allow_lists_declared_in_a_function_hold_as_at_module_level() -> None:
    # Constraints built here, not at import: one-sided bounds, an ASCII-only pattern
    # written with anchors, and the allowed values named in the error.
    @tool
    def refund(
        order_id: Annotated[str, IdPattern(r"^O-\d{4}$")],
        amount: Annotated[int, Bounds(ge=1)],
        tip: Annotated[Decimal, Bounds(le=5)],
        speed: Annotated[int, OneOf([1, 2])] = 1,
    ) -> str:
        """Refund an order."""
        return order_id

    ok = {"order_id": "O-1234", "amount": 1, "tip": "5"}
    assert refund.parse(ok).model_dump()["amount"] == 1
    props = refund.schema["function"]["parameters"]["properties"]
    assert props["order_id"]["pattern"] == r"^O-\d{4}$"
    assert "maximum" not in props["amount"] and props["amount"]["minimum"] == 1
    assert "minimum" not in props["tip"] and props["tip"]["maximum"] == 5
    cases = {
        "O-١٢٣٤": ("order_id", "'O-١٢٣٤' does not match the id pattern ^O-\\d{4}$"),
        "-5": ("amount", "-5 is below the minimum 1"),
        "NaN": ("tip", "Input should be a finite number"),
        "6": ("tip", "Decimal('6') is above the maximum 5"),
        "3": ("speed", "3 is not one of the allowed values: 1, 2"),
    }
    for raw, (field, expected) in cases.items():
        args = {**ok, field: raw if field in ("order_id", "tip") else int(raw)}
        assert expected in _argument_error(refund, json.dumps(args)), raw
    assert repr(IdPattern(r"\d+")) == r"IdPattern('\\d+')"

    @tool
    def rename(name: Annotated[str, Bounds(le=5)]) -> str:
        """Bounds on text: a declaration slip that must not let anything through."""
        return name

    assert "'abc' is not a finite number" in _argument_error(rename, '{"name": "abc"}')


def test_in_directory_hands_the_tool_the_type_it_asked_for_under_a_linked_root(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = tmp_path / "real"
    (real / "a").mkdir(parents=True)
    (tmp_path / "docs").symlink_to(real)
    monkeypatch.chdir(tmp_path)
    seen: list[Any] = []
    inside = InDirectory("docs")  # relative, through a link: resolved once, when declared
    assert repr(inside) == f"InDirectory({str(real.resolve())!r})"

    @tool(localns=locals())
    def read_doc(
        path: Annotated[Path, InDirectory("docs")],
        also: Annotated[str, InDirectory("docs")] = "a",
    ) -> str:
        """Read documents from the docs folder."""
        seen.extend([path, also])
        return "read"

    monkeypatch.chdir(real / "a")  # relative paths stay relative to the root, not the cwd
    assert asyncio.run(read_doc.invoke({"path": "a/x.md", "also": str(real / "a/y.md")})) == "read"
    assert seen == [real.resolve() / "a/x.md", str(real.resolve() / "a/y.md")]
    props = read_doc.schema["function"]["parameters"]["properties"]
    note = "A path inside the allowed directory, relative to it (it may not leave it)."
    assert props["path"]["description"] == props["also"]["description"] == note
    message = _argument_error(read_doc, json.dumps({"path": "../../x"}))
    assert "outside the allowed directory" in message and str(tmp_path) not in message


class _OwnStep:
    """A user's own step: a name and ``async run``, no function to wrap."""

    name = "lookup_desk"

    async def run(self, input: Any, ctx: Any) -> str:
        return "looked"


@loopwise.step
def _routing_step(text: str) -> str:
    """A plain function made a step: callable, but a step's input is no tool's arguments."""
    return text


@pytest.mark.parametrize(
    "step",
    [loopwise.Agent(name="helper"), loopwise.Workflow("helper"), _OwnStep(), _routing_step],
    ids=["agent", "workflow", "own-step", "function-step"],
)
def test_a_step_given_to_tool_is_told_to_use_as_tool(step: Any) -> None:
    # As an agent's tools= refuses it: one rule for a step, however it is offered.
    with pytest.raises(loopwise.ToolError, match=r"is a step, not a tool.*as_tool\("):
        loopwise.Agent(name="desk", tools=[step])
    for make in (lambda: loopwise.tool(step), lambda: loopwise.tool(effect="read")(step)):
        with pytest.raises(loopwise.ToolError, match=r"is a step.*loopwise\.as_tool\(") as caught:
            make()
        assert caught.value.tool == step.name
    # The public way works: the step as a tool, under its own name.
    assert loopwise.as_tool(step, description="Helps. Call it for help.").name == step.name


def test_a_tool_of_something_that_is_not_a_function_says_so() -> None:
    with pytest.raises(loopwise.ToolError, match="a tool wraps a function, not int") as caught:
        loopwise.tool(42)  # type: ignore[call-overload]
    assert caught.value.tool == "int" and "as_tool" not in str(caught.value)


def test_an_invalid_argument_is_echoed_cut_short() -> None:
    import loopwise
    from loopwise.tools.arguments import ToolArgumentsError

    @loopwise.tool
    def count(n: int) -> int:
        """Count to n."""
        return n

    with pytest.raises(ToolArgumentsError) as caught:
        count.parse({"n": "x" * 100_000})
    assert len(str(caught.value)) < 300 and "…" in str(caught.value)


def test_a_boolean_is_never_read_as_a_number_from_a_model() -> None:
    class Line(BaseModel):
        qty: int
        gift: bool = False

    paid: list[int] = []

    @tool(effect="write", localns=locals())
    def refund(
        amount_cents: int,
        rate: float = 1.0,
        lines: list[Line] | None = None,
        note: Any = None,
        either: int | bool = 0,
    ) -> str:
        """Refund an order."""
        paid.append(amount_cents)
        return "refunded"

    for raw, where in (
        ('{"amount_cents": true}', "amount_cents"),
        ('{"amount_cents": 5, "rate": false}', "rate"),
        ('{"amount_cents": 5, "lines": [{"qty": 1, "gift": true}, {"qty": false}]}', "lines.1.qty"),
    ):
        assert f"{where} is a boolean, not a number" in _argument_error(refund, raw), raw
    # Texts stay lenient; booleans where a boolean may stand are kept as booleans.
    ok = refund.parse('{"amount_cents": "5000", "note": true, "either": true}').model_dump()
    assert ok["amount_cents"] == 5000 and ok["note"] is True and ok["either"] is True

    def respond(request: loopwise.ModelRequest) -> Any:
        results = [m for m in request.messages if m.get("role") == "tool"]
        if results:
            return reply(str(results[-1]["content"]))
        return call("refund", {"amount_cents": True}, id="c1")

    result = loopwise.run(
        loopwise.Agent(name="desk", tools=[refund]),
        "refund it",
        model=ScriptedModel(respond),
        store=None,
    )
    assert paid == [] and "amount_cents is a boolean, not a number" in str(result.output)


def test_a_described_path_parameter_keeps_the_allowed_directory_note(tmp_path: Path) -> None:
    root = str(tmp_path)

    @tool(localns=locals())
    def read(
        doc: Annotated[str, InDirectory(root), Field(description="The file.")],
        kept: Annotated[str, Field(default="a.md", description="Kept."), InDirectory(root)],
        bare: Annotated[str, InDirectory(root)],
        typed: Annotated[str, InDirectory(root)],
        plain: str,
    ) -> str:
        """Read a file.

        Args:
            typed: The other file.
            plain: Anything.
        """
        return doc

    props = read.schema["function"]["parameters"]["properties"]
    note = InDirectory.NOTE
    assert props["doc"]["description"] == f"The file. {note}"
    assert props["kept"]["description"] == f"Kept. {note}"
    assert props["bare"]["description"] == note
    assert props["typed"]["description"] == f"The other file. {note}"
    assert props["plain"]["description"] == "Anything."
    # The hint's own default still stands; the note is only words, the check still holds.
    assert (
        read.parse({"doc": "x", "bare": "y", "typed": "z", "plain": "p"})
        .model_dump()["kept"]
        .endswith("a.md")
    )
    with pytest.raises(ToolArgumentsError, match="outside the allowed directory"):
        read.parse({"doc": "../x", "bare": "y", "typed": "z", "plain": "p"})


def test_a_sync_tool_with_a_timeout_runs_in_a_named_daemon_thread_and_hands_back_its_end() -> None:
    seen: list[threading.Thread] = []

    @tool(timeout=30)
    def lookup(order_id: str, ctx: Any) -> str:
        """Look an order up."""
        seen.append(threading.current_thread())
        if order_id == "boom":
            raise LookupError(f"no order {order_id}")
        return f"{order_id} for {ctx.run_id}"

    def respond(request: loopwise.ModelRequest) -> Any:
        results = [str(m["content"]) for m in request.messages if m.get("role") == "tool"]
        if len(results) == 2:
            return reply(" | ".join(results))
        return call("lookup", {"order_id": "boom" if results else "O-1"}, id=f"c{len(results)}")

    agent = loopwise.Agent(name="desk", tools=[lookup])
    result = loopwise.run(agent, "go", model=ScriptedModel(respond), store=None, run_id="r-7")
    assert result.output.startswith("O-1 for r-7 | ") and "no order boom" in result.output
    assert [t.name for t in seen] == ["loopwise-tool-lookup"] * 2
    assert all(t.daemon for t in seen)  # a hung call holds up neither the run nor the exit


def test_a_tool_with_a_timeout_is_given_the_context_and_perform_refuses_effects_outside() -> None:
    @tool(timeout=30)
    async def whoami(ctx: Any) -> str:
        """Say which run this is."""
        return str(ctx.run_id)

    @tool(effect="write", timeout=30)
    def save(text: str) -> str:
        """Save a text."""
        return text

    ctx = loopwise.Context(run_id="r-9")
    assert asyncio.run(whoami.invoke({}, ctx)) == "r-9"
    assert asyncio.run(whoami.perform(whoami.parse({}), ctx)) == "r-9"
    with pytest.raises(
        loopwise.DirectEffectError, match="perform\\(\\) outside the tool-call"
    ) as e:
        asyncio.run(save.perform(save.parse({"text": "x"}), None))
    assert e.value.tool == "save"
    with pytest.raises(loopwise.DirectEffectError, match="perform\\(\\) outside"):
        asyncio.run(save.perform(save.parse({"text": "x"}), ctx))  # not its call's context


def test_a_read_tool_called_directly_takes_positional_arguments() -> None:
    @tool
    def add(a: int, b: int) -> int:
        """Add two numbers."""
        return a + b

    assert add(2, 3) == 5 and add(2, b=5) == 7


def test_describe_shows_what_check_reads_of_a_tool() -> None:
    @tool(untrusted_output=True)
    def fetch(url: Annotated[str, Field(description="The page.")]) -> str:
        """Fetch a page."""
        return url

    shape = fetch.describe()
    assert shape.untrusted is True and shape.step is None
    assert dict(shape.parameters) == {"url": "The page."}
    inner = loopwise.Agent(name="helper", tools=[fetch])
    wrapped = as_tool(inner, description="Ask the helper.").describe()
    assert wrapped.untrusted is False and wrapped.step is not None
    assert wrapped.step.name == "helper"


def _refusal(t: Tool, raw: Any) -> ToolArgumentsError:
    with pytest.raises(ToolArgumentsError) as info:
        t.parse(raw)
    assert info.value.tool == t.name
    return info.value


def test_unreadable_arguments_are_refused_saying_why_and_naming_the_tool() -> None:
    @tool
    def note(text: str, n: int = 0) -> str:
        """Take a note."""
        return text

    long_bad = "{" + "x" * 299
    shown = str(_refusal(note, long_bad))
    assert "are not valid JSON" in shown and shown.endswith(long_bad[:200] + "…")
    exact = "{" + "y" * 199
    assert str(_refusal(note, exact)).endswith(f": {exact}")
    assert "cannot be read: Exceeds the limit" in str(_refusal(note, '{"n": ' + "9" * 5000 + "}"))
    deep = '{"text": ' + "[" * 5000 + "]" * 5000 + "}"
    assert "cannot be read: they nest too deeply" in str(_refusal(note, deep))
    nested: Any = "x"
    for _ in range(40):
        nested = [nested]
    for raw in ({"text": nested}, json.dumps({"text": nested})):
        assert str(_refusal(note, raw)) == (
            "arguments for 'note' nest deeper than 32 levels; send flatter arguments"
        )
    assert "is not a finite number" in str(_refusal(note, '{"text": "a", "n": NaN}'))
    assert "n is a boolean, not a number" in str(_refusal(note, '{"text": "a", "n": true}'))


def test_a_boolean_sent_for_an_aliased_number_is_refused_too() -> None:
    class Args(BaseModel):
        amount_cents: int = Field(alias="amountCents")
        tags: list[int] = []

    async def pay(args: Args, ctx: Any) -> str:
        return "paid"

    paying = Tool(pay, args_model=Args, description="Pay.")
    assert "amountCents is a boolean" in str(_refusal(paying, {"amountCents": True}))
    assert "tags.1 is a boolean" in str(_refusal(paying, {"amountCents": 1, "tags": [2, False]}))
    assert paying.parse({"amountCents": "5", "tags": ["3"]}).model_dump() == {
        "amount_cents": 5,
        "tags": [3],
    }


def test_declaration_details_a_user_sees_in_the_schema_and_the_errors() -> None:
    def refund(order_id: str) -> str:
        """Refund an order."""
        return order_id

    with pytest.raises(ToolError, match=r"^tool 'refund': unknown option 'efect'"):
        tool(refund, efect="write")  # type: ignore[call-overload]
    with pytest.raises(ToolError, match=r"^@tool\(retries=\.\.\.\): unknown option"):
        tool(retries=3)  # type: ignore[call-overload]

    @tool
    def ship(
        ctx: Any,
        order_id: Annotated[str, Field(description="Its own words.")],
        carrier: str = "post",
    ) -> str:
        """Ship an order.

        More about shipping, for people.

        Args:
            order_id: The docstring's words.
            carrier: Who carries it.
        """
        return f"{order_id} by {carrier}"

    function = ship.schema["function"]
    assert function["description"] == "Ship an order."
    props = function["parameters"]["properties"]
    assert list(props) == ["order_id", "carrier"]  # ctx first: the rest still taken
    assert props["order_id"]["description"] == "Its own words."
    assert props["carrier"]["description"] == "Who carries it."
    assert ship.parse({"order_id": "O-1"}).model_dump() == {"order_id": "O-1", "carrier": "post"}

    class Other(BaseModel):
        order_id: str

    assert ship.parse(Other(order_id="O-2")).model_dump()["order_id"] == "O-2"

    def spread(*names: str) -> str:
        """Take many."""
        return ""

    with pytest.raises(ToolError, match="must be a plain or keyword parameter") as info:
        tool(spread)
    assert info.value.tool == "spread"


def test_direct_calls_of_an_effect_say_how_they_were_made() -> None:
    @tool(effect="write")
    def save(text: str) -> str:
        """Save a text."""
        return text

    with pytest.raises(loopwise.DirectEffectError, match=r"is write: invoke\(\) would skip"):
        asyncio.run(save.invoke({"text": "x"}))
    with pytest.raises(loopwise.DirectEffectError, match="is write: a direct call would skip"):
        save("x")


def test_an_ungated_irreversible_tool_is_refused_with_its_code() -> None:
    @tool(effect="irreversible")
    def wipe() -> str:
        """Wipe everything."""
        return "gone"

    with pytest.raises(ToolError) as info:
        loopwise.Agent(name="a", tools=[wipe])
    assert info.value.code == "ungated-irreversible" and info.value.tool == "wipe"


def test_a_boolean_in_a_set_of_numbers_is_refused_and_other_shapes_are_read_as_sent() -> None:
    class Line(BaseModel):
        qty: int

    def first_only(ids: list[int]) -> list[int]:
        return ids[:1]

    @tool(localns=locals())
    def tag(
        *,
        ids: set[int] = set(),  # noqa: B006
        frozen: frozenset[int] = frozenset(),
        flags: set[int | bool] = set(),  # noqa: B006
        mixed: list[int | str] = [],  # noqa: B006
        line: Line | None = None,
        first: Annotated[list[int], AfterValidator(first_only)] = [],  # noqa: B006
    ) -> str:
        """Tag orders."""
        return "tagged"

    # A set keeps no positions: pydantic read ``true`` as 1 in it and nothing said so.
    for raw, where in (
        ('{"ids": [true]}', "ids.0"),
        ('{"ids": [1, true]}', "ids.1"),
        ('{"frozen": [false]}', "frozen.0"),
        ('{"mixed": ["1", true]}', "mixed.1"),
    ):
        assert _argument_error(tag, raw).endswith(f"{where} is a boolean, not a number"), raw
    # Where a boolean may stand it stays one, beside a number too.
    assert tag.parse('{"flags": [true]}').model_dump()["flags"] == {True}
    assert tag.parse('{"flags": [0, true]}').model_dump()["flags"] == {0, True}
    # An extra key a nested model ignores, and a boolean a user's validator dropped.
    assert tag.parse('{"line": {"qty": 1, "gift": true}}').model_dump()["line"] == {"qty": 1}
    assert tag.parse('{"first": [1, true]}').model_dump()["first"] == [1]


def test_a_list_of_described_paths_keeps_each_description_and_the_note(tmp_path: Path) -> None:
    root = str(tmp_path)

    @tool(localns=locals())
    def read_all(
        paths: list[Annotated[str, Field(description="A file."), InDirectory(root)]],
    ) -> str:
        """Read files."""
        return "read"

    items = read_all.schema["function"]["parameters"]["properties"]["paths"]["items"]
    assert items["description"] == f"A file. {InDirectory.NOTE}"


def test_refusals_name_the_tool_and_say_no_more_than_needed() -> None:
    @tool
    def note(text: str, n: float = 0) -> str:
        """Take a note."""
        return text

    refused = _refusal(note, {"text": "a", "n": float("nan")})
    assert str(refused) == "arguments for 'note': n is not a finite number"
    assert str(_refusal(note, {"n": 1})) == (
        "invalid arguments for 'note': text: missing required argument"
    )
    just_over = "{" + "z" * 200
    assert str(_refusal(note, just_over)).endswith(f": {just_over[:200]}…")


def test_docstring_sections_a_model_reads_as_parameter_descriptions() -> None:
    @tool
    def ship(order_id: str, carrier: str, speed: int = 1) -> str:
        """
        Args:
            These describe the call.
            order_id: The order
                to ship.

            carrier: Who carries it.
            speed: How fast.
        """
        return order_id

    assert ship.description == "" and "description" not in ship.schema["function"]
    props = ship.schema["function"]["parameters"]["properties"]
    assert props["order_id"]["description"] == "The order to ship."
    assert props["carrier"]["description"] == "Who carries it."
    assert props["speed"]["description"] == "How fast."

    @tool(description="Ship it now.")
    def ship_now(order_id: str) -> str:
        """Ship an order (the docstring's words)."""
        return order_id

    assert ship_now.description == "Ship it now."
    assert ship_now.schema["function"]["description"] == "Ship it now."


def test_declaration_errors_say_what_is_wrong_and_name_the_tool() -> None:
    def broken(x: Annotated[int]) -> None:  # type: ignore[valid-type]
        """An annotation Python itself cannot evaluate."""

    with pytest.raises(ToolError, match=r"^tool 'broken': cannot resolve its annotations") as info:
        tool(broken)
    assert info.value.tool == "broken"

    def fine() -> None:
        """Do nothing."""

    cases: list[tuple[dict[str, Any], str, str]] = [
        ({"name": "no spaces!"}, r"^tool name 'no spaces!' must be 1-64 letters", "no spaces!"),
        ({"effect": "delete"}, r"^tool 'fine': effect 'delete' is not one of read", "fine"),
        ({"timeout": 0}, r"^tool 'fine': timeout must be seconds > 0 \(or None\)", "fine"),
    ]
    for options, message, named in cases:
        with pytest.raises(ToolError, match=message) as info:
            tool(fine, **options)
        assert info.value.tool == named, options
    # A name given beside the unknown option names the tool, at the decorator's line too.
    with pytest.raises(ToolError, match=r"^tool 'pay': unknown option 'efect'") as info:
        tool(name="pay", efect="write")  # type: ignore[call-overload]
    assert info.value.tool == "pay"


def test_a_cancelled_run_cancels_an_async_effect_and_sees_no_thread_through() -> None:
    # A coroutine can stop where it is; only a sync effect's thread cannot, and is seen
    # through (test_agent.py). An async write with a timeout is not waited for.
    seen: list[str] = []

    @tool(effect="write", timeout=30)
    async def save(text: str) -> str:
        """Save a text."""
        seen.append("started")
        try:
            await asyncio.sleep(5)
        except asyncio.CancelledError:
            seen.append("cancelled")
            raise
        seen.append("finished")
        return "saved"

    def respond(request: loopwise.ModelRequest) -> Any:
        if any(m.get("role") == "tool" for m in request.messages):
            return reply("saved")
        return call("save", {"text": "x"}, id="c1")

    async def main() -> None:
        agent = loopwise.Agent(name="desk", tools=[save])
        run = loopwise.arun(agent, "go", model=ScriptedModel(respond), store=None)
        task = asyncio.create_task(run)
        while not seen:
            await asyncio.sleep(0.01)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await asyncio.wait_for(task, 2)

    asyncio.run(main())
    assert seen == ["started", "cancelled"]


def test_a_hung_sync_tool_that_ends_after_its_run_is_dropped_quietly(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    release, threads = threading.Event(), []

    @tool(timeout=0.05)
    def hang() -> str:
        """Hang until released."""
        threads.append(threading.current_thread())
        release.wait(10)
        return "late"

    with pytest.raises(TimeoutError, match="'hang' timed out"):
        asyncio.run(hang.invoke({}))
    errors: list[Any] = []
    monkeypatch.setattr(threading, "excepthook", errors.append)
    release.set()  # its loop is closed now: what it returns has nowhere to go
    threads[0].join(10)
    assert not threads[0].is_alive() and errors == []


class _Refund(BaseModel):
    order_id: str
    amount_cents: int


def test_a_step_taking_a_model_is_a_tool_with_that_models_arguments() -> None:
    got: list[Any] = []

    @loopwise.step
    def refund_desk(request: _Refund) -> str:
        got.append(request)
        return f"refunded {request.amount_cents} on {request.order_id}"

    made = as_tool(refund_desk, description="Refund an order. Call it once per order.")
    function = made.schema["function"]
    assert function["description"] == "Refund an order. Call it once per order."
    assert made.description == "Refund an order. Call it once per order."
    assert set(function["parameters"]["properties"]) == {"order_id", "amount_cents"}

    def respond(request: loopwise.ModelRequest) -> Any:
        results = [str(m["content"]) for m in request.messages if m.get("role") == "tool"]
        if results:
            return reply(results[-1])
        return call("refund_desk", {"order_id": "O-1", "amount_cents": 500}, id="c1")

    agent = loopwise.Agent(name="desk", tools=[made])
    result = loopwise.run(agent, "refund O-1", model=ScriptedModel(respond), store=None)
    assert got == [_Refund(order_id="O-1", amount_cents=500)]
    assert "refunded 500 on O-1" in str(result.output)


def test_a_step_taking_text_is_a_tool_of_one_described_input_and_nothing_else() -> None:
    flow = loopwise.Workflow("echo").then(loopwise.step(lambda x: x, name="same"))
    made = as_tool(flow, description="Echo a text.")
    props = made.schema["function"]["parameters"]["properties"]
    assert props["input"]["description"] == "The input of echo."
    assert made.parse('{"input": "a"}').model_dump() == {"input": "a"}
    assert "extra: unknown argument" in _argument_error(made, '{"input": "a", "extra": 1}')


ARGUMENTS_BUILT_IN_CODE = """
import loopwise
from loopwise.testing import ScriptedAgent


@loopwise.tool(effect="write")
def refund(order_id: str, amount: float) -> str:
    return f"refunded {amount} on {order_id}"


args = {"order_id": "O-1", "amount": 40.0}
amounts: dict[str, float] = {"amount": 40.0}


async def node(ctx: loopwise.Context) -> list[object]:
    refund.parse(amounts)
    return await loopwise.call_tools(ctx, [(refund, args)])


final = {"category": "billing", "urgency": "high"}
offline = ScriptedAgent(("refund", args), answer=final)
"""


@pytest.mark.slow  # mypy in a subprocess
def test_arguments_built_before_the_call_type_check(tmp_path: Path) -> None:
    # Arguments built in code are a dict[str, object] or dict[str, float] to a checker: a
    # call's arguments (and a scripted plan's, and its answer) take them, as they did
    # when they were Any, not only JSON literals written in the call.
    errors = strict_mypy_errors(ARGUMENTS_BUILT_IN_CODE, tmp_path / "user_code.py")
    assert not errors, "\n".join(errors)
