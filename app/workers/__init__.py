"""Leased background jobs: the run executor and continuation delivery, driven by `switchboard worker` or a thread.

Workers call the same services as the web doors and commit once per unit of work; several workers may run against
one PostgreSQL database (leases use `FOR UPDATE SKIP LOCKED`).
"""
