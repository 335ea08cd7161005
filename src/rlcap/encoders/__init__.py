"""Frozen image encoders, image loading and feature extraction (imports torch)."""
