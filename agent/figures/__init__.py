"""Every figure of an answer checked against the cells of the queries it cites (see verify.py)."""

from agent.figures.deadline import CheckTimedOut, Deadline
from agent.figures.pool import Evidence
from agent.figures.report import CellRef, FigureCheck, FigureReport
from agent.figures.verify import DERIVATIONS, check_answer

__all__ = [
    "DERIVATIONS",
    "CellRef",
    "CheckTimedOut",
    "Deadline",
    "Evidence",
    "FigureCheck",
    "FigureReport",
    "check_answer",
]
