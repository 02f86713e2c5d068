"""Tests of the four Globetrotter losses, the transitive targets α and feature gathering.

Each loss is checked against a reference written with explicit loops over i, j from the
paper's formula, against hand-computed values on tiny cases, and for gradient flow.
The gather test runs 2 CPU processes (gloo) and compares with one process.
"""
from __future__ import annotations

import math

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn.functional as F
from torch import nn

from globetrotter.losses import (
    IGNORE_INDEX,
    ClozeLoss,
    CrossModalLoss,
    NTXentLoss,
    TransitiveTextLoss,
    alpha_stats,
    cloze_accuracy,
    gather_features,
    gather_many,
    mask_tokens,
    rank_offset,
    supervised_alpha,
    transitive_alpha,
)

# --------------------------------------------------------------------------- references


def _unit(x: torch.Tensor) -> list[list[float]]:
    """Rows L2-normalised, as Python lists (float64)."""
    return F.normalize(x.double(), dim=-1).tolist()


def _dot(a: list[float], b: list[float]) -> float:
    return sum(x * y for x, y in zip(a, b))


def ref_ntxent(z1, z2, tau):
    z = _unit(torch.cat([z1, z2]))
    m, n = len(z), len(z) // 2
    total = 0.0
    for i in range(m):
        pos = (i + n) % m
        denom = sum(math.exp(_dot(z[i], z[k]) / tau) for k in range(m) if k != i)
        total += -math.log(math.exp(_dot(z[i], z[pos]) / tau) / denom)
    return total / m


def ref_infonce(text, image, tau):
    t, v = _unit(text), _unit(image)
    n = len(t)
    sim = [[_dot(v[i], t[j]) for j in range(n)] for i in range(n)]  # α^x_ij = sim(z^v_i, z^l_j)
    total = 0.0
    for i in range(n):
        row = sum(math.exp(sim[i][j] / tau) for j in range(n))
        col = sum(math.exp(sim[j][i] / tau) for j in range(n))
        total += -math.log(math.exp(sim[i][i] / tau) / row) - math.log(math.exp(sim[i][i] / tau) / col)
    return total / (2 * n)


def ref_alpha(text_x, img_x, img_v, margin, variant):
    t, x, v = _unit(text_x), _unit(img_x), _unit(img_v)
    n = len(t)
    xm = [_dot(t[i], x[i]) for i in range(n)]
    vis = [[_dot(v[i], v[j]) for j in range(n)] for i in range(n)]
    if variant == "paper":
        path = [[(xm[i] + 1) / 2 * (vis[i][j] + 1) / 2 * (xm[j] + 1) / 2 for j in range(n)] for i in range(n)]
    else:
        prod = [[xm[i] * xm[j] for j in range(n)] for i in range(n)]
        lo = min(min(r) for r in prod)
        hi = max(max(r) for r in prod)
        path = [[vis[i][j] * (0.75 + 0.5 * (prod[i][j] - lo) / (hi - lo)) for j in range(n)] for i in range(n)]
        top = max(path[i][j] for i in range(n) for j in range(n) if i != j)
        path = [[path[i][j] / top for j in range(n)] for i in range(n)]
    return [[0.0 if i == j else max(0.0, path[i][j] - margin) / (1 - margin) for j in range(n)] for i in range(n)]


def ref_transitive_loss(text, alpha, tau):
    z = _unit(text)
    a = alpha.tolist()
    n = len(z)
    nll = [[0.0] * n for _ in range(n)]
    for i in range(n):
        denom = sum(math.exp(_dot(z[i], z[k]) / tau) for k in range(n) if k != i)
        for j in range(n):
            if j != i:
                nll[i][j] = -math.log(math.exp(_dot(z[i], z[j]) / tau) / denom)
    pairs = [(i, j) for i in range(n) for j in range(n) if i != j]
    eq1 = sum(a[i][j] * nll[i][j] for i, j in pairs)  # eq. 1 of the paper
    return eq1 / sum(a[i][j] for i, j in pairs)  # over the batch's α mass


# --------------------------------------------------------------------------- L_v


def test_ntxent_matches_loop_reference():
    g = torch.Generator().manual_seed(0)
    z1, z2 = torch.randn(6, 5, generator=g), torch.randn(6, 5, generator=g)
    for tau in (0.1, 0.5):
        assert NTXentLoss(tau)(z1, z2).item() == pytest.approx(ref_ntxent(z1, z2, tau), rel=1e-5)


