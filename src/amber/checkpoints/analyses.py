"""Moved: the analyses table is the runtime's, ``amber.runtime.analyses``."""

from amber.runtime.analyses import Analyses, AnalysisRecord

__all__ = ["Analyses", "AnalysisRecord"]
