"""Reports: a deeper analysis than one answer, written from the queries its run executed (model.py is the
one shape; the pipeline makes it, the kit stores it, markdown.py and pdf.py render it). Light to import:
the Runner contract carries a report."""

from agent.reports.model import (
    LIMITS,
    FigureMark,
    Finding,
    Report,
    ReportBudget,
    ReportOutcome,
    ReportQuery,
    ReportRequest,
    ReportStatus,
    ReportUsage,
)

__all__ = [
    "LIMITS",
    "FigureMark",
    "Finding",
    "Report",
    "ReportBudget",
    "ReportOutcome",
    "ReportQuery",
    "ReportRequest",
    "ReportStatus",
    "ReportUsage",
]
