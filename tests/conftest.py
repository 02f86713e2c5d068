"""Shared pytest fixtures: small data made on the fly, and the optional real Flickr8k data."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("GLOBETROTTER_SHARED", REPO.parent / "shared"))
FLICKR8K = SHARED / "data" / "flickr8k"


@pytest.fixture(scope="session")
def flickr8k_dir() -> Path:
    """The real Flickr8k data of ../shared; the test is skipped cleanly when it is absent."""
    if not (FLICKR8K / "images").is_dir():
        pytest.skip(f"real data not found at {FLICKR8K}")
    return FLICKR8K
