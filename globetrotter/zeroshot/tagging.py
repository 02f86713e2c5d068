"""Zero-shot multilingual image tagging (XTD10 paper, section 3.3.2, eqs. 3-5).

An English tagger gives each image its source tags. The trained cross-lingual text->image
adapter embeds the source tags and every tag of a target-language vocabulary into the image
space. For each source tag S_j in order, each target tag T_i is scored

    Score(T_i) = W1 * cos(img, T_i) + W2 * cos(S_j, T_i)         (eqs. 3, 4, 5)

and the best-scoring target tag not already used for an earlier source tag becomes S_j's
translation (one target tag per source tag, none used twice). W1 = 0.65 and W2 = 0.35 are
the paper's values. The image term is what disambiguates ("spring" the season vs. the coil).

Offline, the English tagger is the ImageNet classifier of the pretrained image model: its
top-k classes, named by the first synonym of timm's ImageNet class descriptions.

Measured on Flickr8k (docs/zeroshot.md), single words mapped by an adapter trained on sentences
land far from the images they name, and this tagger stays below a frequency baseline.
:func:`caption_transfer_tags` tags through sentences instead: the adapter maps unpaired
target-language captions into the image space, and an image takes the words most common in the
captions nearest to it.
"""
from __future__ import annotations

import math
import warnings
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Mapping, Sequence

import torch
import torch.nn.functional as F
from backretrieval.errors import BackRetrievalWarning, cli_option_names, given, said
from backretrieval.files import as_array, require_sequence

from globetrotter.errors import UserError

from .retrieval import as_features

if TYPE_CHECKING:
    from .adapter import TextToImageAdapter

PAPER_W1, PAPER_W2 = 0.65, 0.35  # section 3.3.2
IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png", ".webp", ".bmp")
SIMILARITY_BLOCK = 1 << 22
"""Image-caption cosines held at once by :func:`caption_transfer_tags` (16 MiB of float32), in blocks of at least 256
images."""


