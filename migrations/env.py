"""Alembic environment. The URL comes from the caller (`trainjobs migrate`) or the settings."""

from alembic import context

from trainjobs.jobs.db import make_engine
from trainjobs.jobs.tables import Base
from trainjobs.settings import load_settings

config = context.config
url = config.get_main_option("sqlalchemy.url") or load_settings().sql_url


def run_migrations_offline() -> None:
    context.configure(url=url, target_metadata=Base.metadata, literal_binds=True, render_as_batch=True)
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    engine = make_engine(url, migrating=True)  # SQLite: foreign keys off while tables are rebuilt
    with engine.connect() as connection:
        context.configure(connection=connection, target_metadata=Base.metadata, render_as_batch=True)
        with context.begin_transaction():
            context.run_migrations()
            if connection.dialect.name == "sqlite":
                broken = connection.exec_driver_sql("PRAGMA foreign_key_check").fetchall()
                if broken:  # what the foreign keys would have refused: roll the migration back
                    raise RuntimeError(f"the migration left rows whose foreign keys point nowhere: {broken[:5]}")
    engine.dispose()


if context.is_offline_mode():
    run_migrations_offline()
else:
    run_migrations_online()
