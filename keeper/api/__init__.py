"""The read side served over HTTP: JSON API, status page, metrics endpoint.

Reads the database through its own read-only connection so that slow
readers never block indexing.
"""
