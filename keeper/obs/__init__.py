"""Observability: metric declarations, the database gauge collector, logging setup.

Imports only the stdlib, prometheus-client and structlog (plus the package's
own value types), so every layer may depend on it.
"""
