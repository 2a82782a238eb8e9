"""``python -m graphkeep.demo``: a support-ticket assistant that survives restarts.

A deterministic LangGraph app (no LLM, no network besides the store) run on each
available graphkeep backend. Per backend it prints a short transcript of

1. multi-turn memory: three turns, each through a *new* saver instance, and the
   state read back by yet another one;
2. a human approval: the third turn stops at ``interrupt()``; a child process
   (``python -m graphkeep.demo --resume-child``) opens its own saver and resumes
   the thread with ``Command(resume=...)``;
3. time travel: ``get_state_history`` newest first, then a replay from an older
   checkpoint that re-runs only the nodes after it;
4. a fork: ``update_state`` on an old checkpoint, continued, while the original
   history stays as it was;
5. long-term memory across threads: a second graph with a store
   (``graphkeep.connect_store``) learns a preference and keeps ticket notes in one thread;
   a brand-new thread (new saver, new store) uses the preference and finds the related
   earlier ticket by semantic search (a deterministic local embedding, no model);

and ends with the thread id, the (masked) URL and the key prefix so the data can
be inspected; nothing is cleaned up. Every fact printed is also checked; the exit
status is non-zero when any check fails.

Backends: ``--backend redis|mongodb|dynamodb|all``. By default every backend whose
URL scheme is registered in :data:`graphkeep.connect.BACKENDS` and whose server
answers; ``all`` runs every registered backend and fails when one is unreachable.
URLs come from ``REDIS_URL``, ``MONGODB_URI`` and ``DYNAMODB_ENDPOINT_URL``
(defaults: the local services of ``./dev services up``).

Here: the apps (:mod:`.app`), the backends and their servers (:mod:`.backends`), the
transcript's steps (:mod:`.transcript`), the OpenTelemetry summary (:mod:`.metrics`) and
the command line (:mod:`.command`).
"""

from __future__ import annotations

from graphkeep.demo.command import main

__all__ = ["main"]
