"""Runs on Temporal (the ``loopwise[temporal]`` extra): any loopwise target as one generic
Temporal workflow, behind the ``temporal://HOST:PORT/NAMESPACE`` store URL.

* :mod:`.address` — the URL and the names the workflow and its clients share;
* :mod:`.book` — a run's approvals as the workflow keeps them (no SDK);
* :mod:`.workflow` — the workflow: the loop in workflow code, its outside-world work
  (:mod:`loopwise.core.offload`) as activities, gates as signals;
* :mod:`.activities` — model calls, tool calls and policy judgements, done in a worker;
* :mod:`.codec` — what goes through Temporal, large payloads compressed;
* :mod:`.worker` — a worker serving the workflow and its activities;
* :mod:`.store` — the store the verbs read and decide through (a Temporal client).

Every module that needs the SDK raises :class:`~loopwise.errors.MissingExtra` naming
``loopwise[temporal]`` when it is not installed. May import every layer below it.
"""
