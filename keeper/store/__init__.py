"""SQLite storage: schema, migrations, batch commits, projections, read queries.

All SQL of the package lives under this package.
"""
