"""Schema migrations of the keeper component (see keeper.store.migrations)."""

MIGRATIONS: list[str] = []
