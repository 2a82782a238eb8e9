"""Resumable chat: the example web app of graphkeep's run event log (see README.md)."""
