"""The PostgreSQL rail: the Tracker protocol on a schema of a PostgreSQL database.

Selected by ``postgresql://`` URLs (:mod:`tracker_client.factory`); needs the ``postgres`` extra
(psycopg 3 and psycopg-pool). Imported only when a URL names it.
"""

from tracker_client.postgres.tracker import POSTGRES, PostgresTracker

__all__ = ["POSTGRES", "PostgresTracker"]
