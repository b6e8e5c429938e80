"""throttle_hits: the sign-in throttle's moving-window entries; provider_breakers: the providers' circuit breakers;
both shared by every process and instance (issue 31 items 1 and 2)

Revision ID: 0025_shared_state
Revises: 0024_gateway_call_limits
"""

from alembic import op
import sqlalchemy as sa

revision = "0025_shared_state"
down_revision = "0024_gateway_call_limits"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "throttle_hits",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), autoincrement=True, nullable=False),
        sa.Column("key", sa.String(length=200), nullable=False),
        sa.Column("at", sa.Float(precision=53), nullable=False),
        sa.Column("expires_at", sa.Float(precision=53), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_throttle_hits")),
    )
    op.create_index("ix_throttle_hits_key_at", "throttle_hits", ["key", "at"])
    op.create_index(op.f("ix_throttle_hits_expires_at"), "throttle_hits", ["expires_at"])
    op.create_table(
        "provider_breakers",
        sa.Column("key_hash", sa.String(length=64), nullable=False),
        sa.Column("timeouts", sa.Integer(), nullable=False),
        sa.Column("open_until", sa.Float(precision=53), nullable=True),
        sa.PrimaryKeyConstraint("key_hash", name=op.f("pk_provider_breakers")),
    )


def downgrade() -> None:
    op.drop_table("provider_breakers")
    op.drop_index(op.f("ix_throttle_hits_expires_at"), table_name="throttle_hits")
    op.drop_index("ix_throttle_hits_key_at", table_name="throttle_hits")
    op.drop_table("throttle_hits")
