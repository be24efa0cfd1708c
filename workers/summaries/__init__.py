"""Nightly conversation summaries: chunking, the night's run, its lock and its schedule."""
