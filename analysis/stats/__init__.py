"""Computations on tidy frames: ``fits`` (linear and probit trend fits, effective
robustness), ``gaps`` (adaptivity and distribution gaps, rank changes), ``concurrence``
(Kendall tau-b and Pearson r between test sets, with bootstrap intervals) and
``reweighting`` (drops predicted by a shift in question strata). They read
``analysis.sources`` only: no figure, no file."""
