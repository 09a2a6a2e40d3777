"""Token and cost accounting: :class:`Usage`, the run :class:`Budget`, and :class:`Pricing`.

Cost is ``None`` (unknown) as soon as one call used a model without a known price:
an unknown cost is never reported as zero.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from loopwise.core.jsontypes import JSONObject
from loopwise.errors import ConfigError

__all__ = ["DEFAULT_PRICES", "Budget", "Price", "Pricing", "Usage"]


@dataclass(frozen=True, kw_only=True, slots=True)
class Price:
    """USD per million tokens."""

    input: float
    """USD per million input (prompt) tokens."""
    output: float
    """USD per million output (completion) tokens."""
    cached_input: float | None = None
    """USD per million input tokens the server read from its prompt cache; ``None``:
    priced as ``input`` (a discount not known is never assumed)."""
    flex: float | None = None
    """What a call served on OpenAI's ``flex`` tier costs, as a share of these prices
    (0.5: half); ``None``: priced as any call (a discount not known is never assumed)."""


DEFAULT_PRICES: Mapping[str, Price] = MappingProxyType(
    {
        "gpt-4o": Price(input=2.50, output=10.00),
        "gpt-4o-mini": Price(input=0.15, output=0.60),
        "gpt-4.1": Price(input=2.00, output=8.00),
        "gpt-4.1-mini": Price(input=0.40, output=1.60),
        "gpt-4.1-nano": Price(input=0.10, output=0.40),
        "gpt-5": Price(input=1.25, output=10.00, flex=0.5),
        "gpt-5-mini": Price(input=0.25, output=2.00, flex=0.5),
        "gpt-5-nano": Price(input=0.05, output=0.40, flex=0.5),
        "o3": Price(input=2.00, output=8.00, flex=0.5),
        "o4-mini": Price(input=1.10, output=4.40, flex=0.5),
        # The offline scripted model costs nothing, and that is known, not guessed.
        "scripted": Price(input=0.0, output=0.0),
    }
)


@dataclass(frozen=True, kw_only=True, slots=True)
class Pricing:
    """The price table: the built-in one, extended or overridden by ``extra``.

    A model name matches exactly, or by its dated snapshot (``gpt-4o-2024-08-06``
    is priced as ``gpt-4o``). Unknown models price as ``default``: ``None`` (cost
    unknown, never zero) unless you give one. A self-hosted model is unknown to the
    table: ``Pricing(extra={"llama-3.1-8b": Price(input=0.05, output=0.05)})`` prices it
    (``loopwise eval --price-per-mtok 0.05,0.05`` does the same for the eval's model).
    """

    extra: Mapping[str, Price] = field(default_factory=dict)
    """Prices that extend or override :data:`DEFAULT_PRICES`."""
    default: Price | None = None
    """The price of a model in neither table (``None``: its cost is unknown)."""

    def price(self, model: str) -> Price | None:
        """The price of ``model``, or ``None`` when it is not known."""
        for table in (self.extra, DEFAULT_PRICES):
            if model in table:
                return table[model]
        base = model.rsplit("/", maxsplit=1)[-1]
        for table in (self.extra, DEFAULT_PRICES):
            matches = [name for name in table if base.startswith(name + "-")]
            if matches:
                return table[max(matches, key=len)]
        return self.default

    def cost(
        self,
        model: str,
        input_tokens: int,
        output_tokens: int,
        cached_tokens: int = 0,
        service_tier: str | None = None,
    ) -> float | None:
        """USD for one call, or ``None`` when the model has no known price.

        ``cached_tokens`` (of ``input_tokens``) are priced at the price's
        ``cached_input`` when it names one; a call the server says it served on the
        ``flex`` tier costs the price's ``flex`` share when it names one.
        """
        price = self.price(model)
        if price is None:
            return None
        cached = min(max(cached_tokens, 0), input_tokens) if price.cached_input is not None else 0
        fresh = (input_tokens - cached) * price.input + cached * (price.cached_input or 0.0)
        share = price.flex if service_tier == "flex" and price.flex is not None else 1.0
        return share * (fresh + output_tokens * price.output) / 1_000_000


@dataclass(kw_only=True, slots=True)
class Usage:
    """What a run (or one step of it) consumed."""

    input_tokens: int = 0
    """Prompt tokens over all model calls."""
    output_tokens: int = 0
    """Completion tokens over all model calls."""
    model_calls: int = 0
    """Model calls made (retries after invalid output count)."""
    tool_calls: int = 0
    """Tool calls executed or answered with an error."""
    cost_usd: float | None = 0.0
    """USD spent; ``None`` once any call had no known price."""
    wall_seconds: float = 0.0
    """Wall-clock seconds of the run."""
    reasoning_tokens: int = 0
    """Of ``output_tokens``, those models spent reasoning (as their servers report)."""
    cached_tokens: int = 0
    """Of ``input_tokens``, those servers read from their prompt cache."""
    shadow: Usage | None = None
    """What shadow runs (:class:`~loopwise.evidence.live.shadow.Shadow`) used besides:
    never counted in this usage's tokens, calls or cost, nor against the run's budget
    (they have their own); ``None`` when no shadow ran."""

    @property
    def total_tokens(self) -> int:
        """Input plus output tokens."""
        return self.input_tokens + self.output_tokens

    def add_call(
        self,
        input_tokens: int,
        output_tokens: int,
        cost_usd: float | None,
        *,
        reasoning_tokens: int = 0,
        cached_tokens: int = 0,
    ) -> None:
        """Count one model call."""
        self.input_tokens += input_tokens
        self.output_tokens += output_tokens
        self.reasoning_tokens += reasoning_tokens
        self.cached_tokens += cached_tokens
        self.model_calls += 1
        if self.cost_usd is not None:
            self.cost_usd = None if cost_usd is None else self.cost_usd + cost_usd

    def add(self, other: Usage) -> None:
        """Add ``other``'s tokens, calls and cost (not its wall time) to this usage."""
        self.input_tokens += other.input_tokens
        self.output_tokens += other.output_tokens
        self.model_calls += other.model_calls
        self.tool_calls += other.tool_calls
        self.reasoning_tokens += other.reasoning_tokens
        self.cached_tokens += other.cached_tokens
        if self.cost_usd is not None:
            self.cost_usd = None if other.cost_usd is None else self.cost_usd + other.cost_usd
        if other.shadow is not None:
            self.add_shadow(other.shadow)

    def add_shadow(self, used: Usage) -> None:
        """Count what a shadow run used, apart (:attr:`shadow`), its wall time included."""
        if self.shadow is None:
            self.shadow = Usage()
        self.shadow.add(used)
        self.shadow.wall_seconds += used.wall_seconds

    def since(self, earlier: Usage) -> Usage:
        """What was used after ``earlier`` (a copy of this usage taken before)."""
        unknown = self.cost_usd is None or earlier.cost_usd is None
        return Usage(
            input_tokens=self.input_tokens - earlier.input_tokens,
            output_tokens=self.output_tokens - earlier.output_tokens,
            model_calls=self.model_calls - earlier.model_calls,
            tool_calls=self.tool_calls - earlier.tool_calls,
            cost_usd=None if unknown else self.cost_usd - earlier.cost_usd,  # type: ignore[operator]
            reasoning_tokens=self.reasoning_tokens - earlier.reasoning_tokens,
            cached_tokens=self.cached_tokens - earlier.cached_tokens,
        )

    def to_dict(self) -> JSONObject:
        """A JSON-ready dict (``total_tokens`` included)."""
        return {
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "total_tokens": self.total_tokens,
            "model_calls": self.model_calls,
            "tool_calls": self.tool_calls,
            "cost_usd": self.cost_usd,
            "wall_seconds": round(self.wall_seconds, 6),
            # Only when a server reported them: a Chat Completions run's usage is unchanged.
            **({"reasoning_tokens": self.reasoning_tokens} if self.reasoning_tokens else {}),
            **({"cached_tokens": self.cached_tokens} if self.cached_tokens else {}),
            **({"shadow": self.shadow.to_dict()} if self.shadow is not None else {}),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, object]) -> Usage:
        """The inverse of :meth:`to_dict`."""
        cost, shadow = data.get("cost_usd"), data.get("shadow")
        return cls(
            input_tokens=int(data.get("input_tokens", 0)),  # type: ignore[call-overload]
            output_tokens=int(data.get("output_tokens", 0)),  # type: ignore[call-overload]
            model_calls=int(data.get("model_calls", 0)),  # type: ignore[call-overload]
            tool_calls=int(data.get("tool_calls", 0)),  # type: ignore[call-overload]
            cost_usd=None if cost is None else float(cost),  # type: ignore[arg-type]
            wall_seconds=float(data.get("wall_seconds", 0.0)),  # type: ignore[arg-type]
            reasoning_tokens=int(data.get("reasoning_tokens", 0)),  # type: ignore[call-overload]
            cached_tokens=int(data.get("cached_tokens", 0)),  # type: ignore[call-overload]
            shadow=Usage.from_dict(shadow) if isinstance(shadow, Mapping) else None,
        )


