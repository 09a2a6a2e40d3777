"""Live cases in the SQL stores: the ``live_cases`` table, written as an event's side
effect (:func:`~loopwise.store.rows.live_row`) and read back by :class:`LiveBook` (the
:class:`~loopwise.store.base.LiveEvidence` role).

A live case is kept by the event that carries it (a ``step_finished`` whose data holds
``live``: a :class:`~loopwise.evidence.live.shadow.Shadow`'s pair, a person's decision),
in the same transaction as the event, with the run's target read from its ``runs`` row.
``PRIMARY KEY (run_id, key)`` and ``ON CONFLICT DO NOTHING`` keep one case per journal
key however often the run is resumed and whichever worker runs it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from loopwise.store.base import LiveCase
from loopwise.store.rows import from_json

__all__ = ["LiveBook"]


def _case(row: Mapping[str, Any]) -> LiveCase:
    agree = row["agree"]
    return LiveCase(
        run_id=row["run_id"],
        key=row["key"],
        target=row["target"],
        kind=row["kind"],
        step=row["step"],
        input=from_json(row["input"]),
        output=from_json(row["output"]),
        reference=from_json(row["reference"]),
        agree=None if agree is None else bool(agree),
        status=row["status"],
        detail=row["detail"],
        created_at=row["created_at"],
    )


class LiveBook:
    """The :class:`~loopwise.store.base.LiveEvidence` role of a SQL store, which supplies
    :meth:`_read` and :attr:`_eval_mark` (:class:`~loopwise.store.sql.SQLStore` does)."""

    _eval_mark = "NULL"
    """SQL for a run's eval mark (the store's dialect)."""

    def _read(self, sql: str, params: tuple[object, ...] = ()) -> list[Mapping[str, Any]]:
        """Rows of one query, after what the store groups is committed."""
        raise NotImplementedError

    def live_targets(self) -> list[str]:
        """Every target that has live cases, as recorded."""
        rows = self._read("SELECT DISTINCT target FROM live_cases ORDER BY target")
        return [str(r["target"]) for r in rows]

    def live_cases(
        self, targets: Sequence[str], *, since: str | None = None, kind: str | None = None
    ) -> list[LiveCase]:
        """The live cases of any of ``targets``, oldest first (see
        :meth:`~loopwise.store.base.LiveEvidence.live_cases`)."""
        if not targets:
            return []
        where = [
            f"target IN ({', '.join('?' for _ in targets)})",
            f"run_id NOT IN (SELECT id FROM runs WHERE {self._eval_mark} IS NOT NULL)",
        ]
        params: list[object] = list(targets)
        if since is not None:
            where.append("created_at >= ?")
            params.append(since)
        if kind is not None:
            where.append("kind = ?")
            params.append(kind)
        order = "ORDER BY created_at, run_id, key"
        sql = f"SELECT * FROM live_cases WHERE {' AND '.join(where)} {order}"
        rows = self._read(sql, tuple(params))
        return [_case(r) for r in rows]
