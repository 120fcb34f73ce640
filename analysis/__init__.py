"""qashift analysis: from the results to the figures, the tables and the site, in layers.

Each layer imports only the layers below it (`.importlinter`, contract analysis-layers):

* ``sources``: the inputs read into tidy frames (the results store, the SQuADShifts
  published results, CSV tables, the papers' own tables, test-set facts, question strata);
* ``stats``: computations on those frames (trend fits, gaps, concurrence, reweighting);
* ``figures``: drawing what stats computed;
* ``report`` (every figure and table of one tidy frame) beside ``studies`` (one paper's
  question each: population, extra data, approach-level concurrence, reproduction, strata,
  challenge sets);
* ``site``: the static site, from a tidy frame and the tables the report hands it.

``data/``, ``templates/`` and ``static/`` hold the papers' tables and the site's templates
and assets (package data).
"""
