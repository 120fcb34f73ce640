"""Neural span readers for extractive QA, the parts their approaches share.

An approach folder holds one `approach.py` with its reader (a `model.SpanReader`: the
architecture of its paper) and ends with `sys.exit(loop.main(Reader))`; this package gives it
the text side (`text`: spaCy tokens, word vectors, DrQA features, characters), the building
blocks (`layers`) and the train/predict commands (`loop`). Bundles name it with
`libraries: [span_readers]`; it is part of each one's digest.
"""
