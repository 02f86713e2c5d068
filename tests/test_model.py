"""The model: every head of every shipped config receives gradient; tied cloze decoder; shapes."""
from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

from globetrotter.config import load_train_config
from globetrotter.encoder import build_model
from globetrotter.errors import UserError
from globetrotter.training.objective import GlobetrotterObjective

CONFIGS = sorted((Path(__file__).resolve().parents[1] / "configs").glob("*.yaml"))
SMALL = ["model.d_model=32", "model.layers=1", "model.heads=2", "model.ffn=64", "model.embed_dim=16",
         "model.image_backbone_args={}", "data.max_length=8"]


def batch(n: int = 6, vocab: int = 40, size: int = 32) -> dict:
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(3, vocab, (n, 8), generator=g)
    ids[:, 0] = 2
    labels = torch.full_like(ids, -100)
    labels[:, 3] = ids[:, 3]
    masked = ids.clone()
    masked[:, 3] = 1
    return {"input_ids": ids, "attention_mask": torch.ones_like(ids), "masked": masked, "labels": labels,
            "view1": torch.randn(n, 3, size, size, generator=g), "view2": torch.randn(n, 3, size, size, generator=g),
            "truth": torch.tensor([0, 0, 1, 1, 2, 2])}


@pytest.mark.parametrize("config", CONFIGS, ids=[c.stem for c in CONFIGS])
def test_every_trainable_parameter_gets_gradient(config):
    as_written = load_train_config(config).model
    per_language = as_written.text_encoder == "sigurdsson"
    # a config on weights a command writes (configs/flickr8k-round-two.yaml) starts here from the package's ones
    made_later = bool(as_written.image_pretrained) and as_written.image_pretrained.endswith(".safetensors")
    downloads = as_written.image_pretrained == "hub"  # a test never downloads: random init has the same graph
    cfg = load_train_config(config, SMALL + ["model.languages=[en,de]"] * per_language
                            + ["model.image_pretrained=package"] * made_later
                            + ["model.image_pretrained=null"] * downloads)
    if cfg.model.token_ngrams:  # the n-gram rows need the tokenizer's token strings
        from globetrotter.tokenizer import train_tokenizer

        tok = train_tokenizer(["a red dog runs", "ein roter Hund", "un chien rouge court"] * 4, vocab_size=300)
        model = build_model(cfg, tok.get_vocab_size(), tok)
    else:
        model = build_model(cfg, vocab_size=40)
    b = batch()
    lang_ids = model.language_ids(["en", "de", "de", "en", "en", "de"]) if per_language else None
    out = model(b["input_ids"], b["attention_mask"], b["masked"], b["view1"], b["view2"], lang_ids=lang_ids)
    loss, logs = GlobetrotterObjective(cfg.loss)(out, b, b["labels"])
    loss.backward()
    trainable = {n: p for n, p in model.named_parameters() if p.requires_grad}
    assert trainable
    # in the graph (what DDP needs); values may be 0 at init (timm zero-inits the last BN of each block)
    without = [n for n, p in trainable.items() if p.grad is None]
    assert not without, f"{config.name}: no gradient for {without[:5]}"
    expected = {k for k, w in (("text", cfg.loss.text), ("image", cfg.loss.image), ("cross", cfg.loss.cross),
                               ("cloze", cfg.loss.cloze)) if w > 0}
    assert {k.split("/")[1] for k in logs if k.startswith("loss/")} == expected


def test_cloze_decoder_is_tied_to_the_token_embeddings():
    cfg = load_train_config(None, SMALL)
    model = build_model(cfg, vocab_size=40)
    assert model.cloze_head.token_embedding.weight is model.text.token_embedding.weight
    logits = model.cloze_head(torch.zeros(2, 3, 32))
    assert logits.shape == (2, 3, 40)


