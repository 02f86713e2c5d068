"""The shared byte-level BPE tokenizer (one vocabulary for every language and script).

Trained with HF ``tokenizers`` on the *train* split's captions only, saved as a single
``tokenizer.json`` that training and evaluation load. Byte-level BPE never produces an
unknown token, so any script round-trips exactly. Every encoded caption starts with the
sentence token (the learned sentence embedding of the Globetrotter text encoder).

``normalization="uncased"`` (``data.tokenizer_normalization``) folds case and accents before
the BPE (lower case, and the accents of Latin letters stripped, as multilingual uncased BERT and
XLM do; unlike them it keeps the marks of other scripts, which are letters there: Cyrillic й and ё,
Japanese が, Greek ά) and puts a space before every caption, so a word gets the same tokens at the
start of a caption as elsewhere. The tokenizer file carries its normalisation, so evaluation encodes text as training did.
"""
from __future__ import annotations

import json
import os
from functools import lru_cache
from pathlib import Path
from typing import Callable, Iterable, Iterator, cast

from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

from backretrieval.records import json_text
from data_prep.checksums import file_sha256

from .errors import UserError

PAD, MASK, SENTENCE = "<pad>", "<mask>", "<s>"
SPECIAL_TOKENS = (PAD, MASK, SENTENCE)
NORMALIZATIONS = ("none", "uncased")
"""``none``: the text as written (the paper's BPE); ``uncased``: Latin accents stripped, lower case, a leading space."""


def default_file_name(normalization: str) -> str:
    """The file a data root keeps its tokenizer in: ``tokenizer.json``, or ``tokenizer-<normalization>.json``, so that
    tokenizers of both settings can sit side by side."""
    return "tokenizer.json" if normalization == "none" else f"tokenizer-{normalization}.json"


def _uncased_normalizer() -> normalizers.Normalizer:
    """Decompose (NFD), drop the combining marks that follow a Latin letter, recompose (NFC), lower-case."""
    return normalizers.Sequence([normalizers.NFD(), normalizers.Replace(Regex(r"(?<=[A-Za-z])\p{Mn}+"), ""),
                                 normalizers.NFC(), normalizers.Lowercase()])


@lru_cache(maxsize=1)
def _uncased_json() -> str:
    tok = Tokenizer(models.BPE())
    tok.normalizer = _uncased_normalizer()
    return json.dumps(json.loads(tok.to_str())["normalizer"], sort_keys=True)


MIN_VOCAB_SIZE = 260
"""The smallest vocabulary a BPE can learn anything in: the 256 byte symbols, the special tokens and one merge."""


def train_tokenizer(texts: Iterable[str], vocab_size: int = 30000, min_frequency: int = 2,
                    normalization: str = "none") -> Tokenizer:
    """Train a byte-level BPE tokenizer on ``texts`` with the special tokens pad, mask, sentence.

    Ids 0, 1, 2 are ``<pad>``, ``<mask>``, ``<s>``; ``encode`` prepends ``<s>``. ``normalization`` is one of
    :data:`NORMALIZATIONS`; the tokenizer applies it to every text it encodes.
    """
    if normalization not in NORMALIZATIONS:
        raise ValueError(f"tokenizer normalization must be one of {NORMALIZATIONS}, got {normalization!r}")
    tok = Tokenizer(models.BPE())
    uncased = normalization == "uncased"
    if uncased:
        tok.normalizer = _uncased_normalizer()
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=uncased, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=min_frequency,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(texts, trainer=trainer)
    sentence_id = tok.token_to_id(SENTENCE)
    tok.post_processor = processors.TemplateProcessing(
        single=f"{SENTENCE} $A", special_tokens=[(SENTENCE, sentence_id)]
    )
    return literal_specials(tok)


def normalization_of(tok: Tokenizer) -> str:
    """Which of :data:`NORMALIZATIONS` ``tok`` applies (read from its JSON); ``"other"`` for any other setting."""
    data = json.loads(tok.to_str())
    norm, pre = data.get("normalizer"), data.get("pre_tokenizer") or {}
    if norm is None and not pre.get("add_prefix_space"):
        return "none"
    if norm is not None and json.dumps(norm, sort_keys=True) == _uncased_json() and pre.get("add_prefix_space"):
        return "uncased"
    return "other"


