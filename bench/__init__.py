"""Performance benchmarks of the Tool-Call Inspector: ``python -m bench`` (``make bench``).

Each measure (P1 … P12, one module each) is repeated and reported with its median and spread
beside its target; ``bench.report`` writes ``bench/results/latest.json`` and ``latest.md``.
The floor for P1 is ``bench.bare_loop``: the openai SDK and the mcp SDK in about fifty lines,
recording nothing, run against the same fake model (``bench.fake_model``) and the same stdio
MCP server in the same run.
"""
