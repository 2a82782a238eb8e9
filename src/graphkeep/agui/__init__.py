"""Serve a compiled LangGraph graph as an AG-UI agent whose streams survive reconnects.

::

    from graphkeep.agui import AGUIRuns, agui_app

    async with graphkeep.aconnect(url) as saver, graphkeep.aconnect_events(url) as events:
        runs = AGUIRuns(builder.compile(checkpointer=saver), events)
        app.mount("/agent", agui_app(runs))        # POST /agent, POST /agent/connect

Every AG-UI event of a run is appended to graphkeep's event log before any connection sends
it: a client that reconnects with ``Last-Event-ID`` gets every later event exactly once, a
page load gets the thread's snapshot and then the live run, and the run goes on in a worker
when its connection drops. Needs ``pip install "graphkeep[agui]"``. See docs/agui.md.
"""

from graphkeep.agui.app import agui_app, agui_routes
from graphkeep.agui.runs import AGUIRuns, Conflict, RunExists, agent_input

__all__ = ["AGUIRuns", "Conflict", "RunExists", "agent_input", "agui_app", "agui_routes"]
