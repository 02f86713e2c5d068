"""One function per evaluation, in the style of CLIP_benchmark: each takes a model (a spec or a loaded encoder)
and data, and returns a :class:`~globetrotter.evaluation.records.Result` whose ``to_dict`` is the JSON record that
``eval.py`` writes. The command line only parses arguments, calls these and prints."""
