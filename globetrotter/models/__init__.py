"""Models of the Globetrotter method."""
from .globetrotter import GlobetrotterModel
from .heads import ProjectionHead
from .image import create_image_backbone
from .sigurdsson import SigurdssonTextEncoder, max_pool_words
from .text import ClozeHead, TextEncoder, mean_pool

__all__ = ["GlobetrotterModel", "ProjectionHead", "create_image_backbone", "SigurdssonTextEncoder", "max_pool_words", "ClozeHead", "TextEncoder", "mean_pool"]
