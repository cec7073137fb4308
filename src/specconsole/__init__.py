"""specconsole: a terminal operations console for speculative-decoding drafter teams."""

__version__ = "0.1.0"
