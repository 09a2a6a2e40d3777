"""The eval history of the SQL run stores (:class:`~loopwise.store.base.EvalHistory`)."""

from __future__ import annotations

from collections.abc import Mapping

from loopwise.core.jsontypes import JSONMapping, JSONObject, json_object
from loopwise.store.rows import from_json, to_json
from loopwise.store.sqlbase import SQLBase

__all__ = ["SQLEvalHistory"]


class SQLEvalHistory(SQLBase):
    """Each eval's summary per target, and the newest one before a date."""

    def save_eval(
        self,
        eval_id: str,
        *,
        dataset: str,
        created_at: str,
        summaries: Mapping[str, JSONMapping],
    ) -> None:
        """Keep an eval's summary per target in ``eval_results``, in one transaction."""
        self._write(
            [
                (
                    "INSERT INTO eval_results VALUES (?, ?, ?, ?, ?)",
                    (eval_id, target, dataset, created_at, to_json(summary)),
                )
                for target, summary in summaries.items()
            ]
        )

    def last_eval(
        self, target: str, *, dataset: str | None, before: str, model: str | None = None,
        having: str | None = None,
    ) -> JSONObject | None:  # fmt: skip
        """The newest summary of ``target`` on ``dataset`` (``None``: any) from an eval no
        later than ``before``; given ``model`` or ``having``, the newest whose summary
        names that model or holds that key."""
        # The model lives in the summary (no column: the history stays schema-compatible);
        # a target's evals are few, so reading them newest first is cheap.
        where = "target = ? AND created_at <= ?" + ("" if dataset is None else " AND dataset = ?")
        rows = self._read(
            f"SELECT created_at, eval_id, summary FROM eval_results WHERE {where} "
            "ORDER BY created_at DESC",
            (target, before) if dataset is None else (target, before, dataset),
        )
        for row in rows:
            summary = json_object(from_json(row["summary"]))
            if model in (None, summary.get("model")) and having in (None, *summary):
                return {"created_at": row["created_at"], "eval_id": row["eval_id"], **summary}
        return None