def test_ntxent_hand_computed_two_images():
    # identical views e1, e2: every anchor has positive sim 1 and two negatives of sim 0
    z = torch.eye(2)
    assert NTXentLoss(temperature=1.0)(z, z).item() == pytest.approx(math.log(1 + 2 / math.e), rel=1e-6)
    # inputs are normalised inside: scaling does not change the loss
    assert NTXentLoss(1.0)(3 * z, 0.5 * z).item() == pytest.approx(math.log(1 + 2 / math.e), rel=1e-6)


def test_ntxent_gradient_reaches_both_views():
    z1, z2 = torch.randn(4, 3, requires_grad=True), torch.randn(4, 3, requires_grad=True)
    NTXentLoss()(z1, z2).backward()
    assert z1.grad.abs().sum() > 0 and z2.grad.abs().sum() > 0


# --------------------------------------------------------------------------- L_x


def test_crossmodal_matches_loop_reference():
    g = torch.Generator().manual_seed(1)
    t, v1, v2 = (torch.randn(5, 4, generator=g) for _ in range(3))
    loss = CrossModalLoss(0.1)
    assert loss(t, v1).item() == pytest.approx(ref_infonce(t, v1, 0.1), rel=1e-5)
    both = 0.5 * (ref_infonce(t, v1, 0.1) + ref_infonce(t, v2, 0.1))
    assert loss(t, v1, v2).item() == pytest.approx(both, rel=1e-5)


def test_crossmodal_hand_computed_two_pairs():
    # text e1, e2; image e1, (e1+e2)/√2; τ = 1 → logits [[1, c], [0, c]] with c = 1/√2
    c = 1 / math.sqrt(2)
    text = torch.eye(2)
    image = torch.tensor([[1.0, 0.0], [1.0, 1.0]])
    t2i = (-math.log(math.e / (math.e + math.exp(c))) - math.log(math.exp(c) / (1 + math.exp(c)))) / 2
    i2t = (-math.log(math.e / (math.e + 1)) + math.log(2)) / 2
    assert CrossModalLoss(1.0)(text, image).item() == pytest.approx((t2i + i2t) / 2, rel=1e-6)


def test_crossmodal_gradient_reaches_text_and_both_views():
    t, v1, v2 = (torch.randn(4, 3, requires_grad=True) for _ in range(3))
    CrossModalLoss()(t, v1, v2).backward()
    assert all(x.grad.abs().sum() > 0 for x in (t, v1, v2))


# --------------------------------------------------------------------------- α (eq. 2)


@pytest.mark.parametrize("variant", ["paper", "official"])
def test_alpha_matches_loop_reference(variant):
    g = torch.Generator().manual_seed(2)
    t, x = torch.randn(7, 4, generator=g), torch.randn(7, 4, generator=g)
    x = x + 2 * t  # correlated captions and images so the cross-modal factor varies but stays positive
    v = torch.randn(7, 3, generator=g)
    v[1], v[4] = v[0] + 0.05, v[2] + 0.1  # some visually similar pairs, so α has positives
    for margin in (0.0, 0.4, 0.7):
        alpha = transitive_alpha(t, x, v, margin=margin, variant=variant)
        ref = torch.tensor(ref_alpha(t, x, v, margin, variant), dtype=torch.float32)
        torch.testing.assert_close(alpha, ref, atol=1e-5, rtol=1e-5)
    assert (transitive_alpha(t, x, v, variant=variant) > 0).any()


def test_official_alpha_with_a_pairs_mask_takes_its_statistics_from_the_allowed_pairs_and_the_diagonal():
    """With ``pairs``, the min–max of α^x_ii·α^x_jj runs over the allowed pairs plus the diagonal (the diagonal is in
    the released code's batch matrix), the maximum over the allowed off-diagonal pairs; the others get α = 0."""
    g = torch.Generator().manual_seed(11)
    t = torch.randn(6, 4, generator=g)
    x = t + 0.6 * torch.randn(6, 4, generator=g)
    v = torch.randn(6, 3, generator=g)
    v[1], v[3] = v[0] + 0.1, v[2] + 0.2
    x[4] = t[4]  # a frozen caption's own product α^x_44² = 1 is the batch maximum: only the diagonal holds it
    new = torch.arange(6) < 2
    pairs = new[:, None] | new[None, :]
    tu, xu, vu = _unit(t), _unit(x), _unit(v)
    xm = [_dot(tu[i], xu[i]) for i in range(6)]
    counted = [(i, j) for i in range(6) for j in range(6) if i == j or bool(pairs[i, j])]
    lo, hi = min(xm[i] * xm[j] for i, j in counted), max(xm[i] * xm[j] for i, j in counted)
    path = {(i, j): _dot(vu[i], vu[j]) * (0.75 + 0.5 * (xm[i] * xm[j] - lo) / (hi - lo))
            for i, j in counted if i != j}
    top = max(path.values())
    expected = torch.zeros(6, 6)
    for (i, j), p in path.items():
        expected[i, j] = max(0.0, p / top - 0.4) / 0.6
    alpha = transitive_alpha(t, x, v, margin=0.4, variant="official", pairs=pairs)
    torch.testing.assert_close(alpha, expected, atol=1e-5, rtol=1e-5)
    assert (alpha > 0).any()