def test_supervised_alpha_uses_the_truth_ids():
    cfg = load_train_config(CONFIGS[0].parent / "supervised.yaml", SMALL + ["model.token_ngrams=null"])
    model = build_model(cfg, vocab_size=40)
    b = batch()
    out = model(b["input_ids"], b["attention_mask"], b["masked"], b["view1"], b["view2"])
    _, logs = GlobetrotterObjective(cfg.loss)(out, b, b["labels"])
    # truth pairs (0,1), (2,3), (4,5): 6 ordered positives of 30 off-diagonal pairs, all true
    assert logs["alpha/positive_fraction"] == pytest.approx(6 / 30)
    assert logs["alpha/precision"] == pytest.approx(1.0)


def test_frozen_image_backbone_keeps_its_weights_and_statistics():
    """model.freeze_image_backbone: the backbone never changes (no gradient, BatchNorm in eval); heads still learn."""
    cfg = load_train_config(None, SMALL + ["model.image_backbone_args={channels: [8, 16, 32, 64], stem_width: 8}",
                                           "model.freeze_image_backbone=true"])
    model = build_model(cfg, vocab_size=40).train()
    assert not model.image.training and model.text.training
    before = {k: v.clone() for k, v in model.image.state_dict().items()}
    heads = model.image_head_x.net[0].weight.clone()
    optimizer = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=0.1)
    b = batch()
    out = model(b["input_ids"], b["attention_mask"], b["masked"], b["view1"], b["view2"])
    loss, _ = GlobetrotterObjective(cfg.loss)(out, b, b["labels"])
    loss.backward()
    optimizer.step()
    assert all(torch.equal(before[k], v) for k, v in model.image.state_dict().items()), "backbone or BN stats changed"
    assert all(p.grad is None for p in model.image.parameters())
    assert not torch.equal(heads, model.image_head_x.net[0].weight), "the image head must still train"


def test_feature_target_head_centres_the_frozen_features_and_learns_only_the_text_side():
    """model.image_head_x=features: L_x's image side is the frozen backbone's centred features (no learned image
    head); the running centre is a buffer (saved with the checkpoint) that evaluation uses as it stands."""
    cfg = load_train_config(None, SMALL + ["model.image_backbone_args={channels: [8, 16, 32, 64], stem_width: 8}",
                                           "model.freeze_image_backbone=true", "model.image_head_x=features"])
    model = build_model(cfg, vocab_size=40).train()
    n = model.image.num_features
    assert not list(model.image_head_x.parameters()), "no learned image head for L_x"
    assert model.text_head_x.net[-1].out_features == n, "the caption head x outputs the backbone's width"
    g = torch.Generator().manual_seed(0)
    feats = torch.randn(6, n, generator=g).abs() + 1.0  # cached pooled features: all positive, as after a ReLU/SiLU
    b = batch()
    out = model(b["input_ids"], b["attention_mask"], b["masked"], feats, feats.flip(0))
    unit = torch.nn.functional.normalize(feats, dim=-1)
    assert torch.allclose(model.image_head_x.mean, unit.mean(0)), "the first batch sets the centre"
    expected = torch.nn.functional.normalize(unit - unit.mean(0), dim=-1)
    assert torch.allclose(out["image_x1"], expected, atol=1e-6)
    assert out["image_x1"].mean(0).norm() < unit.mean(0).norm(), "centred: the shared component is gone"
    loss, _ = GlobetrotterObjective(cfg.loss)(out, b, b["labels"])
    loss.backward()
    grad = model.text_head_x.net[0].weight.grad
    assert grad is not None and grad.abs().sum() > 0, "the loss reaches the text head"
    centre = model.image_head_x.mean.clone()
    model.eval()
    model(b["input_ids"], b["attention_mask"], b["masked"], feats * 3 + 5, feats)
    assert torch.equal(model.image_head_x.mean, centre), "evaluation must not move the centre"
    assert "image_head_x.mean" in model.state_dict()


def test_feature_target_head_needs_a_frozen_backbone():
    with pytest.raises(ValueError, match="freeze_image_backbone"):
        build_model(load_train_config(None, SMALL + ["model.image_head_x=features"]), vocab_size=40)


