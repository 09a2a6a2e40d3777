"""The ``loopwise`` command (``main``), one module per verb, and the main job (``demo``).
A face: it may import every layer below; a verb loads only the modules it uses.

Its paths are internal: users import from ``loopwise`` and ``loopwise.testing``.
"""