def cosine_matrix(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """All cosine similarities ``[N, D], [M, D] -> [N, M]``."""
    return F.normalize(a.float(), dim=-1) @ F.normalize(b.float(), dim=-1).T


def check_tag_weights(w1: float, w2: float) -> None:
    """Refuse eq. 5 weights that are not finite numbers >= 0 (a NaN weight made every score NaN and the tags
    silently vanished), or both 0 (every score 0); the message names them as the caller gave them (``w1=nan``, or
    ``--w1 nan`` on the command line)."""
    for name, value in (("w1", w1), ("w2", w2)):
        if not (math.isfinite(value) and value >= 0):
            raise UserError(f"{given(name, value)}: expected a finite tag weight >= 0 (eq. 5; the paper's W1, W2 are "
                            f"{PAPER_W1}, {PAPER_W2})")
    if w1 == 0 and w2 == 0:  # every score 0: the tags were the vocabulary's first lines, in file order
        raise UserError(f"{given('w1', w1)}, {given('w2', w2)}: every tag would score 0 (eq. 5); expected at least one "
                        f"weight > 0 (the paper's are {PAPER_W1}, {PAPER_W2})")


def check_finite(what: str, embeddings: torch.Tensor) -> None:
    """Refuse embeddings holding NaN or inf (a diverged adapter or text encoder): they ranked first or dropped
    tags silently."""
    bad = int((~torch.isfinite(embeddings)).any(dim=-1).sum())
    if bad:
        raise UserError(f"{what}: {bad} of {embeddings.shape[0]} rows hold NaN or inf; expected finite vectors "
                        "(a diverged adapter checkpoint? retrain it)")


def assign_target_tags(
    image_embeddings: torch.Tensor,
    source_tags: torch.Tensor,
    source_embeddings: torch.Tensor,
    target_embeddings: torch.Tensor,
    w1: float = PAPER_W1,
    w2: float = PAPER_W2,
) -> torch.Tensor:
    """Pick one target tag per source tag, never the same one twice per image (eqs. 3-5).

    ``image_embeddings`` ``[N, D]``: the images' frozen features. ``source_tags`` ``[N, S]``
    long: row ``n`` lists image ``n``'s source tags in the tagger's order as rows of
    ``source_embeddings`` ``[V, D]`` (-1 pads). ``target_embeddings`` ``[T, D]``: the target
    vocabulary. Tag embeddings are adapter outputs, so all live in the image space.
    Returns ``[N, S]`` long rows of the target vocabulary (-1 for padding, or when the
    vocabulary is used up). Vectorised over images; the loop runs over the S tag slots. Numpy arrays are taken too.
    """
    image_embeddings, source_embeddings, target_embeddings = (
        as_features(name, x) for name, x in (("image_embeddings", image_embeddings),
                                             ("source_embeddings", source_embeddings),
                                             ("target_embeddings", target_embeddings)))
    source_tags = torch.as_tensor(as_array("source_tags", source_tags))
    if source_tags.ndim != 2 or source_tags.shape[0] != image_embeddings.shape[0]:
        raise ValueError(f"source_tags must be [N={image_embeddings.shape[0]}, S], got {tuple(source_tags.shape)}")
    check_tag_weights(w1, w2)
    for what, emb in (("image features", image_embeddings), ("source tag embeddings", source_embeddings),
                      ("target tag embeddings", target_embeddings)):
        check_finite(what, emb)
        if emb.ndim != 2 or emb.shape[1] != image_embeddings.shape[1]:  # torch's 'mat1 and mat2 shapes cannot be ...'
            raise ValueError(f"{what}: expected [rows, {image_embeddings.shape[-1]}] (the image features' width), got "
                             f"{tuple(emb.shape)}")
    if source_tags.numel() and (source_tags.is_floating_point() or source_tags.min() < -1
                                or source_tags.max() >= len(source_embeddings)):  # torch's IndexError; -2 a pad
        raise ValueError(f"source_tags: expected rows of source_embeddings (integers) in [0, {len(source_embeddings)}) "
                         f"or -1 (padding), got {source_tags.dtype} values in [{source_tags.min().item()}, "
                         f"{source_tags.max().item()}]")
    if len(target_embeddings) == 0 or len(source_embeddings) == 0:  # no target tag (each slot as when the
        # vocabulary is used up), or no source tag (every slot padding): argmax over nothing, an index into nothing
        return torch.full(source_tags.shape, -1, dtype=torch.long)
    sim_image = cosine_matrix(image_embeddings, target_embeddings)  # eq. (3), [N, T]
    sim_source = cosine_matrix(source_embeddings, target_embeddings)  # eq. (4), [V, T]
    n, slots = source_tags.shape
    used = torch.zeros_like(sim_image, dtype=torch.bool)
    chosen = torch.full((n, slots), -1, dtype=torch.long)
    rows = torch.arange(n)
    for j in range(slots):
        present = source_tags[:, j] >= 0
        score = w1 * sim_image + w2 * sim_source[source_tags[:, j].clamp_min(0)]  # eq. (5)
        score = score.masked_fill(used, float("-inf"))
        best = score.argmax(dim=1)
        ok = present & torch.isfinite(score[rows, best])
        chosen[ok, j] = best[ok]
        used[rows[ok], best[ok]] = True
    return chosen


def read_tag_vocabulary(path: str | Path) -> list[str]:
    """Read a target-language tag vocabulary: UTF-8 text, one tag per line.

    Blank lines and lines starting with ``#`` are skipped; surrounding spaces are stripped;
    a repeated tag is kept once, and so is a tag repeated in another case (its first spelling, with one warning
    naming the file and how many were dropped). A missing, unreadable or empty file is a one-line
    :class:`UserError` naming the file (and the line for non-UTF-8 text or a tag holding a tab).
    """
    path = Path(path)
    if not path.is_file():
        raise UserError(f"{path}: tag vocabulary file not found (expected UTF-8 text, one tag per line)")
    tags: dict[str, None] = {}
    with path.open("rb") as fh:
        for lineno, raw in enumerate(fh, 1):
            try:
                line = raw.decode("utf-8-sig" if lineno == 1 else "utf-8").strip()  # a BOM is no part of a tag
            except UnicodeDecodeError:
                raise UserError(f"{path}:{lineno}: not UTF-8 text") from None
            if line and not line.startswith("#"):
                if "\t" in line:  # a table row pasted in became one tag, "Gras\tgrün"
                    raise UserError(f"{path}:{lineno}: the tag {line!r} holds a tab; expected one tag per line")
                tags.setdefault(line, None)
    if not tags:
        raise UserError(f"{path}: tag vocabulary is empty (expected one tag per line)")
    first: dict[str, str] = {}  # casefolded tag -> its first spelling: "Hund" and "hund" would be one tag twice
    dropped = []
    for tag in tags:
        if tag.casefold() in first:
            dropped.append((tag, first[tag.casefold()]))
        else:
            first[tag.casefold()] = tag
    if dropped:
        tag, kept = dropped[0]
        warnings.warn(f"{path}: {len(dropped)} tag(s) differ from an earlier one only in case (e.g. {tag!r} after "
                      f"{kept!r}); kept the first spelling of each", BackRetrievalWarning, stacklevel=2)
    return list(first.values())


@lru_cache(maxsize=1)
def imagenet_class_names() -> tuple[str, ...]:
    """The 1000 ImageNet-1k class names, offline from timm: the first synonym of each class
    description (``"tench, Tinca tinca"`` -> ``"tench"``)."""
    from timm.data import ImageNetInfo

    info = ImageNetInfo()
    return tuple(info.index_to_description(i).split(",")[0].strip() for i in range(info.num_classes()))


def top_k_source_tags(
    logits: torch.Tensor, k: int = 5, class_names: Sequence[str] | None = None
) -> tuple[list[list[str]], torch.Tensor]:
    """Source tags from classifier logits ``[N, C]``: the ``k`` most probable class names per image.

    Classes sharing a name (ImageNet has two "crane"s, two "maillot"s) are one tag whose probability is theirs
    summed, so every image gets ``k`` distinct tags (fewer only when there are fewer names). Returns the tags
    and their probabilities ``[N, k]`` (softmax over all classes), in the same order.
    """
    names = list(class_names) if class_names is not None else list(imagenet_class_names())
    if logits.shape[1] != len(names):
        raise ValueError(f"logits have {logits.shape[1]} classes but {len(names)} class names were given")
    distinct = list(dict.fromkeys(names))
    column = {name: j for j, name in enumerate(distinct)}
    probs = logits.float().softmax(dim=1)
    by_name = torch.zeros(probs.shape[0], len(distinct), dtype=probs.dtype).index_add_(
        1, torch.tensor([column[name] for name in names]), probs)
    top_p, top_i = by_name.topk(min(k, len(distinct)), dim=1)
    tags = [[distinct[j] for j in row] for row in top_i.tolist()]
    return tags, top_p


def index_source_tags(tags: Sequence[Sequence[str]]) -> tuple[list[str], torch.Tensor]:
    """Distinct source tags (first-seen order) and the ``[N, S]`` index matrix (-1 padded)
    that :func:`assign_target_tags` takes."""
    vocab: dict[str, int] = {}
    for row in tags:
        for tag in row:
            vocab.setdefault(tag, len(vocab))
    slots = max((len(row) for row in tags), default=0)
    index = torch.full((len(tags), slots), -1, dtype=torch.long)
    for n, row in enumerate(tags):
        if row:
            index[n, : len(row)] = torch.tensor([vocab[t] for t in row])
    return list(vocab), index


def tag_images(
    image_embeddings: torch.Tensor,
    source_tags: Sequence[Sequence[str]],
    embed_tags: Callable[[list[str]], torch.Tensor],
    target_vocabularies: Mapping[str, Sequence[str]],
    w1: float = PAPER_W1,
    w2: float = PAPER_W2,
) -> dict[str, list[list[str]]]:
    """Translate each image's source tags into every target language (eqs. 3-5).

    ``embed_tags(list[str]) -> Tensor [n, D]`` maps tags into the image space (frozen text
    encoder + trained adapter). ``target_vocabularies`` maps a language to its tag list.
    Returns ``{lang: [[target tag per source tag] per image]}`` (a source tag with no
    target left is dropped).
    """
    for n, row in enumerate(source_tags):  # "dog" was the tags 'd', 'o', 'g'
        require_sequence(row, f"source_tags[{n}]", "tags")
    for lang, vocab in target_vocabularies.items():
        require_sequence(vocab, f"target_vocabularies[{lang!r}]", "tags")
    source_vocab, index = index_source_tags(source_tags)
    source_emb = embed_tags(source_vocab) if source_vocab else torch.zeros(0, image_embeddings.shape[1])
    result: dict[str, list[list[str]]] = {}
    for lang, vocab in target_vocabularies.items():
        vocab = list(vocab)
        target_emb = embed_tags(vocab) if vocab else torch.zeros(0, source_emb.shape[1])
        chosen = assign_target_tags(image_embeddings, index, source_emb, target_emb, w1, w2)
        result[lang] = [[vocab[i] for i in row if i >= 0] for row in chosen.tolist()]
    return result


def tag_image_features(
    adapter: TextToImageAdapter,
    image_features: torch.Tensor,
    classifier: torch.nn.Module,
    embed_texts: Callable[[list[str]], torch.Tensor],
    target_vocabularies: Mapping[str, Sequence[str]],
    source_k: int = 5,
    w1: float = PAPER_W1,
    w2: float = PAPER_W2,
) -> list[dict]:
    """Tag images from their frozen features ``[N, D]``: per image, ``source``, its English source tags (the
    top-``source_k`` classes of the ImageNet ``classifier``, :func:`load_imagenet_classifier`), ``source_probs``
    (their probabilities, 4 decimals) and ``tags``, their translation into each target language (:func:`tag_images`;
    ``embed_texts`` gives the frozen text embeddings that ``adapter`` maps into the image space)."""
    with torch.no_grad():
        source, probs = top_k_source_tags(classifier(image_features), source_k)

    def embed_tags(tags: list[str]) -> torch.Tensor:
        return adapter.embed(embed_texts(tags))

    tags = tag_images(image_features, source, embed_tags, target_vocabularies, w1, w2)
    return [{"source": source[i], "source_probs": [round(float(p), 4) for p in probs[i]],
             "tags": {lang: tags[lang][i] for lang in target_vocabularies}} for i in range(len(source))]


def caption_transfer_tags(
    image_features: torch.Tensor,
    caption_embeddings: torch.Tensor,
    caption_words: Sequence[Sequence[str]],
    neighbours: int = 30,
    n_tags: int = 5,
) -> list[list[str]]:
    """Tags from the captions nearest each image: the ``n_tags`` words most often in its ``neighbours`` nearest.

    ``caption_embeddings`` ``[C, D]``: unpaired captions of the target language (text only) mapped into the
    image space by the adapter; ``caption_words[c]``: the content words of caption ``c``. The captions nearest an
    image (cosine) are those the adapter places where that image is, so their shared words describe it; a word
    counts once per caption, ties go to the nearer caption's words. No image of these captions is used.

    The cosines are taken for a block of images at a time (:data:`SIMILARITY_BLOCK`; at least 256 images, the last
    block too, or all of them): each block's rows are :func:`cosine_matrix`'s (BLAS rounds a product of hundreds of rows
    as the whole one), so each image's nearest captions are the whole matrix's, in the same order; no
    ``[images, captions]`` matrix is held.
    """
    if len(caption_words) != caption_embeddings.shape[0]:
        raise ValueError(f"{caption_embeddings.shape[0]} caption embeddings but {len(caption_words)} word lists")
    check_finite("image features", image_features)
    check_finite("caption embeddings", caption_embeddings)
    k = min(neighbours, caption_embeddings.shape[0])
    captions = F.normalize(caption_embeddings.float(), dim=-1)
    n, rows = image_features.shape[0], max(256, SIMILARITY_BLOCK // max(1, caption_embeddings.shape[0]))
    starts = list(range(0, n, rows))
    if len(starts) > 1 and n - starts[-1] < rows:  # no small last block: it joins the one before
        starts.pop()
    nearest = []
    for start, stop in zip(starts, starts[1:] + [n]):
        block = F.normalize(image_features[start:stop].float(), dim=-1) @ captions.T
        nearest += block.topk(k, dim=1).indices.tolist()
        del block
    tags = []
    for row in nearest:
        counts: dict[str, int] = {}
        for c in row:
            for word in dict.fromkeys(caption_words[c]):  # once per caption, in its order
                counts[word] = counts.get(word, 0) + 1
        tags.append(sorted(counts, key=lambda w: -counts[w])[:n_tags])  # stable: first seen wins ties
    return tags


def image_files(sources: Sequence[str | Path]) -> list[Path]:
    """The image files (:data:`IMAGE_SUFFIXES`) of ``sources``: files as given, folders searched recursively
    (sorted); a missing path, or no image at all, is a one-line error."""
    paths: list[Path] = []
    for src in sources:
        p = Path(src)
        if p.is_dir():
            paths += sorted(q for q in p.rglob("*") if q.suffix.lower() in IMAGE_SUFFIXES)
        elif p.is_file():
            paths.append(p)
        else:
            raise UserError(f"{p}: image file or folder not found")
    if not paths:
        raise UserError(f"no images (.jpg/.png/...) found in {list(sources)}")
    return paths


def load_imagenet_classifier(model_name: str, weights: str | None, online: bool = False) -> torch.nn.Module:
    """The ImageNet classification head of a timm image model: pooled features -> 1000 logits.

    The frozen image features (:class:`backretrieval.images.ImageFeatureExtractor`) are the
    input of this head, so the English source tagger costs one matrix product per image.
    ``weights`` as for the extractor: ``package`` (offline EfficientNet-Lite0), a local
    state-dict file, or ``hub`` (downloads, only with ``online=True``).
    """
    import timm

    from backretrieval.errors import BackRetrievalError
    from backretrieval.image_weights import load_state_dict_in_order, package_weights_path, read_state_dict

    if weights == "package":
        try:  # worded as arguments: the image model of the zeroshot commands is a config's image_encoder, and
            with cli_option_names(False):  # backretrieval's --image-model/--image-weights are none of their flags
                path = package_weights_path(model_name)
        except BackRetrievalError as err:
            raise UserError(str(err)) from None
        model = timm.create_model(model_name, pretrained=False)
        load_state_dict_in_order(model, torch.load(path, map_location="cpu", weights_only=True))
    elif weights == "hub":
        if not online:
            raise UserError(f"image weights 'hub' download {model_name}; opt in with {said('--online', 'online=True')}")
        model = timm.create_model(model_name, pretrained=True)
    else:
        path = Path(weights or "")  # none given (a model no package holds): not found, as a file
        if not path.is_file():
            raise UserError(f"{path}: image weights file not found (or use 'package', 'hub')")
        model = timm.create_model(model_name, pretrained=False)
        state = read_state_dict(path)
        try:
            model.load_state_dict(state)
        except RuntimeError:
            try:
                load_state_dict_in_order(model, state)
            except BackRetrievalError as err:
                raise UserError(f"{path}: not weights of {model_name} with its classifier (by name or in order): "
                                f"{err}") from None
    head = model.get_classifier()
    if not isinstance(head, torch.nn.Module) or getattr(head, "out_features", None) != 1000:
        raise UserError(f"image model {model_name} ({weights}) has no 1000-class ImageNet head to tag with")
    return head.eval()
