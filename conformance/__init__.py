"""graphkeep conformance matrix: every backend set-up x (official suite + our spec).

- `setups`: which backends exist, their URLs, which are enabled.
- `factory`: how a spec case gets savers (`graphkeep.connect`/`aconnect`, or the reference saver).
- `official`: the PyPI `langgraph-checkpoint-conformance` suite, per capability.
- `spec`: our own cases for what the official suite does not cover, grouped by capability.
- `runner` / `__main__`: `python -m conformance` prints the matrix.
"""
