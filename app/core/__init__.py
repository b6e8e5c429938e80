"""Shared plumbing that services, adapters and web all need: errors, the outbound guard."""
