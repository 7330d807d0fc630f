"""Built-in extensions: plain Python on the runtime contract, no Django.

Each is importable from here (``from agents.extensions import SteeringExtension``)
as well as from its own module.
"""

from .approval import ToolApprovalExtension
from .ask_user import AskUserExtension
from .budget import BudgetExceeded, BudgetExtension, BudgetSettings
from .demo_tools import DemoToolsExtension
from .memory import InMemoryMessageAccumulator
from .settings import AskUserSettings, SteeringSettings, ToolApprovalSettings
from .steering import SteeringExtension

__all__ = [
    "AskUserExtension",
    "AskUserSettings",
    "BudgetExceeded",
    "BudgetExtension",
    "BudgetSettings",
    "DemoToolsExtension",
    "InMemoryMessageAccumulator",
    "SteeringExtension",
    "SteeringSettings",
    "ToolApprovalExtension",
    "ToolApprovalSettings",
]
