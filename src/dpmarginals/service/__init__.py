"""The collection service: an HTTP aggregator (FastAPI) over a durable store.

Install with the ``service`` extra.  ``create_app`` (in :mod:`.app`) builds the ASGI app;
:mod:`.store` keeps campaigns, reports and the per-(group, cell) support counts (SQLite
in WAL mode, or PostgreSQL); ``dpmarginals serve`` runs it.  Its releases are
:func:`dpmarginals.aggregation.synopsis_from_counts`, the release step every path shares.
"""
