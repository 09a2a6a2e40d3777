"""Evals and their statistics: the harness that runs targets over a dataset, the numbers of
a run and a target, paired comparisons, failure mining, the recommendation, the eval
history's keys and the sandbox an eval runs in. May import the layers below ``evidence``;
never ``sweeps`` or ``graduate`` (they build on this folder). Its paths are internal."""
