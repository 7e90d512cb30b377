"""The agent loop: paradigms, providers, parsing, splicing and the loop itself. Imports no framework and nothing of the record."""
