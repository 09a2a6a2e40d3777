"""Reading runs back (:class:`~loopwise.store.base.RunQueries`) from the SQL run stores."""

from __future__ import annotations

from loopwise.errors import ConversationError
from loopwise.store.base import StoredRun
from loopwise.store.rows import run_row
from loopwise.store.sqlbase import SQLBase

__all__ = ["SQLQueries"]


class SQLQueries(SQLBase):
    """One run, the latest runs, a conversation's runs."""

    def get_run(self, run_id: str) -> StoredRun:
        """The run; :class:`ConfigError` (exit 2 in the CLI) for an unknown id."""
        return run_row(self._run(run_id))

    def list_runs(
        self, *, limit: int = 50, conversation: str | None = None, status: str | None = None
    ) -> list[StoredRun]:
        """The most recent ``limit`` runs, newest first (of ``conversation`` only, when
        given: :class:`ConversationError`, ``unknown``, when it has no run; with
        ``status``, only the runs that have it)."""
        if conversation is None:
            where, params = ("WHERE status = ? ", (status,)) if status is not None else ("", ())
            rows = self._read(
                f"SELECT * FROM runs {where}ORDER BY created_at DESC, "
                f"{self._insertion_order} DESC LIMIT ?",
                (*params, limit),
            )
            return [run_row(r) for r in rows]
        runs = self.conversation_runs(conversation)
        if not runs:
            raise ConversationError(
                f"no conversation {conversation!r} in {self.name}",
                conversation=conversation,
                code="unknown",
            )
        return [r for r in runs[::-1] if status in (None, r.status)][:limit]

    def conversation_runs(self, conversation: str) -> list[StoredRun]:
        """The runs of ``conversation``, first message first (empty when unknown)."""
        rows = self._read(
            "SELECT * FROM runs WHERE conversation = ? ORDER BY turn", (conversation,)
        )
        return [run_row(r) for r in rows]
