"""One function per evaluation, in the style of CLIP_benchmark: each takes a model (a spec or a loaded encoder)
and data, and returns a :class:`~globetrotter.evaluation.records.Result` whose ``to_record()`` is the JSON record that
``eval.py`` writes: :mod:`.sentence`, :mod:`.select`, :mod:`.word` (and its ground truth, ``build_dictionary``),
:mod:`.retrieval`, :mod:`.cluster`, :mod:`.correspondence`, :mod:`.generate`; :mod:`.translate` returns
translations instead. The command line only parses arguments, calls these and prints."""