def test_token_embeddings_get_their_own_learning_rate_group_only_when_asked():
    from globetrotter.training.step import param_groups

    model = build_model(load_train_config(None, SMALL), vocab_size=40)
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    plain = param_groups(model, 0.01)
    assert len(plain) == 2 and sum(p.numel() for g in plain for p in g["params"]) == trainable
    groups = param_groups(model, 0.01, lr=1e-3, embedding_lr_scale=10.0)
    assert len(groups) == 3 and sum(p.numel() for g in groups for p in g["params"]) == trainable
    tokens = groups[2]
    assert tokens["lr"] == pytest.approx(1e-2) and tokens["weight_decay"] == 0.0
    assert tokens["params"] == [model.text.token_embedding.weight], "the tied cloze decoder is the same tensor"
    optimizer = torch.optim.AdamW(groups, lr=1e-3)
    assert [g["lr"] for g in optimizer.param_groups] == pytest.approx([1e-3, 1e-3, 1e-2])
    sigurdsson = Path(__file__).resolve().parents[1] / "configs" / "sigurdsson.yaml"
    bag = build_model(load_train_config(sigurdsson, SMALL + ["model.languages=[en,de]"]), vocab_size=40)
    assert param_groups(bag, 0.01, lr=1e-3, embedding_lr_scale=10.0)[2]["params"] == [bag.text.word_embedding.weight]
    with pytest.raises(UserError, match="embedding_lr_scale must be > 0"):
        load_train_config(None, SMALL + ["optim.embedding_lr_scale=0"])


@pytest.mark.parametrize("head", ["x", "t"])
@pytest.mark.parametrize("pooling", ["sentence", "mean"])
def test_cross_modal_head_reads_the_pooling_the_config_names(pooling, head):
    """model.text_pooling_x and model.text_pooling_t: each text head reads the pooling its key names."""
    cfg = load_train_config(None, SMALL + [f"model.text_pooling_{head}={pooling}"])
    model = build_model(cfg, vocab_size=40).eval()
    b = batch()
    mask = b["attention_mask"].clone()
    mask[:, 6:] = 0  # padding must not enter the mean
    with torch.no_grad():
        out = model(b["input_ids"], mask)
        sentence, mean = model.sentence_states(b["input_ids"], mask)
    text_head = getattr(model, f"text_head_{head}")
    expected = text_head(sentence if pooling == "sentence" else mean)
    other = text_head(mean if pooling == "sentence" else sentence)
    torch.testing.assert_close(out[f"text_{head}"], expected)
    assert not torch.allclose(out[f"text_{head}"], other)
    # the padded positions hold real token ids: the same captions cut to their 6 tokens, with no padding at all, give
    # the same features (attention and pooling both ignore padding; `expected` above shares the model's own path)
    with torch.no_grad():
        unpadded = model(b["input_ids"][:, :6], mask[:, :6])
    for head in ("text_x", "text_t"):
        torch.testing.assert_close(out[head], unpadded[head], atol=1e-5, rtol=1e-5)


def embedded(model, ids: torch.Tensor) -> torch.Tensor:
    """The text encoder's input: token + position embeddings (B, L, d)."""
    return model.text.token_embedding(ids) + model.text.position_embedding(torch.arange(ids.shape[1]))[None]


