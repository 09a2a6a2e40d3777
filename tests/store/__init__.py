"""Tests of loopwise.store: SQLite and PostgreSQL run stores."""
