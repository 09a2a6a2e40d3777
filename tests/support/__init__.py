"""What the tests share that is not a fixture: the checkout's root, helper modules and scripts.

``ROOT`` is the checkout (where ``workflows/``, ``agents/``, ``docs/`` live): a test finds files
through it, never by counting its own ``__file__``'s parents, so a test moved to another folder
still finds them.
"""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
"""The checkout's root folder."""