@pytest.mark.parametrize("variant", ["paper", "official"])
def test_alpha_identical_images_and_perfect_captions_are_all_positive(variant):
    img = torch.tensor([[1.0, 2.0, 0.5]]).repeat(4, 1)
    alpha = transitive_alpha(img.clone(), img.clone(), img.clone(), variant=variant)
    torch.testing.assert_close(alpha, 1 - torch.eye(4))


def test_alpha_paper_hand_cases():
    e = torch.eye(3)
    # perfect captions (α^x = 1), orthogonal images: α^v = (0 + 1)/2 → f(0.5) = (0.5 - 0.4)/0.6
    alpha = transitive_alpha(e, e, e, variant="paper")
    torch.testing.assert_close(alpha, (1 - torch.eye(3)) * (0.1 / 0.6))
    # with margin 0 the path similarity itself comes out
    torch.testing.assert_close(transitive_alpha(e, e, e, margin=0.0), (1 - torch.eye(3)) * 0.5)
    # captions orthogonal to their images (α^x = 1/2), identical images: 1/2·1·1/2 = 0.25 ≤ m → 0
    same = e[2:].repeat(2, 1)
    assert transitive_alpha(e[:2], same, same, variant="paper").abs().max() == 0
    torch.testing.assert_close(transitive_alpha(e[:2], same, same, margin=0.0), (1 - torch.eye(2)) * 0.25)
    # opposite images (cos -1 → α^v = 0) are never positives
    assert transitive_alpha(torch.ones(2, 2), torch.ones(2, 2), torch.tensor([[1.0, 0.0], [-1.0, 0.0]])).max() == 0


def test_alpha_official_hand_cases():
    e = torch.eye(3)
    # orthogonal images have cosine 0 (no [0, 1] mapping in the released code) → 0
    assert transitive_alpha(e, e, e, variant="official").abs().max() == 0
    # two similar images among orthogonal ones: the pair is the batch max → α = 1 after /max
    v = torch.tensor([[1.0, 0.0, 0.0], [0.8, 0.6, 0.0], [0.0, 0.0, 1.0]])
    alpha = transitive_alpha(e, e, v, variant="official")
    expected = torch.zeros(3, 3)
    expected[0, 1] = expected[1, 0] = 1.0
    torch.testing.assert_close(alpha, expected)
    # a batch with no positive visual similarity, and a batch of one, give α = 0 (no NaN)
    opposite = torch.tensor([[1.0, 0.0], [-1.0, 0.0]])
    assert transitive_alpha(opposite, opposite, opposite, variant="official").abs().max() == 0
    assert transitive_alpha(e[:1], e[:1], e[:1], variant="official").tolist() == [[0.0]]


@pytest.mark.parametrize("variant", ["paper", "official"])
def test_alpha_has_no_grad_is_symmetric_and_shrinks_with_margin(variant):
    g = torch.Generator().manual_seed(3)
    t, x, v = (torch.randn(8, 4, generator=g).requires_grad_() for _ in range(3))
    alpha = transitive_alpha(t, x, v, margin=0.0, variant=variant)
    assert not alpha.requires_grad and alpha.grad_fn is None
    torch.testing.assert_close(alpha, alpha.T)
    assert alpha.diagonal().abs().max() == 0 and alpha.min() >= 0 and alpha.max() <= 1
    previous = alpha
    for margin in (0.2, 0.4, 0.6, 0.9):
        current = transitive_alpha(t, x, v, margin=margin, variant=variant)
        assert (current <= previous + 1e-6).all()  # f_m(x) is non-increasing in m
        previous = current
    with pytest.raises(ValueError):
        transitive_alpha(t, x, v, margin=1.0)
    with pytest.raises(ValueError):
        transitive_alpha(t, x, v, variant="nope")  # type: ignore[arg-type]


