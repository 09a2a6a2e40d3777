"""Graduation: mining stored agent runs for the tool-call paths they took (``analyze``),
what the traces prove about each argument (``dataflow``), the generated workflow's source
(``codegen``) and the move itself (``graduate``). May import ``evidence.evals``,
``evidence.check`` and the layers below ``evidence``. Its paths are internal."""
