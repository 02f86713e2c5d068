"""XTD10 losses (M3L eq. 1, PATR eq. 2) and in-batch hard-negative mining, on hand-computed values."""
from __future__ import annotations

import pytest
import torch

from globetrotter.zeroshot.losses import (
    M3Loss,
    PATRLoss,
    m3l_loss,
    mine_hard_negatives,
    pairwise_squared_distance,
    patr_loss,
    typical_squared_distance,
)


pytestmark = pytest.mark.usefixtures("one_torch_thread")


def t(*rows):
    return torch.tensor(rows, dtype=torch.float32)


def test_m3l_matches_hand_computed_value():
    # d(a,p) = 1, d(a,n_img) = 4, d(a,n_txt) = 2 (squared distances)
    a, p, ni, nt = t([0.0, 0.0]), t([1.0, 0.0]), t([2.0, 0.0]), t([1.0, 1.0])
    # 0.5 * (1/4)^4 + 1 * (1/2)^4 = 0.5/256 + 1/16
    expected = 0.5 / 256 + 1 / 16
    assert m3l_loss(a, p, ni, nt, text_term="anchor").item() == pytest.approx(expected, rel=1e-6)
    # the same as eq. (1) written as a ratio of powers, with other constants
    got = m3l_loss(a, p, ni, nt, rho=2.0, alpha1=3.0, alpha2=0.25, text_term="anchor")
    assert got.item() == pytest.approx(3.0 * 1**2 / 4**2 + 0.25 * 1**2 / 2**2, rel=1e-6)
    # the image text term measures the negative caption from the positive image: d(p, n_txt) = 1
    assert m3l_loss(a, p, ni, nt).item() == pytest.approx(0.5 / 256 + 1.0, rel=1e-6)
    with pytest.raises(ValueError, match="text term"):
        m3l_loss(a, p, ni, nt, text_term="both")


def test_m3l_is_zero_when_anchor_hits_positive_and_large_for_close_negatives():
    a = t([1.0, 2.0])
    assert m3l_loss(a, a.clone(), t([5.0, 5.0]), t([0.0, 9.0])).item() == 0.0
    # negative closer than the positive: each ratio > 1, raised to rho = 4
    far_pos = m3l_loss(t([0.0, 0.0]), t([2.0, 0.0]), t([1.0, 0.0]), t([1.0, 0.0]))
    assert far_pos.item() == pytest.approx(0.5 * 4**4 + 4**4)


def test_patr_matches_hand_computed_value():
    a, p = t([0.0, 0.0]), t([3.0, 4.0])  # d(a,p) = 25
    assert patr_loss(a, p, t([1.0, 0.0]), margin=10.0).item() == pytest.approx(25 + (10 - 1))
    assert patr_loss(a, p, t([4.0, 0.0]), margin=10.0).item() == pytest.approx(25.0)  # 16 > eta: hinge off


def test_pairwise_squared_distance_matches_cdist():
    gen = torch.Generator().manual_seed(0)
    x, y = torch.randn(7, 5, generator=gen), torch.randn(4, 5, generator=gen)
    torch.testing.assert_close(pairwise_squared_distance(x, y), torch.cdist(x, y) ** 2, rtol=1e-4, atol=1e-4)


def test_mining_picks_the_closest_image_of_another_row():
    text = t([0.0, 0.0], [10.0, 0.0], [0.0, 10.0])
    image = t([0.0, 1.0], [3.0, 0.0], [0.0, 5.0])
    # anchor 0: d(img1)=9 < d(img2)=25; anchor 1: d(img0)=101 < d(img2)=125; anchor 2: d(img0)=81 < d(img1)=109
    index, valid = mine_hard_negatives(text, image)
    assert index.tolist() == [1, 0, 0] and valid.all()
    # rows 0 and 1 show the same image: they are never each other's negative
    index, valid = mine_hard_negatives(text, image, torch.tensor([7, 7, 8]))
    assert index.tolist() == [2, 2, 0] and valid.all()
    # a batch showing one image only has no negatives
    index, valid = mine_hard_negatives(text, image, torch.tensor([1, 1, 1]))
    assert not valid.any() and index.tolist() == [0, 1, 2]


def test_mined_losses_use_the_negative_image_and_its_caption():
    text = t([0.0, 0.0], [10.0, 0.0], [0.0, 10.0])
    image = t([0.0, 1.0], [3.0, 0.0], [0.0, 5.0])
    neg = torch.tensor([1, 0, 0])  # hand-mined above
    want_m3l = m3l_loss(text, image, image[neg], text[neg]).mean()
    assert M3Loss()(text, image).item() == pytest.approx(want_m3l.item(), rel=1e-6)
    want_patr = patr_loss(text, image, image[neg], margin=50.0).mean()
    assert PATRLoss(margin=50.0)(text, image).item() == pytest.approx(want_patr.item(), rel=1e-6)


