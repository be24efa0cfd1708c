"""Schema changes that several revisions of the job database make the same way."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import sqlalchemy as sa
from alembic import op
from sqlalchemy.schema import SchemaItem


def add_columns(
    table: str, *columns: sa.Column[Any], index: tuple[str, list[str]] | None = None
) -> None:
    """Add ``columns`` to ``table`` in order, then the index ``(name, columns)`` if given."""
    with op.batch_alter_table(table) as batch:
        for column in columns:
            batch.add_column(column)
        if index is not None:
            batch.create_index(*index)


def drop_columns(table: str, *names: str, index: str | None = None) -> None:
    """Undo ``add_columns``: drop the index if named, then the columns named, last added first."""
    with op.batch_alter_table(table) as batch:
        if index is not None:
            batch.drop_index(index)
        for name in reversed(names):
            batch.drop_column(name)


def columns_added(
    table: str, *columns: sa.Column[Any]
) -> tuple[Callable[[], None], Callable[[], None]]:
    """``upgrade`` and ``downgrade`` of a revision that only adds ``columns`` to ``table``."""

    def upgrade() -> None:
        add_columns(table, *columns)

    def downgrade() -> None:
        drop_columns(table, *(column.name for column in columns))

    return upgrade, downgrade


def timestamp(name: str, *, nullable: bool = True) -> sa.Column[Any]:
    """A column named ``name`` of a timezone-aware time: every time the database keeps."""
    return sa.Column(name, sa.DateTime(timezone=True), nullable=nullable)


def create_keyed_table(name: str, *items: SchemaItem, id_length: int) -> None:
    """Create table ``name`` keyed by a string ``id`` of at most ``id_length`` characters:
    the ``id`` column first, then ``items`` (columns, other constraints) in order, and a
    primary key named as the metadata's naming convention names it (``pk_<name>``)."""
    op.create_table(
        name,
        sa.Column("id", sa.String(id_length), nullable=False),
        *items,
        sa.PrimaryKeyConstraint("id", name=op.f(f"pk_{name}")),
    )
