"""The canonical job table and loaders for real trace formats."""

from .io import load_trace, write_trace
from .report import LoadReport
from .summary import TraceSummary, summarize
from .table import COLUMNS, OPTIONAL, REQUIRED, Trace, TraceError

__all__ = ["Trace", "TraceError", "LoadReport", "load_trace", "write_trace", "summarize", "TraceSummary",
           "COLUMNS", "REQUIRED", "OPTIONAL"]
