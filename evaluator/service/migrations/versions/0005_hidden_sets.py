"""Hidden test sets and their rules; a hidden set's job carries its answer-free input, its
planned cell key and the run handed back for scoring."""

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"


def upgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        for name in ("input_sha256", "cell_key", "output_sha256"):
            batch.add_column(sa.Column(name, sa.String(64)))
    op.create_table(
        "testset_rules",
        sa.Column("testset", sa.String(200), primary_key=True),
        sa.Column("hidden", sa.Integer, nullable=False, server_default="0"),
        sa.Column("folder", sa.Text),
        sa.Column("inputs_may_leave", sa.Integer, nullable=False, server_default="0"),
        sa.Column("visibility", sa.String(12), nullable=False, server_default="public"),
        sa.Column("visible_after", sa.Float),
        sa.Column("daily_limit", sa.Integer),
        sa.Column("updated_at", sa.Float, nullable=False),
    )
