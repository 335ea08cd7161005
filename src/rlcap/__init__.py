"""rlcap: reinforcement learning for image and video captioning."""

__version__ = "0.1.0"
