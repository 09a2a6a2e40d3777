"""The model port's contract (``port``), the OpenAI-compatible model behind it (``openai``)
the scripted model (``scripted``) and the HTTP clients a process's models share (``clients``).
Imports ``core`` only; never the test fakes.

Its paths are internal: users import from ``loopwise`` and ``loopwise.testing``.
"""
