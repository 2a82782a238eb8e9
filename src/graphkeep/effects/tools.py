"""``ledger.once(tool)``: a LangChain tool whose runs are effects of a ledger.

The tool keeps its name, description, schema and injected arguments (``ToolNode`` and
``create_react_agent`` see the same tool); its runs go through the ledger. Two calls of one
tool with the same arguments in one step are two effects (told apart by their position in
the task); the model's tool call id is not part of the default key (see
:mod:`graphkeep.effects.keys`): a run for a tool call carries it only to find a record an
earlier graphkeep keyed by it.
"""

from __future__ import annotations

import contextvars
import inspect
import typing
from typing import TYPE_CHECKING, Any

from langchain_core.runnables import RunnableConfig

from graphkeep.effects.keys import TOOL_CALL_ID

if TYPE_CHECKING:
    from graphkeep.effects.ledger import Effect, LedgerBase


#: set while the ledger runs a tool's ``_arun``: a ``_run`` it calls (in a worker thread,
#: which copies the context) is the same effect, not a second one
_INSIDE: contextvars.ContextVar[bool] = contextvars.ContextVar("graphkeep_once_tool", default=False)


def is_tool(value: Any) -> bool:
    try:
        from langchain_core.tools import BaseTool
    except ImportError:  # pragma: no cover - langchain-core comes with langgraph
        return False
    return isinstance(value, BaseTool)


def _call_id(tool_input: Any) -> str | None:
    if isinstance(tool_input, dict) and tool_input.get("type") == "tool_call":
        found = tool_input.get("id")
        return str(found) if found else None
    return None


def _plumbing(method: Any, config: Any, run_manager: Any) -> dict[str, Any]:
    """What LangChain would pass the tool's own ``_run`` / ``_arun`` beyond the call's
    input: ``config`` (to a parameter typed ``RunnableConfig``) and ``run_manager``."""
    try:
        hints = typing.get_type_hints(method)
    except Exception:  # noqa: BLE001 - unresolvable hints: LangChain passes no config either
        hints = {}
    passed: dict[str, Any] = {n: config for n, t in hints.items() if t is RunnableConfig}
    if "run_manager" in inspect.signature(method).parameters:
        passed["run_manager"] = run_manager
    return passed


def once_tool(ledger: LedgerBase, tool: Any, effect: Effect) -> Any:
    """A copy of ``tool`` whose runs are ``effect`` (the original tool is unchanged)."""
    base = type(tool)

    class OnceTool(base):  # type: ignore[valid-type,misc]
        def invoke(self, input: Any, config: Any = None, **kwargs: Any) -> Any:
            token = TOOL_CALL_ID.set(_call_id(input))
            try:
                return super().invoke(input, config, **kwargs)
            finally:
                TOOL_CALL_ID.reset(token)

        async def ainvoke(self, input: Any, config: Any = None, **kwargs: Any) -> Any:
            token = TOOL_CALL_ID.set(_call_id(input))
            try:
                return await super().ainvoke(input, config, **kwargs)
            finally:
                TOOL_CALL_ID.reset(token)

        def _run(
            self, *args: Any, config: RunnableConfig, run_manager: Any = None, **kwargs: Any
        ) -> Any:
            plumbing = _plumbing(base._run, config, run_manager)
            if _INSIDE.get():  # the tool's _arun runs its _run in a thread: one effect
                return base._run(self, *args, **kwargs, **plumbing)

            def run(*_args: Any, **_kwargs: Any) -> Any:
                return base._run(self, *args, **kwargs, **plumbing)

            return ledger.call(effect, run, args, kwargs)

        async def _arun(
            self, *args: Any, config: RunnableConfig, run_manager: Any = None, **kwargs: Any
        ) -> Any:
            plumbing = _plumbing(base._arun, config, run_manager)

            async def arun(*_args: Any, **_kwargs: Any) -> Any:
                inside = _INSIDE.set(True)
                try:
                    return await base._arun(self, *args, **kwargs, **plumbing)
                finally:
                    _INSIDE.reset(inside)

            return await ledger.acall(effect, arun, args, kwargs)

    OnceTool.__name__ = OnceTool.__qualname__ = f"Once{base.__name__}"
    copy = tool.model_copy()
    object.__setattr__(copy, "__class__", OnceTool)
    return copy
