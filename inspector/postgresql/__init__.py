"""The database backend for PostgreSQL: Django's, testing each connection its pool lends
(``base.DatabaseWrapper``)."""
