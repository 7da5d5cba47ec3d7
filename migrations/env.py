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
    engine = make_engine(url)
    with engine.connect() as connection:
        context.configure(connection=connection, target_metadata=Base.metadata, render_as_batch=True)
        with context.begin_transaction():
            context.run_migrations()
    engine.dispose()


if context.is_offline_mode():
    run_migrations_offline()
else:
    run_migrations_online()
