"""``python -m bench`` (``./dev bench``, from the repository's root; not part of the installed
package): graphkeep against other checkpoint savers, same store, one run.

Layout:

- :mod:`.workloads` - the measured LangGraph apps (W50, W50-delta) and the
  store-independent measuring loop;
- :mod:`.probes` - request counting at the client and per-saver-method attribution;
- :mod:`.suites` - one module per suite (``redis``, ``mongodb``, ``dynamodb``, ``store``,
  ``live``, ``concurrency``, ``effects``, ``hot``), registered in :data:`.suites.SUITES`;
- :mod:`.worker` - the same measuring loop in a subprocess, for savers that need
  their own virtualenv;
- :mod:`.report` - the markdown table and the PNG chart.
"""

from __future__ import annotations
