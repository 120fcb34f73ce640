"""qashift analysis: tidy results, trend fits, gaps, concurrence and figures.

Modules, one concept each: ``tidy`` (the table and its loaders), ``reconcile`` (joining
published names to leaderboard entries), ``fits`` (linear/probit trend fits, effective
robustness), ``gaps`` (adaptivity and distribution gaps, rank changes), ``concurrence``
(Kendall tau-b and Pearson r between test sets), ``figures`` and ``cli``.
"""
