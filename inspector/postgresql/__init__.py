"""The database backend for PostgreSQL: Django's, with the pool's test of a connection replaced
(``base.DatabaseWrapper``)."""
