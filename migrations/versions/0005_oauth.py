"""oauth: server-side authorization state and dynamically registered clients

Adds `oauth_states` (one single-use row per authorization in flight, keyed by the SHA-256 of the state value, with
the encrypted PKCE verifier) and `oauth_client_registrations` (one RFC 7591 client per company and app, its secret
encrypted).

Revision ID: 0005_oauth
Revises: 0004_connection_intents
"""

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0005_oauth"
down_revision = "0004_connection_intents"
branch_labels = None
depends_on = None

JSON_TYPE = sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql")
NULLABLE_JSON_TYPE = sa.JSON(none_as_null=True).with_variant(
    postgresql.JSONB(none_as_null=True, astext_type=sa.Text()), "postgresql"
)


def upgrade():
    op.create_table(
        "oauth_client_registrations",
        sa.Column("id", sa.Uuid(), nullable=False),
        sa.Column("company_id", sa.Uuid(), nullable=False),
        sa.Column("app_slug", sa.String(length=80), nullable=False),
        sa.Column("issuer", sa.Text(), nullable=False),
        sa.Column("client_id", sa.Text(), nullable=False),
        sa.Column("client_secret_ciphertext", sa.Text(), nullable=True),
        sa.Column("registration", JSON_TYPE, nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["company_id"],
            ["companies.id"],
            name=op.f("fk_oauth_client_registrations_company_id_companies"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_oauth_client_registrations")),
        sa.UniqueConstraint(
            "company_id", "app_slug", name=op.f("uq_oauth_client_registrations_company_id_app_slug")
        ),
    )
    op.create_table(
        "oauth_states",
        sa.Column("state_hash", sa.String(length=64), nullable=False),
        sa.Column("company_id", sa.Uuid(), nullable=False),
        sa.Column("connection_id", sa.Uuid(), nullable=False),
        sa.Column("user_id", sa.Uuid(), nullable=False),
        sa.Column("identity", sa.String(length=20), nullable=False),
        sa.Column("audience", NULLABLE_JSON_TYPE, nullable=True),
        sa.Column("code_verifier", sa.Text(), nullable=True),
        sa.Column("redirect_uri", sa.Text(), nullable=False),
        sa.Column("issuer", sa.Text(), nullable=True),
        sa.Column("provider", JSON_TYPE, nullable=False),
        sa.Column("interaction_id", sa.Uuid(), nullable=True),
        sa.Column("opener_origin", sa.String(length=300), nullable=True),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("consumed_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["company_id"],
            ["companies.id"],
            name=op.f("fk_oauth_states_company_id_companies"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["connection_id"],
            ["tool_connections.id"],
            name=op.f("fk_oauth_states_connection_id_tool_connections"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["interaction_id"],
            ["thread_interactions.id"],
            name=op.f("fk_oauth_states_interaction_id_thread_interactions"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["user_id"], ["users.id"], name=op.f("fk_oauth_states_user_id_users"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("state_hash", name=op.f("pk_oauth_states")),
    )
    with op.batch_alter_table("oauth_states", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_oauth_states_connection_id"), ["connection_id"], unique=False)
        batch_op.create_index("ix_oauth_states_expires_at", ["expires_at"], unique=False)
        batch_op.create_index(batch_op.f("ix_oauth_states_interaction_id"), ["interaction_id"], unique=False)


def downgrade():
    with op.batch_alter_table("oauth_states", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_oauth_states_interaction_id"))
        batch_op.drop_index("ix_oauth_states_expires_at")
        batch_op.drop_index(batch_op.f("ix_oauth_states_connection_id"))
    op.drop_table("oauth_states")
    op.drop_table("oauth_client_registrations")
