"""One spelling per concept in the public Python API (``globetrotter``, ``globetrotter.evaluation``,
``globetrotter.zeroshot``, ``backretrieval``): the parameter and method names of every exported function and
class are walked, and a spelling the API renamed (``langs=`` for a choice of languages, ``n_boot=``,
``to_dict()`` for a record, ...) may not come back. The old spellings still work for one release, each with one
DeprecationWarning naming the new one."""
from __future__ import annotations

import importlib
import inspect
import warnings

import numpy as np
import pytest

from backretrieval.renamed import RenamedMethod, renamed_keywords

PUBLIC = ("globetrotter", "globetrotter.evaluation", "globetrotter.zeroshot", "backretrieval")

# old parameter spelling -> the one the API uses (and the CLI flag: --bootstrap, --corr-pairs, --out)
RENAMED_PARAMETERS = {
    "n_boot": "bootstrap",
    "max_pairs": "corr_pairs",
    "max_per_language": "max_per_lang",  # as val.max_per_lang, corpus_lang; the flag stays --max-per-language
    "num_images": "n_images",
    "texts_emb": "text_emb",
    "out_dir": "out",
}
# ``langs`` is one language code per row (per text): a choice of languages to evaluate is ``languages``
ONE_CODE_PER_ROW = {
    "globetrotter.Encoder.encode_text", "globetrotter.Encoder.encode_text_heads", "globetrotter.Encoder.encode_tokens",
    "globetrotter.Encoder.encode_words", "globetrotter.evaluation.ParallelSet", "globetrotter.evaluation.ReferencePool",
    "globetrotter.evaluation.ScoringContext", "globetrotter.evaluation.ScoringContext.with_sentences",
    "globetrotter.evaluation.cluster_analysis", "globetrotter.evaluation.purity_scores",
    "globetrotter.evaluation.retrieval_per_language", "globetrotter.evaluation.sentence_translation",
    "globetrotter.zeroshot.cross_lingual_knn_loss", "globetrotter.zeroshot.train_siamese",
    "backretrieval.evaluate_pairs",
}
RENAMED_METHODS = {"to_dict": "to_record"}  # a command's JSON record; to_dict/from_dict round-trips a value


def public_callables() -> list[tuple[str, object]]:
    """(dotted name, function) of every exported function, class and public method (deprecated aliases left out)."""
    found = []
    for module_name in PUBLIC:
        module = importlib.import_module(module_name)
        for name in module.__all__:
            obj = getattr(module, name)
            if not callable(obj):
                continue
            found.append((f"{module_name}.{name}", obj))
            if inspect.isclass(obj):
                for attr, value in vars(obj).items():
                    if attr.startswith("_") or isinstance(value, (property, RenamedMethod)):
                        continue
                    value = value.__func__ if isinstance(value, (classmethod, staticmethod)) else value
                    if callable(value):
                        found.append((f"{module_name}.{name}.{attr}", value))
    return found


def parameters(obj: object) -> list[str]:
    try:
        return list(inspect.signature(obj).parameters)
    except (TypeError, ValueError):  # a builtin without a signature
        return []


def test_no_renamed_spelling_comes_back_in_the_public_api():
    """evaluate_split(langs=) beside evaluate_retrieval(languages=), recall_interval(n_boot=) beside
    score(bootstrap=), Result.to_dict() beside ScoreResult.to_record(), ...: one concept, two spellings."""
    wrong = []
    for where, obj in public_callables():
        for name in parameters(obj):
            if name in RENAMED_PARAMETERS:
                wrong.append(f"{where}({name}=): spelled {RENAMED_PARAMETERS[name]}= elsewhere")
            if name == "langs" and where not in ONE_CODE_PER_ROW:
                wrong.append(f"{where}(langs=): a choice of languages is languages= (langs: one code per row; "
                             "if it is, add it to ONE_CODE_PER_ROW)")
        if inspect.isclass(obj):
            for old, new in RENAMED_METHODS.items():
                method = vars(obj).get(old)
                if callable(method) and not hasattr(obj, "from_dict"):
                    wrong.append(f"{where}.{old}(): spelled {new}() elsewhere")
    assert not wrong, "\n".join(wrong)
    walked = dict(public_callables())
    assert "backretrieval.evaluate_split" in walked and "globetrotter.Encoder.encode_text" in walked  # the walk works


