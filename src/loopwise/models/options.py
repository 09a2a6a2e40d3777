"""What every call of an :class:`~loopwise.models.openai.OpenAIModel` sends besides its
request: :class:`OpenAIOptions`, checked when built.

Each option is a parameter of OpenAI's Chat Completions and Responses APIs, sent the same
on both (servers that do not know one may refuse it: leave it unset for them).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Literal, get_args

from loopwise.core.jsontypes import JSONObject
from loopwise.errors import ConfigError
from loopwise.models.port import ModelRequest

__all__ = [
    "PER_STEP",
    "SERVICE_TIERS",
    "OpenAIOptions",
    "SentOptions",
    "ServiceTier",
    "cache_key_for",
]

ServiceTier = Literal["auto", "default", "flex", "priority"]
"""How OpenAI serves a call: ``flex`` is slower and half the price (an offline eval's
tier), ``priority`` faster and dearer, ``auto``/``default`` the project's setting."""

SERVICE_TIERS: tuple[ServiceTier, ...] = get_args(ServiceTier)

PER_STEP = "per-step"
"""``prompt_cache_key=PER_STEP``: a stable key per step (:func:`cache_key_for`), sent to
any server."""


@dataclass(frozen=True, kw_only=True, slots=True)
class OpenAIOptions:
    """Per-model call options (``OpenAIModel(name, options=OpenAIOptions(...))``).

    Raises :class:`~loopwise.errors.ConfigError` naming the option when one is out of range.
    """

    max_output_tokens: int | None = None
    """The output-token limit of a call whose request sets none (``None``: the server's)."""
    retry_cut_off: int | None = None
    """When an answer is cut off at ``max_output_tokens`` (the limit set here, not a
    request's own), ask once more allowing this many output tokens; both calls are counted.
    ``None``: a cut-off answer ends the turn (an agent's run ends ``invalid_output``)."""
    prompt_cache_key: str | None = None
    """The name the server caches these calls' common prefix under (``prompt_cache_key``):
    a key of your own, ``"per-step"`` (:data:`PER_STEP`: one per step, from its
    instructions and tools, :func:`cache_key_for`), or ``""`` for none. ``None`` (the
    default): per step on OpenAI's own API (``https://api.openai.com/``), none elsewhere,
    as some compatible servers refuse a parameter they do not know."""
    service_tier: ServiceTier | None = None
    """OpenAI's ``service_tier`` (``flex`` for an offline eval); ``None`` sends none."""
    background: bool = False
    """Responses API with ``store=True`` only: post each call in background mode and poll
    it every ``poll_seconds`` until done (:mod:`loopwise.models.background`), for calls
    that may outlast an HTTP timeout; its text is not streamed."""
    poll_seconds: float = 2.0
    """How often a background call is polled."""

    def __post_init__(self) -> None:
        for name, value in (
            ("max_output_tokens", self.max_output_tokens),
            ("retry_cut_off", self.retry_cut_off),
        ):
            if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
                raise ConfigError(f"{name} must be a whole number, not {value!r}", name=name)
            if value is not None and value < 1:
                raise ConfigError(f"{name} must be at least 1, not {value}", name=name)
        more, limit = self.retry_cut_off, self.max_output_tokens
        if more is not None and (limit is None or more <= limit):
            raise ConfigError(
                f"retry_cut_off ({more}) must be more than max_output_tokens ({limit}): "
                "the retry is the same call with more room",
                name="retry_cut_off",
            )
        if self.service_tier is not None and self.service_tier not in SERVICE_TIERS:
            raise ConfigError(
                f"service_tier: unknown tier {self.service_tier!r}; known: "
                f"{', '.join(SERVICE_TIERS)}",
                name="service_tier",
            )
        poll = self.poll_seconds
        if isinstance(poll, bool) or not isinstance(poll, int | float) or not poll > 0:
            raise ConfigError(
                f"poll_seconds must be a number above 0, not {poll!r}", name="poll_seconds"
            )
        if self.prompt_cache_key is not None and len(self.prompt_cache_key) > 64:
            raise ConfigError(
                "prompt_cache_key is longer than 64 characters (OpenAI's limit)",
                name="prompt_cache_key",
            )


def cache_key_for(first: str, tools: object) -> str:
    """A stable cache key for calls that begin alike: the instructions (or first message)
    and the tool list, hashed (``lw-`` and 24 hex digits), so every run of one step shares
    its cache and two steps never share one by accident."""
    material = f"{first}\x00{tools!r}".encode()
    return "lw-" + hashlib.sha256(material).hexdigest()[:24]


_OPENAI_API = "https://api.openai.com/"


class SentOptions:
    """What a model's calls send of its :class:`OpenAIOptions` (and of the run's
    ``safety_identifier``), the per-step cache key remembered while a run's calls bring
    the same first message and tools back, as they do every turn."""

    def __init__(self, options: OpenAIOptions) -> None:
        self.options = options
        self._known: tuple[object, object, str] | None = None

    def of(self, request: ModelRequest, base_url: str) -> JSONObject:
        """The options a call to ``base_url`` sends, in the order both APIs' ``create``
        sends them."""
        sent: JSONObject = {}
        if self.options.service_tier is not None:
            sent["service_tier"] = self.options.service_tier
        if self.options.background:
            sent["background"] = True
        key = self.options.prompt_cache_key
        if key is None:
            # By default only OpenAI's own API is sent the key: some compatible servers
            # refuse a parameter they do not know (PER_STEP asks for it anywhere).
            key = PER_STEP if base_url.startswith(_OPENAI_API) else ""
        if key == PER_STEP:
            key = self._per_step(request) if request.messages else ""
        if key:
            sent["prompt_cache_key"] = key
        if request.safety_identifier is not None:
            sent["safety_identifier"] = request.safety_identifier
        return sent

    def _per_step(self, request: ModelRequest) -> str:
        first, tools = request.messages[0], request.tools
        known = self._known
        if known is None or known[0] is not first or known[1] is not tools:
            key = cache_key_for(str(first.get("content")), tools)
            known = self._known = (first, tools, key)
        return known[2]
