"""The model port's contract (``port``), the OpenAI-compatible model behind it (``openai``)
and the scripted model (``scripted``). Imports ``core`` only; never the test fakes.

Its paths are internal: users import from ``loopwise`` and ``loopwise.testing``.
"""
