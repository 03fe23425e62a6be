"""Schema migrations of the index component (see keeper.store.migrations)."""

MIGRATIONS: list[str] = []