@lru_cache(maxsize=1)
def _byte_of_symbol() -> dict[str, int]:
    """Byte-level BPE's printable symbol of each byte (GPT-2's ``bytes_to_unicode``), inverted."""
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    symbols, extra = {}, 0
    for b in range(256):
        if b in printable:
            symbols[chr(b)] = b
        else:
            symbols[chr(256 + extra)] = b
            extra += 1
    return symbols


def token_bytes(token: str) -> bytes:
    """The bytes a byte-level BPE token stands for (``"Ġκ"`` -> ``b" \\xce\\xba"``)."""
    table = _byte_of_symbol()
    return bytes(table[c] for c in token)


def token_strings_of(tok: Tokenizer, start: int = 0, stop: int | None = None) -> list[str]:
    """The tokens of ids ``start`` .. ``stop - 1`` (default: to the vocabulary's end), each id's string: every id
    below the vocabulary size has one (``id_to_token``'s None is for the ids beyond)."""
    stop = tok.get_vocab_size() if stop is None else stop
    return cast(list[str], [tok.id_to_token(i) for i in range(start, stop)])


def extend_tokenizer(tok: Tokenizer, texts: list[str], vocab_size: int, known: Iterable[str]) -> tuple[Tokenizer, int]:
    """``tok`` with the tokens of a new language appended: ids of the old tokens unchanged.

    A byte-level BPE of ``vocab_size`` is trained on ``texts`` (the new language's captions). Its
    merges are appended after ``tok``'s, in their order (so they rank last), when both parts are
    already tokens and the merged token's bytes occur in none of the ``known`` texts (the captions
    ``tok`` was trained on): such a token can never form in those texts, so they tokenize exactly as
    before. New tokens take the ids from ``tok``'s vocabulary size on. Returns the extended tokenizer
    and the number of tokens added (0 when ``texts`` share the old languages' script and merges).
    """
    normalization = normalization_of(tok)
    if normalization == "other":
        raise UserError("extend_tokenizer: the tokenizer's normalisation is none of "
                        f"{NORMALIZATIONS}; only a tokenizer made by train_tokenizer can be extended")
    learnt = json.loads(train_tokenizer(texts, vocab_size, normalization=normalization).to_str())["model"]["merges"]
    data = json.loads(tok.to_str())
    vocab, merges = data["model"]["vocab"], data["model"]["merges"]
    # the known texts as the BPE sees them: normalised, with the leading space ``uncased`` adds
    prefix, norm = (" " if normalization == "uncased" else ""), tok.normalizer
    corpus = "\n".join(prefix + (norm.normalize_str(t) if norm is not None else t) for t in known).encode("utf-8")
    added = 0
    for merge in learnt:
        left, right = merge.split(" ") if isinstance(merge, str) else merge
        token = left + right
        if token in vocab or left not in vocab or right not in vocab or token_bytes(token) in corpus:
            continue
        vocab[token] = len(vocab)
        merges.append(merge)
        added += 1
    return literal_specials(Tokenizer.from_str(json.dumps(data))), added


def load_tokenizer(path: str | Path) -> Tokenizer:
    """Load a ``tokenizer.json`` written by :func:`train_tokenizer` (one-line error if unusable)."""
    path = Path(path)
    if not path.is_file():
        raise UserError(f"{path}: tokenizer file not found (make one with `globetrotter-data tokenizer`)")
    try:
        tok = Tokenizer.from_file(str(path))
    except Exception as err:  # tokenizers raises plain Exception on bad JSON
        raise UserError(f"{path}: not a tokenizers JSON file ({str(err).splitlines()[0]})") from None
    missing = [t for t in SPECIAL_TOKENS if tok.token_to_id(t) is None]
    if missing:
        raise UserError(f"{path}: tokenizer lacks special tokens {missing}")
    return literal_specials(tok)


def literal_specials(tok: Tokenizer) -> Tokenizer:
    """``tok`` encoding the text of a special token in a caption (``"a <pad> circle"``) as plain text, never as
    the special id (a runtime setting: the tokenizer file does not keep it). Returns ``tok``."""
    tok.encode_special_tokens = True
    return tok


def special_ids(tok: Tokenizer) -> dict[str, int]:
    """Ids of the special tokens: ``{"pad": 0, "mask": 1, "sentence": 2}``."""
    return {"pad": _special_id(tok, PAD), "mask": _special_id(tok, MASK), "sentence": _special_id(tok, SENTENCE)}


