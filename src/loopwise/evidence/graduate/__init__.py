"""Graduation: the agent's own stored runs (``mining``) as traces with what a person
decided (``traces``), the tool-call paths they took (``analyze``), what the traces prove
about each argument (``dataflow``), the generated workflow's source (``codegen``, its names
and literals in ``naming``), writing it (``writing``), the verdict (``verdict``) and the
move itself (``graduate``). May import ``evidence.evals``, ``evidence.check`` and the
layers below ``evidence``. Its paths are internal."""
