"""Connection management: disable and enable, disconnect (revoking at the provider), delete, and draft cleanup.

`lifecycle` holds the write services; `impact` says what a delete or disconnect touches (agents that lose access,
pending cards that keep waiting or expire), for the confirmation page and for the services themselves.
"""