@dataclass(frozen=True, kw_only=True, slots=True)
class Budget:
    """Limits for a whole run, shared by every nested step and parallel branch.

    ``None`` means no limit. Checked before each model call: a call whose prompt
    alone would cross ``max_tokens`` is not made.
    """

    max_tokens: int | None = None
    """Total (input + output) tokens for the run."""
    max_cost_usd: float | None = None
    """USD for the run. A call whose cost is unknown (no price for its model) breaks it:
    a cap that cannot be checked is not kept silently (add the price to :class:`Pricing`)."""
    max_seconds: float | None = None
    """Wall-clock seconds for the run."""

    def __post_init__(self) -> None:
        """Raise :class:`~loopwise.errors.ConfigError` naming a limit that is not a number >= 0."""
        limits = (
            ("max_tokens", self.max_tokens),
            ("max_cost_usd", self.max_cost_usd),
            ("max_seconds", self.max_seconds),
        )
        for name, value in limits:
            if value is None:
                continue
            number = isinstance(value, int | float) and not isinstance(value, bool)
            if name == "max_tokens" and not isinstance(value, int):
                number = False
            if not number or math.isnan(value) or value < 0:
                kind = "a whole number" if name == "max_tokens" else "a number"
                raise ConfigError(
                    f"Budget.{name} must be {kind} >= 0 (or None for no limit), not {value!r}",
                    name=name,
                )

    def merged(self, override: Budget | None) -> Budget:
        """This budget with every limit ``override`` sets taking precedence."""
        if override is None:
            return self
        return Budget(
            max_tokens=override.max_tokens if override.max_tokens is not None else self.max_tokens,
            max_cost_usd=(
                override.max_cost_usd if override.max_cost_usd is not None else self.max_cost_usd
            ),
            max_seconds=(
                override.max_seconds if override.max_seconds is not None else self.max_seconds
            ),
        )

    def exceeded_by(self, usage: Usage, *, pending_tokens: int = 0) -> str | None:
        """Why ``usage`` (plus a prompt of ``pending_tokens``) breaks this budget, or ``None``."""
        tokens = usage.total_tokens + pending_tokens
        if self.max_tokens is not None and tokens > self.max_tokens:
            if pending_tokens:
                # Say which part is an estimate: the call was not made.
                return (
                    f"tokens {usage.total_tokens} used + ~{pending_tokens} for the next prompt "
                    f"> max_tokens {self.max_tokens}"
                )
            return f"tokens {tokens} > max_tokens {self.max_tokens}"
        cost = usage.cost_usd
        if self.max_cost_usd is not None and cost is None and usage.model_calls:
            return (
                f"cost unknown (a model without a price) with max_cost_usd ${self.max_cost_usd}: "
                "add its price with Pricing(extra=...), or drop the USD limit"
            )
        if self.max_cost_usd is not None and cost is not None and cost > self.max_cost_usd:
            return f"cost ${cost:.6f} > max_cost_usd ${self.max_cost_usd}"
        # A shadow's time is its own (it has its own budget): never the run's.
        wall = usage.wall_seconds - (usage.shadow.wall_seconds if usage.shadow else 0.0)
        if self.max_seconds is not None and wall > self.max_seconds:
            return f"wall {wall:.2f}s > max_seconds {self.max_seconds}"
        return None
