"""Formats of the tools the console reads: pure parsers of their text output (no I/O)."""
