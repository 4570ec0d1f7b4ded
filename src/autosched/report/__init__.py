"""Self-contained HTML reports: text, tables and matplotlib figures embedded as PNG."""

from .html import Report

__all__ = ["Report"]
