"""Fixtures of the fault suite (the helpers live in faultkit.py)."""

from faultkit import fleet

__all__ = ["fleet"]
