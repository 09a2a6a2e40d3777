"""What loopwise sends through Temporal, compressed: a run's model calls carry its whole
transcript, so a long agent's history grows with the square of its turns; zlib keeps that
growth several times smaller (a transcript repeats itself).

:data:`DATA_CONVERTER` is Temporal's default converter with :class:`Compressed` as its
payload codec; every client, worker and replayer of loopwise's runs uses it. Payloads of
at most :data:`SMALL` bytes stay as they are (readable in Temporal's UI and CLI), and a
payload without the codec's encoding passes decoding unchanged, so histories written
before it replay.
"""

from __future__ import annotations

import dataclasses
import zlib
from collections.abc import Sequence

from loopwise.errors import missing_extra

try:
    from temporalio.api.common.v1 import Payload
    from temporalio.converter import DataConverter, PayloadCodec
except ImportError as e:
    raise missing_extra("temporal", e, needed_by="loopwise.integrations.temporal") from None

__all__ = ["DATA_CONVERTER", "ENCODING", "SMALL", "Compressed"]

ENCODING = b"binary/zlib"
"""The ``encoding`` metadata of a compressed payload."""
SMALL = 1024
"""Payloads up to this many bytes are not compressed."""


class Compressed(PayloadCodec):
    """Compresses large payloads with zlib; decodes what it compressed."""

    async def encode(self, payloads: Sequence[Payload]) -> list[Payload]:
        """Each payload over :data:`SMALL` bytes, compressed whole (its metadata too)."""
        return [
            Payload(metadata={"encoding": ENCODING}, data=zlib.compress(p.SerializeToString()))
            if len(p.data) > SMALL
            else p
            for p in payloads
        ]

    async def decode(self, payloads: Sequence[Payload]) -> list[Payload]:
        """Each compressed payload as it was; any other as it is."""
        return [
            Payload.FromString(zlib.decompress(p.data))
            if p.metadata.get("encoding") == ENCODING
            else p
            for p in payloads
        ]


DATA_CONVERTER = dataclasses.replace(DataConverter.default, payload_codec=Compressed())
"""The converter of every loopwise client, worker and replayer."""
