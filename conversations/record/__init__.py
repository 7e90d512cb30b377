"""The record store: how the record's rows reach the database (``store``), and the writer
thread that commits a running turn's batches in order (``writer``)."""
