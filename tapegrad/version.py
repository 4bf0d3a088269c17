"""The tapegrad version (a leaf module: the build cache keys on it without importing the package face)."""

__version__ = "0.1.0"
