"""Effective access: who may use, configure and manage a connection, and the revision that changes with it."""
