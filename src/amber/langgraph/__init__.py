"""amber for LangGraph: a checkpointer and a store on PostgreSQL, with Redis hot copies.

    from amber.langgraph import AmberSaver
    with AmberSaver.from_env() as checkpointer:   # AMBER_* variables, else embedded servers
        graph = builder.compile(checkpointer=checkpointer)

Needs the ``langgraph`` extra (``pip install 'amber[langgraph]'``).
"""

from amber.langgraph.retention import GcReport
from amber.langgraph.saver import AmberSaver, AsyncAmberSaver
from amber.langgraph.serde import StrictSerializer
from amber.langgraph.store import AmberStore

__all__ = ["AmberSaver", "AmberStore", "AsyncAmberSaver", "GcReport", "StrictSerializer"]
