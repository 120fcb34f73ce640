"""Users belong to a tier, whose limits the operator's policy states (`tiers:`)."""

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"


def upgrade() -> None:
    with op.batch_alter_table("users") as batch:
        batch.add_column(sa.Column("tier", sa.String(32), nullable=False,
                                   server_default="default"))
