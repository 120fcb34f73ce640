"""The studies: each answers one question of a paper from the layers below (sources, stats,
figures) and writes its own tables and figures. ``population`` (the own population's trends
beside the study's), ``extra_data`` (does extra training data move systems off the trend?),
``approach_concurrence`` (Liu et al.'s approach-level concurrence), ``reproduction`` (the
SQuADShifts study's fits and drops beside ours), ``stratified`` (Appendix C: strata and
reweighted drops) and ``challenge`` (ablation and SAM challenge-set reports)."""
