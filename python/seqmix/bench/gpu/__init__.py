"""The GPU suite of ``seqmix bench --device cuda``: seqmix against its baselines, side
by side, in one process, on the same inputs.

One module per concern:

- ``env``       the environment recorded with the results (GPU, driver, library versions)
- ``timing``    the timing helpers: CUDA events per call, or CUDA-graph replays (forward);
                warm-up, L2 flushed, median
- ``ceilings``  copy bandwidth and bf16 GEMM rate, measured at the start of every run
- ``case``      the data model: a Case offers Methods, each timed per direction into a Row
- ``suite``     runs cases, fills speed-ups and errors, writes the results
- ``report``    results.json and results.md; ``plots`` the PNG figures

and one module per op with its cases (``gated_scan``). To add an op, write
``<op>.py`` with a ``cases(quick) -> list[Case]`` function and name it in ``suite.OPS``.
"""
