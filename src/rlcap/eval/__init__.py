"""Captioning with a trained run: a checkpoint opened for inference, and lookahead inference ([Shi18])."""