def test_m3l_gradient_pulls_anchor_to_positive_and_away_from_negative_text():
    anchor = t([1.0, 1.0]).requires_grad_(True)
    loss = m3l_loss(anchor, t([2.0, 1.0]), t([-1.0, 1.0]), t([1.0, -1.0]), text_term="anchor").sum()
    loss.backward()
    step = -anchor.grad[0]  # gradient descent direction
    assert step[0] > 0  # towards the positive (+x), away from the negative image (-x)
    assert step[1] > 0  # away from the negative text (-y)


def test_typical_squared_distance_is_the_mean_over_pairs_of_different_images():
    # the only pair of different images: squared distance 25
    assert typical_squared_distance(t([0.0, 0.0], [3.0, 4.0])) == pytest.approx(25.0)
    # three images: pairs at 25, 1 and 18, whose mean (not the max, the median or a mean that counts each image's
    # distance 0 to itself) is the typical distance
    assert typical_squared_distance(t([0.0, 0.0], [3.0, 4.0], [0.0, 1.0])) == pytest.approx(44 / 3)


def test_random_negatives_never_pick_the_row_or_its_image():
    from globetrotter.zeroshot.losses import random_negatives

    torch.manual_seed(0)
    ids = torch.tensor([0, 0, 1, 2, 3, 3])
    drawn = []
    for _ in range(20):
        index, valid = random_negatives(6, ids)
        assert (index != torch.arange(6)).all()
        assert torch.equal(valid, ids[index] != ids)
        drawn.append(index)
    # random, not a fixed other row: over 20 draws each row meets at least 3 of its 5 others (P(fewer) < 1e-6)
    assert all(len(set(column.tolist())) >= 3 for column in torch.stack(drawn).T)
    index, valid = random_negatives(2)  # two rows, no ids: each the other's negative
    assert index.tolist() == [1, 0] and valid.all()


def test_m3l_with_random_negatives_uses_them():
    from globetrotter.zeroshot.losses import M3Loss

    text, image = torch.randn(8, 4), torch.randn(8, 4)
    torch.manual_seed(1)
    got = M3Loss(negatives="random")(text, image)
    torch.manual_seed(1)
    index, valid = __import__("globetrotter.zeroshot.losses", fromlist=["x"]).random_negatives(8)
    expected = m3l_loss(text, image, image[index], text[index])[valid].mean()
    torch.testing.assert_close(got, expected)


def test_m3l_stays_finite_when_the_negative_image_sits_on_the_anchor():
    """d(a, n_img) = 0 is clamped at eps: the loss is huge but finite, so one coincident pair cannot make it inf."""
    a, p = t([0.0, 0.0]), t([1.0, 0.0])  # d(a, p) = 1
    got = m3l_loss(a, p, a.clone(), t([0.0, 2.0]), text_term="anchor", eps=1e-4)  # d(a, n_txt) = 4
    assert torch.isfinite(got).all()
    assert got.item() == pytest.approx(0.5 * (1 / 1e-4) ** 4 + (1 / 4) ** 4, rel=1e-4)


def test_mined_losses_respect_image_ids_and_are_zero_when_no_row_has_a_negative():
    text = t([0.0, 0.0], [10.0, 0.0], [0.0, 10.0])
    image = t([0.0, 1.0], [3.0, 0.0], [0.0, 5.0])
    # rows 0 and 1 show one image: their negative is row 2, and row 2's is row 0 (hand-mined in the test above)
    neg = torch.tensor([2, 2, 0])
    want = patr_loss(text, image, image[neg], margin=50.0).mean()
    assert PATRLoss(margin=50.0)(text, image, torch.tensor([7, 7, 8])).item() == pytest.approx(want.item(), rel=1e-6)
    # every row shows the same image: no negative anywhere, so the loss is 0 (not the mean of an empty set, NaN)
    text.requires_grad_(True)
    for loss in (PATRLoss(margin=50.0), M3Loss()):
        got = loss(text, image, torch.tensor([1, 1, 1]))
        assert got.item() == 0.0
        got.backward()


def test_random_negatives_that_show_the_rows_own_image_are_left_out_of_the_mean():
    from globetrotter.zeroshot.losses import random_negatives

    gen = torch.Generator().manual_seed(0)
    text, image = torch.randn(6, 4, generator=gen), torch.randn(6, 4, generator=gen)
    ids = torch.tensor([0, 0, 0, 1, 1, 2])
    for seed in range(20):
        torch.manual_seed(seed)
        index, valid = random_negatives(6, ids)
        if not valid.all():  # a draw where some row's negative shows its own image
            break
    assert valid.any() and not valid.all()
    torch.manual_seed(seed)
    got = M3Loss(negatives="random")(text, image, ids)
    per_row = m3l_loss(text, image, image[index], text[index])
    kept = [float(per_row[i]) for i in range(6) if int(ids[index[i]]) != int(ids[i])]
    assert got.item() == pytest.approx(sum(kept) / len(kept), rel=1e-6)