def test_alpha_stats_and_supervised_alpha():
    groups = torch.tensor([0, 1, 0, -1, -1])
    truth = supervised_alpha(groups)
    expected = torch.zeros(5, 5)
    expected[0, 2] = expected[2, 0] = 1  # the two captions of group 0; -1 means "no group"
    torch.testing.assert_close(truth, expected)

    alpha = torch.zeros(5, 5)
    alpha[0, 2] = alpha[2, 0] = 0.5  # true pair
    alpha[1, 3] = alpha[3, 1] = 0.25  # false pair
    alpha[4, 4] = 1.0  # the diagonal is ignored
    stats = alpha_stats(alpha, truth > 0)
    assert stats["alpha/positive_fraction"] == pytest.approx(4 / 20)
    assert stats["alpha/mean"] == pytest.approx(1.5 / 20)
    assert stats["alpha/precision"] == pytest.approx(0.5)
    assert stats["alpha/recall"] == pytest.approx(1.0)
    assert set(alpha_stats(alpha)) == {"alpha/positive_fraction", "alpha/mean"}
    assert math.isnan(alpha_stats(torch.zeros(3, 3), torch.ones(3, 3, dtype=torch.bool))["alpha/precision"])


# --------------------------------------------------------------------------- L_t (eq. 1)


@pytest.mark.parametrize("variant", ["paper", "official"])
def test_transitive_loss_matches_loop_reference(variant):
    g = torch.Generator().manual_seed(4)
    text = torch.randn(6, 4, generator=g)
    alpha = torch.rand(6, 6, generator=g)
    alpha = (alpha + alpha.T) / 2 * (alpha + alpha.T > 1.0)  # soft, sparse, symmetric
    alpha[5, :] = alpha[:, 5] = 0  # one anchor without positives
    loss = TransitiveTextLoss(temperature=0.2, variant=variant)(text, alpha)
    assert loss.item() == pytest.approx(ref_transitive_loss(text, alpha, 0.2), rel=1e-5)


def test_transitive_loss_normalises_over_each_anchors_other_captions_for_an_asymmetric_alpha():
    """ℓ_ij is a softmax over anchor i's row (k ≠ i): with a symmetric α a column softmax gives the same sum, so
    only a one-sided α tells them apart."""
    g = torch.Generator().manual_seed(7)
    text = torch.randn(5, 4, generator=g)
    alpha = torch.zeros(5, 5)
    alpha[0, 1], alpha[2, 4], alpha[3, 0] = 1.0, 0.5, 0.25  # i pulls j, j does not pull i
    loss = TransitiveTextLoss(temperature=0.3)(text, alpha)
    assert loss.item() == pytest.approx(ref_transitive_loss(text, alpha, 0.3), rel=1e-5)


def test_each_pair_pulls_in_proportion_to_its_alpha():
    """Eq. 1's weighting: a pair of α 0.01 pulls its captions a hundredth as hard as a pair of α 1 (each anchor's
    targets are not renormalised to one)."""
    text = torch.randn(4, 8, generator=torch.Generator().manual_seed(2), requires_grad=True)
    alpha = torch.zeros(4, 4)
    alpha[0, 1] = alpha[1, 0] = 1.0
    alpha[2, 3] = alpha[3, 2] = 0.01
    weighted = TransitiveTextLoss(temperature=0.5)(text, alpha)
    (grad,) = torch.autograd.grad(weighted, text)
    parts = []
    for pair in ((0, 1), (2, 3)):
        one = torch.zeros(4, 4)
        one[pair] = one[pair[::-1]] = 1.0
        (g,) = torch.autograd.grad(TransitiveTextLoss(temperature=0.5)(text, one), text)
        parts.append(g)
    # the loss is linear in α up to its normalisation by the α mass (2.02): the gradient is the α-weighted sum
    expected = (2 * parts[0] + 0.02 * parts[1]) / 2.02
    torch.testing.assert_close(grad, expected, rtol=1e-4, atol=1e-6)


def test_transitive_loss_hand_computed_three_captions():
    # captions e1, e1, e2 at τ = 1; only 0 ↔ 1 are positives: each anchor sees p = e/(e + 1)
    text = torch.tensor([[1.0, 0.0], [1.0, 0.0], [0.0, 1.0]])
    alpha = torch.zeros(3, 3)
    alpha[0, 1] = alpha[1, 0] = 1.0
    nll = math.log(1 + 1 / math.e)
    assert TransitiveTextLoss(1.0, variant="paper")(text, alpha).item() == pytest.approx(nll, rel=1e-6)
    assert TransitiveTextLoss(1.0, variant="official")(text, alpha).item() == pytest.approx(nll, rel=1e-6)
    with pytest.raises(ValueError):
        TransitiveTextLoss(variant="sum")  # type: ignore[arg-type]


def test_transitive_loss_gradient_goes_to_text_not_alpha():
    g = torch.Generator().manual_seed(5)
    text = torch.randn(5, 3, generator=g, requires_grad=True)
    alpha = supervised_alpha(torch.tensor([0, 0, 1, 1, 2])).requires_grad_()
    loss = TransitiveTextLoss()(text, alpha)
    loss.backward()
    assert text.grad.abs().sum() > 0
    assert alpha.grad is None or alpha.grad.abs().sum() == 0
    # gradient pulls positives together: one small step raises their cosine
    with torch.no_grad():
        before = F.cosine_similarity(text[0], text[1], dim=0)
        moved = text - 1e-3 * text.grad
        after = F.cosine_similarity(moved[0], moved[1], dim=0)
    assert after > before


