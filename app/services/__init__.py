"""The rules. One module per capability; no Flask request objects and no commits in here."""