def _special_id(tok: Tokenizer, token: str) -> int:
    """The id of the special token ``token``; a tokenizer without it (not made by :func:`train_tokenizer`) is a
    one-line :class:`UserError`."""
    found = tok.token_to_id(token)
    if found is None:
        raise UserError(f"tokenizer lacks special token {token!r} (make one with `globetrotter-data tokenizer`)")
    return found


def provenance_path(path: str | Path) -> Path:
    """Where the provenance record of the tokenizer file ``path`` lives: ``<stem>.provenance.json`` beside it
    (the tokenizers library refuses unknown keys inside the tokenizer's own JSON)."""
    path = Path(path)
    return path.with_name(f"{path.stem}.provenance.json")


def read_provenance(path: str | Path) -> dict | None:
    """The provenance record of the tokenizer file ``path`` (what it was trained on), or None when it has none.
    A damaged record (not JSON, not an object, ``splits`` not a list of objects, a field of the wrong type) is a
    one-line :class:`UserError` naming it."""
    record = provenance_path(path)
    if not record.is_file():
        return None
    problem: str | None
    try:
        provenance = json.loads(record.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        provenance, problem = None, f"not UTF-8 JSON ({err})"
    else:
        problem = _provenance_problem(provenance)
    if problem:
        raise UserError(f"{record}: damaged tokenizer provenance record: {problem}; expected the JSON object a trained "
                        f"tokenizer's record holds, with a list of \"splits\" objects (delete it and {Path(path).name} "
                        f"to train the tokenizer again)")
    return provenance


def _provenance_problem(provenance: object) -> str | None:
    """What makes ``provenance`` no record :func:`save_tokenizer` could have written, or None."""
    if not isinstance(provenance, dict):
        return f"it holds a {type(provenance).__name__}, not an object"
    splits = provenance.get("splits", [])
    if not isinstance(splits, list) or not all(isinstance(s, dict) for s in splits):
        return f"\"splits\" is {json.dumps(splits)[:40]}, not a list of objects"
    fields = [(provenance, "tokenizer_sha256", str), (provenance, "vocab_size", int)]
    fields += [(s, key, kind) for s in splits for key, kind in
               (("path", str), ("checksum", str), ("images_in_several_languages", int), ("languages", list))]
    for where, key, kind in fields:
        value = where.get(key)
        if value is not None and (not isinstance(value, kind) or isinstance(value, bool)):
            return f"\"{key}\" is {json.dumps(value)[:40]}, not a {'number' if kind is int else kind.__name__}"
    return None


def _write_atomic(path: Path, write: Callable[[Path], object]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")  # two runs that train the same file do not clash
    try:
        write(tmp)
        tmp.replace(path)
    finally:
        tmp.unlink(missing_ok=True)  # a write or move that failed leaves nothing behind


def save_tokenizer(tok: Tokenizer, path: str | Path, provenance: dict | None = None) -> Path:
    """Write ``tokenizer.json`` atomically, then its ``provenance`` record (:func:`provenance_path`) with the file's
    sha256 (``tokenizer_sha256``: a record describes this file only). Without ``provenance`` a record left beside
    ``path`` by an earlier file is removed: it would describe another tokenizer."""
    path = Path(path)
    _write_atomic(path, lambda tmp: tok.save(str(tmp)))
    record = provenance_path(path)
    if provenance is None:
        record.unlink(missing_ok=True)
        return path
    provenance = {**provenance, "tokenizer_sha256": file_sha256(path)}
    _write_atomic(record, lambda tmp: tmp.write_text(json_text(provenance, indent=2, ensure_ascii=False),
                                                     encoding="utf-8"))
    return path


def copy_tokenizer(source: str | Path, dest: str | Path) -> None:
    """Copy a tokenizer file and its provenance record (if any) to ``dest``."""
    import shutil

    shutil.copy(source, dest)
    if provenance_path(source).is_file():
        shutil.copy(provenance_path(source), provenance_path(dest))


def shows_parallel_text(provenance: dict | None) -> bool:
    """Whether a provenance record says the tokenizer saw a split that captions an image in several languages."""
    return bool(provenance and any(s.get("images_in_several_languages", 0) > 0 for s in provenance.get("splits", [])))


def provenance_languages(provenance: dict | None) -> set[str] | None:
    """The languages whose captions a tokenizer was trained on (an adapted tokenizer's new language included), from
    its provenance record; None when the record does not say (no record, or one written before it named them)."""
    if not provenance or not provenance.get("splits"):
        return None
    found: set[str] = set()
    for split in provenance["splits"]:
        if "languages" not in split:
            return None
        found.update(split["languages"])
    record: dict | None = provenance
    while record:  # an adapted tokenizer extends its run's: each adaptation's new language
        found.update([record["adapt"]["language"]] if record.get("adapt", {}).get("language") else [])
        record = record.get("extends")
    return found


HELD_OUT_SPLITS = ("val", "test")
"""The kinds of split (a manifest's ``split``) the shared tokenizer never sees: checkpoints are chosen and models
scored on their captions."""


def refuse_held_out_split(split_dir: str | Path, manifest: dict) -> None:
    """A one-line :class:`UserError` when the split at ``split_dir`` (its ``manifest``) is a val or test split."""
    kind = manifest.get("split")
    if kind in HELD_OUT_SPLITS:
        raise UserError(f"{split_dir}: a {kind!r} split (its manifest says so); the shared tokenizer is trained on a "
                        f"train split's captions only, never val or test")


def other_split_warning(split_dir: str | Path, manifest: dict) -> str | None:
    """Why training the shared tokenizer on the split at ``split_dir`` (its ``manifest``) is doubtful, when the
    manifest calls it neither train nor val/test (e.g. ``adapt``: captions of languages held out for adaptation);
    else ``None``."""
    kind = manifest.get("split")
    if kind in (None, "train", *HELD_OUT_SPLITS):
        return None
    return f"{split_dir} is a {kind!r} split; the tokenizer should see train captions only"


def train_tokenizer_on_split(split_dir: str | Path, path: str | Path, vocab_size: int = 30000, min_frequency: int = 2,
                             normalization: str = "none") -> Path:
    """Train the shared BPE on the captions of ``split_dir`` and save it to ``path`` with its provenance: the split's
    folder, manifest checksum, caption count and how many of its images are captioned in several languages.

    The split must keep the one-language rule (each image captioned in one language): a BPE trained on parallel
    captions would carry translation pairs into every model that shares it. A split that breaks the rule is a
    :class:`UserError` naming it and the first such image; so is a val or test split (:func:`refuse_held_out_split`)."""
    from data_prep.shards import iter_metas, read_manifest
    from data_prep.split_rule import images_in_several_languages

    manifest = read_manifest(split_dir)
    refuse_held_out_split(split_dir, manifest)
    several = images_in_several_languages(iter_metas(split_dir))  # the split is streamed twice, never held
    if several:
        first, langs = next(iter(several.items()))
        raise UserError(f"{split_dir}: {len(several)} image(s) captioned in more than one language (e.g. {first!r}: "
                        f"{','.join(langs)}); the shared tokenizer is trained on a one-language split (data.tokenizer_split)")
    count = 0

    def captions() -> Iterator[str]:
        nonlocal count
        for m in iter_metas(split_dir):
            count += 1
            yield m["caption"]

    tok = train_tokenizer(captions(), vocab_size, min_frequency, normalization)
    provenance = {"splits": [{"path": str(Path(split_dir).resolve()), "split": manifest.get("split"),
                              "checksum": manifest.get("checksum"), "captions": count,
                              "languages": sorted(manifest.get("languages", {})),
                              "images_in_several_languages": 0}],
                  "vocab_size": vocab_size, "min_frequency": min_frequency, "normalization": normalization}
    return save_tokenizer(tok, path, provenance)


def encode_batch(tok: Tokenizer, texts: list[str], max_length: int,
                 cut: list[int] | None = None) -> tuple[list[list[int]], list[list[int]]]:
    """Token ids and attention masks, truncated to ``max_length`` and padded to the longest text. ``cut``: where
    given, the positions (in ``texts``) of the texts longer than ``max_length`` tokens are appended to it."""
    encs = tok.encode_batch(texts)
    pad_id = _special_id(tok, PAD)
    if cut is not None:
        cut.extend(i for i, e in enumerate(encs) if len(e.ids) > max_length)
    ids = [e.ids[:max_length] for e in encs]
    width = max(len(x) for x in ids) if ids else 1
    mask = [[1] * len(x) + [0] * (width - len(x)) for x in ids]
    ids = [x + [pad_id] * (width - len(x)) for x in ids]
    return ids, mask