def test_transitive_loss_without_positives_is_zero_and_differentiable():
    text = torch.randn(4, 3, requires_grad=True)
    loss = TransitiveTextLoss()(text, torch.zeros(4, 4))
    loss.backward()
    assert loss.item() == 0 and torch.isfinite(text.grad).all()
    single = TransitiveTextLoss()(torch.randn(1, 3, requires_grad=True), torch.zeros(1, 1))
    assert single.item() == 0


def test_transitive_loss_module_alpha_uses_its_settings():
    g = torch.Generator().manual_seed(6)
    t, x, v = (torch.randn(5, 4, generator=g) for _ in range(3))
    loss = TransitiveTextLoss(margin=0.3, variant="official")
    torch.testing.assert_close(loss.alpha(t, x, v), transitive_alpha(t, x, v, margin=0.3, variant="official"))


# --------------------------------------------------------------------------- L_c

PAD, CLS, MASK, UNK = 0, 1, 2, 3
SPECIALS = (PAD, CLS, MASK, UNK)
VOCAB = 500


def _batch(rows: int, length: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """[CLS] + random real tokens (a few UNK among them) + padding; some rows hold only [CLS]."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(len(SPECIALS), VOCAB, (rows, length), generator=g)
    ids[torch.rand(rows, length, generator=g) < 0.05] = UNK
    lengths = torch.randint(1, length + 1, (rows,), generator=g)
    positions = torch.arange(length)[None, :]
    attention = (positions < lengths[:, None]).long()
    ids = torch.where(attention.bool(), ids, torch.full_like(ids, PAD))
    ids[:, 0] = CLS
    return ids, attention


def test_mask_tokens_statistics():
    ids, attention = _batch(3000, 24, seed=0)
    p = 1 / 6
    masked, labels = mask_tokens(ids, attention, MASK, VOCAB, SPECIALS, p=p, generator=torch.Generator().manual_seed(1))
    eligible = attention.bool() & ~torch.isin(ids, torch.tensor(SPECIALS))
    chosen = labels != IGNORE_INDEX
    n = eligible.sum(1).double()
    # expected count: independent draws, plus one forced pick in rows that drew none
    expected = (n * p + torch.where(n > 0, (1 - p) ** n, torch.zeros_like(n))).sum().item()
    sd = math.sqrt((n * p * (1 - p)).sum().item())
    assert abs(chosen.sum().item() - expected) < 5 * sd
    # 80 / 10 / 10 within the chosen tokens (a random draw equals the original with prob 1/|allowed|)
    total = chosen.sum().item()
    as_mask = (masked[chosen] == MASK).sum().item() / total
    as_random = (masked[chosen] != ids[chosen]).sum().item() / total - as_mask
    allowed = VOCAB - len(SPECIALS)
    assert as_mask == pytest.approx(0.8, abs=0.02)
    assert as_random == pytest.approx(0.1 * (1 - 1 / allowed), abs=0.015)
    # labels are the original tokens; nothing outside the targets changes; no special is drawn
    assert torch.equal(labels[chosen], ids[chosen])
    assert torch.equal(masked[~chosen], ids[~chosen])
    replaced = chosen & (masked != ids) & (masked != MASK)
    assert not torch.isin(masked[replaced], torch.tensor(SPECIALS)).any()
    assert ((masked >= 0) & (masked < VOCAB)).all()


def test_mask_tokens_never_chooses_specials_or_padding_and_at_least_one_per_sentence():
    ids, attention = _batch(800, 6, seed=2)
    masked, labels = mask_tokens(ids, attention, MASK, VOCAB, SPECIALS, p=0.01, generator=torch.Generator().manual_seed(3))
    special_or_pad = ~attention.bool() | torch.isin(ids, torch.tensor(SPECIALS))
    assert (labels[special_or_pad] == IGNORE_INDEX).all()
    assert torch.equal(masked[special_or_pad], ids[special_or_pad])
    has_real = (~special_or_pad).any(1)
    per_row = (labels != IGNORE_INDEX).sum(1)
    assert (per_row[has_real] >= 1).all() and (per_row[~has_real] == 0).all()
    assert (~has_real).any()  # the data does hold rows with nothing to predict


def test_mask_tokens_forced_target_is_uniform_over_eligible_positions():
    ids = torch.randint(len(SPECIALS), VOCAB, (4000, 5))
    ids[:, 0] = CLS  # four eligible positions per row
    _, labels = mask_tokens(ids, torch.ones_like(ids), MASK, VOCAB, SPECIALS, p=1e-9,
                            generator=torch.Generator().manual_seed(4))
    chosen = labels != IGNORE_INDEX
    assert (chosen.sum(1) == 1).all()
    share = chosen[:, 1:].float().mean(0)
    torch.testing.assert_close(share, torch.full((4,), 0.25), atol=0.04, rtol=0)


def test_mask_tokens_corrupts_other_tokens_without_predicting_them():
    ids, attention = _batch(2000, 20, seed=5)
    masked, labels = mask_tokens(ids, attention, MASK, VOCAB, SPECIALS, p=1 / 6, corrupt_other=0.2,
                                 generator=torch.Generator().manual_seed(6))
    eligible = attention.bool() & ~torch.isin(ids, torch.tensor(SPECIALS))
    others = eligible & (labels == IGNORE_INDEX)
    changed = (masked[others] != ids[others]).float().mean().item()
    assert changed == pytest.approx(0.2 * (0.8 + 0.1 * (1 - 1 / (VOCAB - len(SPECIALS)))), abs=0.015)
    special_or_pad = ~eligible
    assert torch.equal(masked[special_or_pad], ids[special_or_pad])


def test_mask_tokens_is_deterministic_for_a_generator():
    ids, attention = _batch(50, 12, seed=7)
    run = lambda seed: mask_tokens(ids, attention, MASK, VOCAB, SPECIALS, generator=torch.Generator().manual_seed(seed))
    a, b, c = run(9), run(9), run(10)
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])
    assert not (torch.equal(a[0], c[0]) and torch.equal(a[1], c[1]))


def test_cloze_loss_and_accuracy_match_loop_reference():
    g = torch.Generator().manual_seed(8)
    logits = torch.randn(3, 5, 11, generator=g, requires_grad=True)
    labels = torch.full((3, 5), IGNORE_INDEX)
    labels[0, 1], labels[0, 4], labels[2, 0], labels[2, 2] = 3, 7, 10, 0
    labels[1, 3] = int(logits[1, 3].argmax())  # one certainly correct prediction
    total, count, correct = 0.0, 0, 0
    for b in range(3):
        for t in range(5):
            if labels[b, t] != IGNORE_INDEX:
                row = logits[b, t].detach().double()
                total += -(row[labels[b, t]] - torch.logsumexp(row, 0)).item()
                correct += int(row.argmax() == labels[b, t])
                count += 1
    loss = ClozeLoss()(logits, labels)
    assert loss.item() == pytest.approx(total / count, rel=1e-5)
    assert cloze_accuracy(logits, labels).item() == pytest.approx(correct / count)
    loss.backward()
    targeted = labels != IGNORE_INDEX
    assert logits.grad[targeted].abs().sum() > 0 and logits.grad[~targeted].abs().sum() == 0


def test_cloze_loss_hand_computed_and_empty_batch():
    logits = torch.zeros(1, 2, 4, requires_grad=True)  # uniform over 4 tokens → log 4
    labels = torch.tensor([[2, IGNORE_INDEX]])
    assert ClozeLoss()(logits, labels).item() == pytest.approx(math.log(4))
    empty = ClozeLoss()(logits, torch.full((1, 2), IGNORE_INDEX))
    empty.backward()
    assert empty.item() == 0 and torch.isfinite(logits.grad).all()


# --------------------------------------------------------------------------- gathering across 2 processes


class _TinyModel(nn.Module):
    """Linear stand-ins for the heads: text → (L_t, L_x) features, image views → (L_x, L_v) features."""

    def __init__(self) -> None:
        super().__init__()
        self.text_t, self.text_x = nn.Linear(6, 4), nn.Linear(6, 4)
        self.img_x, self.img_v = nn.Linear(6, 4), nn.Linear(6, 4)


def _problem(n: int = 8):
    g = torch.Generator().manual_seed(11)
    text = torch.randn(n, 6, generator=g)
    view1 = torch.randn(n, 6, generator=g)
    view2 = view1 + 0.3 * torch.randn(n, 6, generator=g)
    groups = torch.arange(n) // 2
    return text, view1, view2, groups


def _fresh_model() -> _TinyModel:
    with torch.random.fork_rng():
        torch.manual_seed(12)
        return _TinyModel()


def _global_loss(model, text, view1, view2, gather=lambda ts: ts):
    """L_t (α on gathered, detached features) + L_v + L_x on the global batch."""
    feats = [model.text_t(text), model.text_x(text), model.img_x(view1), model.img_x(view2),
             model.img_v(view1), model.img_v(view2)]
    t_t, t_x, x1, x2, v1, v2 = gather(feats)
    alpha = transitive_alpha(t_x, x1, v1, margin=0.1)
    return TransitiveTextLoss()(t_t, alpha) + NTXentLoss()(v1, v2) + CrossModalLoss()(t_x, x1, x2)


SPLITS = {"equal": (4, 4), "unequal": (3, 5)}


def _dist_worker(rank: int, world: int, init_file: str, out: str) -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world)
    try:
        text, view1, view2, groups = _problem()
        results = {}
        for split_name, sizes in SPLITS.items():
            start = sum(sizes[:rank])
            rows = slice(start, start + sizes[rank])
            for with_grad in (True, False):
                model = _fresh_model()
                loss = _global_loss(model, text[rows], view1[rows], view2[rows],
                                    gather=lambda ts: gather_many(ts, gather_with_grad=with_grad))
                loss.backward()
                results[split_name, with_grad] = {
                    "loss": loss.item(),
                    "grads": {k: p.grad.clone() for k, p in model.named_parameters()},
                }
            results[split_name, "offset"] = rank_offset(sizes[rank])
            results[split_name, "groups"] = gather_features(groups[rows])
            local = torch.randn(sizes[rank], 3, requires_grad=True)
            results[split_name, "single"] = torch.equal(gather_features(local)[rows], local.detach())
        torch.save(results, f"{out}/rank{rank}.pt")
    finally:
        dist.destroy_process_group()


def test_gather_two_processes_match_one_process(tmp_path):
    """Two gloo processes give the single-process loss and gradients on the concatenated batch.

    Asserted, per the gradient semantics documented in ``losses/gather.py``:
    * every rank reports the single-process loss value;
    * gather_with_grad=True: the MEAN of the per-rank parameter gradients (what DDP
      applies) equals the single-process gradient;
    * gather_with_grad=False: the SUM of the per-rank gradients equals it (DDP's mean is 1/W of it);
    * rank_offset and integer gathers give the rank-ordered global batch, also with unequal local sizes.
    """
    mp.spawn(_dist_worker, args=(2, str(tmp_path / "init"), str(tmp_path)), nprocs=2, join=True)
    ranks = [torch.load(tmp_path / f"rank{r}.pt") for r in range(2)]

    text, view1, view2, groups = _problem()
    model = _fresh_model()
    reference = _global_loss(model, text, view1, view2)
    reference.backward()
    ref_grads = {k: p.grad for k, p in model.named_parameters()}
    assert all(g.abs().sum() > 0 for g in ref_grads.values())  # every head gets gradient

    for split_name, sizes in SPLITS.items():
        for with_grad in (True, False):
            per_rank = [r[split_name, with_grad] for r in ranks]
            for r in per_rank:
                assert r["loss"] == pytest.approx(reference.item(), rel=1e-5)
            for k, ref in ref_grads.items():
                combined = sum(r["grads"][k] for r in per_rank)
                if with_grad:
                    combined = combined / 2
                torch.testing.assert_close(combined, ref, atol=1e-5, rtol=1e-4, msg=f"{split_name} {with_grad} {k}")
        assert [r[split_name, "offset"] for r in ranks] == [0, sizes[0]]
        assert all(torch.equal(r[split_name, "groups"], groups) for r in ranks)
        assert all(r[split_name, "single"] for r in ranks)


def test_gather_is_identity_without_distributed():
    x = torch.randn(3, 2, requires_grad=True)
    assert gather_features(x) is x
    assert gather_many([x, x])[0] is x
    assert rank_offset(3) == 0


@pytest.mark.parametrize("variant", ["paper", "official"])
def test_the_objective_weighs_each_loss_by_its_own_lambda_and_takes_alpha_from_the_views(variant):
    """Total = L_t + λ1 L_v + λ2 L_x + λ3 L_c with four distinct weights, each term computed here from its own
    inputs: α from the L_x features and the L_v head's first view (not the L_x image head's), the official L_x with
    both views, cloze the mean over the batch's target tokens."""
    from globetrotter.config import LossConfig
    from globetrotter.training.objective import GlobetrotterObjective

    g = torch.Generator().manual_seed(3)
    n, d, vocab = 8, 6, 11
    out = {k: torch.randn(n, d, generator=g) for k in ("text_t", "text_x", "image_v1", "image_v2", "image_x1", "image_x2")}
    out["cloze_logits"] = torch.randn(n, 5, vocab, generator=g)
    labels = torch.full((n, 5), IGNORE_INDEX)
    labels[:, 1] = torch.randint(0, vocab, (n,), generator=g)
    labels[::2, 3] = torch.randint(0, vocab, (n // 2,), generator=g)
    batch = {"truth": torch.arange(n) // 2, "langs": ["en", "de"] * (n // 2)}
    cfg = LossConfig(transitive=variant, margin=0.1, text=1.3, image=0.3, cross=0.7, cloze=0.11)
    total, logs = GlobetrotterObjective(cfg)(out, batch, labels)

    tau = cfg.temperature
    alpha = transitive_alpha(out["text_x"], out["image_x1"], out["image_v1"], margin=0.1, variant=variant)
    assert alpha.sum() > 0, "the check needs positive pairs"
    terms = {
        "text": TransitiveTextLoss(tau, 0.1, variant)(out["text_t"], alpha),
        "image": NTXentLoss(tau)(out["image_v1"], out["image_v2"]),
        "cross": CrossModalLoss(tau)(out["text_x"], out["image_x1"], out["image_x2"] if variant == "official" else None),
        "cloze": F.cross_entropy(out["cloze_logits"][labels != IGNORE_INDEX], labels[labels != IGNORE_INDEX]),
    }
    for name, value in terms.items():
        assert logs[f"loss/{name}"] == pytest.approx(float(value), rel=1e-5), name
    expected = 1.3 * terms["text"] + 0.3 * terms["image"] + 0.7 * terms["cross"] + 0.11 * terms["cloze"]
    assert float(total) == pytest.approx(float(expected), rel=1e-5)
    swapped = transitive_alpha(out["text_x"], out["image_x1"], out["image_x1"], margin=0.1, variant=variant)
    assert not torch.allclose(swapped, alpha), "α from the L_x image head would differ: the check can tell"


def _ones(*shape: int) -> torch.Tensor:
    return torch.ones(*shape)


@pytest.mark.parametrize("call, message", [
    (lambda: NTXentLoss(temperature=0), "temperature must be > 0, got 0"),
    (lambda: NTXentLoss()(_ones(4, 8), _ones(4, 6)), r"expected two \[N, D\] tensors of one shape, got \(4, 8\) and \(4, 6\)"),
    (lambda: CrossModalLoss(temperature=-1), "temperature must be > 0, got -1"),
    (lambda: CrossModalLoss()(_ones(4, 8), _ones(3, 8)), r"expected \[N, D\] tensors of one shape, got \[\(4, 8\), \(3, 8\)\]"),
    (lambda: CrossModalLoss()(_ones(4, 8), _ones(4, 8), _ones(4, 7)), r"got \[\(4, 8\), \(4, 8\), \(4, 7\)\]"),
    (lambda: TransitiveTextLoss(temperature=0), "temperature must be > 0, got 0"),
    (lambda: TransitiveTextLoss()(_ones(4, 8), _ones(3, 3)), r"expected text \[N, D\] and alpha \[N, N\], got \(4, 8\)"),
    (lambda: transitive_alpha(_ones(4, 8), _ones(3, 8), _ones(4, 8)), r"expected \[N, D\] features with one N"),
    (lambda: transitive_alpha(_ones(4, 8), _ones(4, 8), _ones(4, 8), pairs=_ones(3, 3)), r"pairs must be \[N, N\]"),
    (lambda: alpha_stats(_ones(4, 4), truth=_ones(3, 3)), r"truth must have alpha's shape \(4, 4\), got \(3, 3\)"),
    (lambda: supervised_alpha(torch.zeros(2, 2, dtype=torch.long)), r"groups must be \[N\], got \(2, 2\)"),
    (lambda: mask_tokens(torch.ones(2, 5, dtype=torch.long), torch.ones(2, 4), 1, 10, [0]),
     r"expected input_ids and attention_mask \[B, L\], got \(2, 5\), \(2, 4\)"),
    (lambda: mask_tokens(torch.ones(2, 5, dtype=torch.long), torch.ones(2, 5), 1, 10, [0], mask_share=0.8,
                         random_share=0.3), "bad masking probabilities: .*mask_share=0.8, random_share=0.3"),
    (lambda: mask_tokens(torch.ones(2, 5, dtype=torch.long), torch.ones(2, 5), 1, 2, [0, 1], p=1.0),
     "every token id is special: no random replacement can be drawn"),
    (lambda: ClozeLoss()(_ones(2, 5, 10), torch.zeros(2, 4, dtype=torch.long)), r"logits \[B, L, V\] and labels \[B, L\] disagree"),
    (lambda: cloze_accuracy(_ones(3, 10), torch.zeros(2, 4, dtype=torch.long)),
     r"logits \(3, 10\) are neither \[B, L, V\] nor \[n_targets, V\] for labels \(2, 4\) with 8 target"),
])
def test_each_loss_refuses_features_of_the_wrong_shape_or_settings_out_of_range_naming_them(call, message):
    with pytest.raises(ValueError, match=message):
        call()