def test_every_deprecated_keyword_names_a_parameter_of_its_function():
    """An alias of a keyword the function no longer has would map the old name to nothing."""
    aliased = {where: obj for where, obj in public_callables() if hasattr(obj, "__renamed_keywords__")}
    assert {"backretrieval.evaluate_split", "backretrieval.recall_interval", "globetrotter.zeroshot.chance_recall",
            "globetrotter.evaluation.evaluate_correspondence"} <= set(aliased)
    for where, obj in aliased.items():
        names = parameters(obj)
        for old, new in obj.__renamed_keywords__.items():
            assert new in names and old not in names, (where, old, new)


def one_deprecation(call):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        value = call()
    deprecations = [w for w in caught if issubclass(w.category, DeprecationWarning)]
    assert len(deprecations) == 1, [str(w.message) for w in caught]
    assert deprecations[0].filename == __file__  # the warning points at the caller's line
    return value, str(deprecations[0].message)


def test_an_old_keyword_still_works_with_one_warning_naming_the_new_one():
    from backretrieval import corr_score, recall_interval
    from globetrotter.zeroshot import chance_recall

    hits = np.array([1.0, 0.0, 1.0, 1.0, 0.0, 1.0])
    old, message = one_deprecation(lambda: recall_interval(hits, n_boot=50, seed=3))
    assert old == recall_interval(hits, bootstrap=50, seed=3)
    assert "recall_interval(n_boot=...)" in message and "use bootstrap=" in message
    assert one_deprecation(lambda: chance_recall(num_images=20, ks=(1,)))[0] == chance_recall(20, ks=(1,))
    x = np.random.default_rng(0).standard_normal((6, 3))
    assert one_deprecation(lambda: corr_score(x, x, x, x, max_pairs=10))[0] == corr_score(x, x, x, x, corr_pairs=10)
    with pytest.raises(TypeError, match=r"recall_interval\(\) got n_boot= and bootstrap=: pass bootstrap= only"):
        recall_interval(hits, n_boot=50, bootstrap=50)


def test_an_old_method_name_still_works_with_one_warning_naming_the_new_one():
    from globetrotter.evaluation import Result

    result = Result(task="t", metrics={"m": np.float32(0.5)}, languages=["en"])
    record, message = one_deprecation(result.to_dict)
    assert record == result.to_record() and record["metrics"] == {"m": 0.5}
    assert "Result.to_dict()" in message and "use to_record()" in message


def test_the_helper_leaves_a_call_with_the_new_names_alone():
    @renamed_keywords(old="new")
    def f(a: int, new: int = 0) -> int:
        return a + new

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert f(1, new=2) == 3 and f(1, 2) == 3
    assert list(inspect.signature(f).parameters) == ["a", "new"]


def test_an_old_method_name_forwards_every_argument_and_works_on_the_class_too():
    class Record:
        def to_record(self, inputs=None, *, extra=0):
            return {"inputs": inputs, "extra": extra}

        to_dict = RenamedMethod("to_record")

    obj = Record()
    value, message = one_deprecation(lambda: obj.to_dict({"a": 1}, extra=2))
    assert value == obj.to_record({"a": 1}, extra=2) == {"inputs": {"a": 1}, "extra": 2}
    assert "Record.to_dict()" in message and "use to_record()" in message
    assert one_deprecation(lambda: Record.to_dict(obj, None, extra=3))[0] == {"inputs": None, "extra": 3}
