"""Schema migrations of the verify component (see keeper.store.migrations)."""

MIGRATIONS: list[str] = []