def masked_mean(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    return (x * mask[..., None]).sum(1) / mask.sum(1, keepdim=True)


def model_and_padded_batch(overrides: list[str], length: int):
    """A small eval-mode model of ``SMALL + overrides``, a batch, and its mask with padding after ``length`` tokens."""
    cfg = load_train_config(None, SMALL + overrides)
    b = batch()
    mask = b["attention_mask"].clone()
    mask[:, length:] = 0
    return cfg, build_model(cfg, vocab_size=40).eval(), b, mask


@pytest.mark.parametrize("residual_init", ["default", "zero"])
def test_zero_residual_init_starts_the_encoder_as_its_bag_of_embeddings(residual_init):
    cfg, model, b, mask = model_and_padded_batch(["model.layers=2", f"model.residual_init={residual_init}",
                                                  "model.text_pool_norm=pooled"], 6)
    with torch.no_grad():
        _, mean = model.sentence_states(b["input_ids"], mask)
        bag = model.text.norm(masked_mean(embedded(model, b["input_ids"]), mask))
    assert torch.allclose(mean, bag, atol=1e-5) == (residual_init == "zero")

    # the zeroed projections still learn, and through them the blocks: after one step every weight has gradient
    model.train()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(2):
        optimizer.zero_grad()
        out = model(b["input_ids"], mask, b["masked"], b["view1"], b["view2"])
        GlobetrotterObjective(cfg.loss)(out, b, b["labels"])[0].backward()
        optimizer.step()
    for name, p in model.text.transformer.named_parameters():
        assert p.grad is not None and p.grad.abs().sum() > 0, name


@pytest.mark.parametrize("norm", ["token", "pooled"])
def test_text_pool_norm_places_the_final_layernorm(norm):
    _, model, b, mask = model_and_padded_batch([f"model.text_pool_norm={norm}"], 5)
    with torch.no_grad():
        sentence, mean = model.sentence_states(b["input_ids"], mask)
        stream = model.text(b["input_ids"], mask, normed=False)
        normed = model.text.norm(stream)
    torch.testing.assert_close(sentence, normed[:, 0])  # one token: the same either way
    expected = model.text.norm(masked_mean(stream, mask)) if norm == "pooled" else masked_mean(normed, mask)
    torch.testing.assert_close(mean, expected)


def test_the_cross_language_share_counts_the_positive_pairs_whose_captions_differ_in_language():
    """alpha/cross_language_share: of the pairs with α > 0, the share in two languages. Captions en, en, de: the
    positive pairs (0,1), (1,0) are in one language, (0,2), (2,0), (1,2), (2,1) in two: 4 of 6; no positive pair
    leaves it undefined (NaN), never 0."""
    from globetrotter.training.objective import language_codes

    codes = language_codes(["en", "en", "de"])
    alpha = torch.tensor([[1.0, 0.5, 0.2], [0.5, 1.0, 0.3], [0.2, 0.3, 1.0]]) - torch.eye(3)
    assert GlobetrotterObjective._cross_language_share(alpha, codes) == pytest.approx(4 / 6)
    alpha[0, 1] = alpha[1, 0] = 0.0  # only the cross-language pairs left
    assert GlobetrotterObjective._cross_language_share(alpha, codes) == pytest.approx(1.0)
    assert math.isnan(GlobetrotterObjective._cross_language_share(torch.zeros(3, 3), codes))
    assert language_codes(["en", "de", "en"]).tolist()[0] == language_codes(["en"]).tolist()[0]


def test_the_feature_head_centres_on_a_running_mean_of_the_training_features():
    """image_head_x=features: the first training batch's mean (of the L2-normalised features) is the centre, each
    later batch moves it by ``momentum`` towards its own mean; in eval mode the centre stays; the output is the
    normalised feature minus the centre, L2-normalised."""
    from globetrotter.models.heads import CentredFeatureHead

    g = torch.Generator().manual_seed(0)
    first, second = torch.randn(5, 4, generator=g) * 3, torch.randn(7, 4, generator=g) + 1

    def unit(x: torch.Tensor) -> torch.Tensor:
        return x / x.norm(dim=1, keepdim=True)

    head = CentredFeatureHead(4, momentum=0.1).train()
    out = head(first)
    centre = unit(first).mean(0)
    assert torch.allclose(head.mean, centre, atol=1e-6)
    assert torch.allclose(out, unit(unit(first) - centre), atol=1e-6)
    head(second)
    centre = 0.9 * centre + 0.1 * unit(second).mean(0)
    assert torch.allclose(head.mean, centre, atol=1e-6) and int(head.seen) == 2
    head.eval()
    out = head(second)
    assert torch.allclose(head.mean, centre, atol=1e-6) and int(head.seen) == 2  # evaluation never moves it
    assert torch.allclose(out, unit(unit(second) - centre), atol=1e-6)


def test_the_objectives_cloze_loss_and_accuracy_are_the_per_token_mean_over_the_masked_tokens():
    """L_c and cloze/accuracy of the training objective, on [B, L, V] logits and on the [n_targets, V] logits of the
    masked positions alone (the model's training forward), against a loop over the masked tokens: mean
    cross-entropy, and the share whose highest logit is the label."""
    g = torch.Generator().manual_seed(3)
    logits = torch.randn(2, 4, 7, generator=g)
    labels = torch.full((2, 4), -100)
    labels[0, 1], labels[1, 0], labels[1, 3] = 5, 2, int(logits[1, 3].argmax())  # one certainly right
    labels[0, 2] = int(logits[0, 2].argmin())  # one certainly wrong
    picked = [(b, t) for b in range(2) for t in range(4) if labels[b, t] != -100]
    ce = [float(torch.logsumexp(logits[b, t], 0) - logits[b, t, labels[b, t]]) for b, t in picked]
    right = [int(logits[b, t].argmax() == labels[b, t]) for b, t in picked]
    objective = GlobetrotterObjective(load_train_config(None, SMALL).loss)
    for form in (logits, logits[labels != -100]):
        loss, accuracy = objective._cloze(form, labels)
        assert float(loss) == pytest.approx(sum(ce) / len(ce), rel=1e-5)
        assert float(accuracy) == pytest.approx(sum(right) / len(right))
    assert 0 < sum(right) < len(right)


def test_alpha_precision_is_logged_only_for_a_batch_whose_every_truth_is_known():
    """alpha/precision and alpha/recall compare α with the true translation pairs: with supervised α (α > 0 on the
    true pairs) both are 1. A batch holding captions of unknown truth (-1) has no such pairs to compare with: the
    two are left out rather than counting two unknowns as a true pair."""
    import torch.nn.functional as F

    loss = load_train_config(None, SMALL + ["loss.alpha_source=supervised", "loss.image=0", "loss.cross=0",
                                            "loss.cloze=0"]).loss
    out = {"text_t": F.normalize(torch.randn(4, 16, generator=torch.Generator().manual_seed(0)), dim=-1)}
    _, logs = GlobetrotterObjective(loss)(out, {"truth": torch.tensor([0, 0, 1, 1])}, None)
    assert logs["alpha/precision"] == pytest.approx(1.0) and logs["alpha/recall"] == pytest.approx(1.0)
    _, logs = GlobetrotterObjective(loss)(out, {"truth": torch.tensor([0, 0, -1, -1])}, None)
    assert "alpha/precision" not in logs and "alpha/recall" not in logs and "alpha/mean" in logs


def test_models_built_in_python_refuse_what_their_config_cannot_read():
    """A config built in Python need not be validated: the model itself refuses a Sigurdsson encoder with a cloze
    loss, n-grams without the tokenizer's token strings, and cached (pooled) image features with a backbone that
    trains, each naming the setting."""
    from dataclasses import replace

    from globetrotter.models import GlobetrotterModel

    cfg = load_train_config(None, SMALL)
    with pytest.raises(ValueError, match="sigurdsson is a bag of words with no language model: set loss.cloze=0"):
        GlobetrotterModel(replace(cfg.model, text_encoder="sigurdsson", languages=["en"]), cfg.loss, 40, 8)
    ngrams = replace(cfg, model=replace(cfg.model, token_ngrams=[2, 3]))
    with pytest.raises(ValueError, match=r"model.token_ngrams builds the n-grams of the tokenizer's tokens: pass tokenizer="):
        build_model(ngrams, 40)
    with pytest.raises(ValueError, match=r"model.token_ngrams needs the tokenizer's 40 token strings \(vocabulary=...\)"):
        GlobetrotterModel(ngrams.model, cfg.loss, 40, 8, vocabulary=["a", "b"])
    model = build_model(replace(cfg, model=replace(cfg.model, freeze_image_backbone=False)), 40)
    b = batch()
    with pytest.raises(ValueError, match=r"cached image features need a frozen image backbone"):
        model(b["input_ids"], b["attention_mask"], None, torch.randn(6, 64), torch.randn(6, 64))
