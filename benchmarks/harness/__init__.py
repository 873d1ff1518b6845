"""The speed benchmark's harness: what every engine's rows share.

``models`` (the rows' architectures), ``device`` (where a process computes, its matmul
peak), ``timing`` (steps taking turns), ``memory`` (peak resident set, device memory),
``attention`` (which kernel a step ran), ``measure`` (one process's rows), ``table`` (the
printed table, ratios, the CSV) and ``record`` (where a recorded run's CSV lands). The
engines themselves are in ``benchmarks/engines``.
"""
