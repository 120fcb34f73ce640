"""The bottom layer of the analysis: its inputs, read into tidy frames and records.

``load`` (the results store, the SQuADShifts published results or a CSV table -> a tidy
frame; the store's per-question scores and run records), ``tidy`` (the tidy table and its
loaders), ``csv_import`` (a published table, checked cell by cell), ``reconcile`` (published
names joined to leaderboard entries), ``paper`` (the SQuADShifts paper's own tables),
``facts`` (what the test-set folders say), ``strata`` (per-question features of a test set,
cached per file), ``records`` (SystemScores, RunInfo) and ``cache`` (outputs kept with the
digest of their inputs). Nothing here imports another layer of the analysis.

The loaders are re-exported here: they are what the commands call.
"""

from analysis.sources.load import (
    SOURCES,
    load_source,
    load_tables,
    per_question_scores,
    published_data_dir,
    store_inputs,
    store_records_of,
)
from analysis.sources.records import RunInfo, SystemScores

__all__ = ["SOURCES", "RunInfo", "SystemScores", "published_data_dir",
           "load_source", "load_tables", "per_question_scores", "store_inputs",
           "store_records_of"]
