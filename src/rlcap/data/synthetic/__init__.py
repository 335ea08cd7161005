"""Synthetic captioning data: the "shapes" benchmark (see docs/SHAPES.md)."""

from rlcap.data.synthetic.shapes import ShapesConfig, generate_shapes, is_complete, load_shapes

__all__ = ["ShapesConfig", "generate_shapes", "is_complete", "load_shapes"]
