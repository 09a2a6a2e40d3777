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
        self,
        *,
        limit: int = 50,
        conversation: str | None = None,
        status: str | None = None,
        target: str | None = None,
        since: str | None = None,
    ) -> list[StoredRun]:
        """The most recent ``limit`` runs, newest first (of ``conversation`` only, when
        given: :class:`ConversationError`, ``unknown``, when it has no run; with
        ``status``, only the runs that have it; with ``target``, the runs whose spec or
        step name it is; with ``since``, an ISO-8601 UTC instant, those created then or
        later)."""
        if conversation is None:
            clauses: list[str] = []
            params: list[str] = []
            if status is not None:
                clauses.append("status = ?")
                params.append(status)
            if target is not None:
                clauses.append("(spec = ? OR target = ?)")
                params += [target, target]
            if since is not None:
                clauses.append("created_at >= ?")
                params.append(since)
            where = f"WHERE {' AND '.join(clauses)} " if clauses else ""
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
        return [
            r
            for r in runs[::-1]
            if status in (None, r.status)
            and target in (None, r.spec, r.target)
            and (since is None or r.created_at >= since)
        ][:limit]

    def conversation_runs(self, conversation: str) -> list[StoredRun]:
        """The runs of ``conversation``, first message first (empty when unknown)."""
        rows = self._read(
            "SELECT * FROM runs WHERE conversation = ? ORDER BY turn", (conversation,)
        )
        return [run_row(r) for r in rows]
