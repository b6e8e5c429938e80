"""users.session_epoch: the generation of a user's browser sessions; sign-out moves it on, ending every session
signed in before (issue 33 item 6)

Revision ID: 0021_session_epoch
Revises: 0020_gemini_adapter
"""

from alembic import op
import sqlalchemy as sa

revision = "0021_session_epoch"
down_revision = "0020_gemini_adapter"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("users") as batch_op:
        batch_op.add_column(sa.Column("session_epoch", sa.Integer(), nullable=False, server_default="0"))


def downgrade() -> None:
    with op.batch_alter_table("users") as batch_op:
        batch_op.drop_column("session_epoch")
