"""Readers of the offline text the trained drafters learn from (issue 21): each a function that yields `Document`s
from a packaged source, and a `Source` entry with its license, so the corpus manifest says what may be redistributed
under which terms. Only sources whose license permits redistribution of derived data are registered (ShareGPT's
packaged copy states none and is left out)."""

from specjax.training.sources.base import Document, Source, package_dir
from specjax.training.sources.registry import SOURCES, source

__all__ = ["Document", "Source", "SOURCES", "package_dir", "source"]
