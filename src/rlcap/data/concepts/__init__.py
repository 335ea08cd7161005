"""COCO scenes from their concepts: a captioning dataset built from human captions alone (docs/CONCEPTS.md).

``build_concepts(captions, out_dir, ConceptsConfig(...))`` writes a feature store and a Karpathy
split file like every other dataset's; the package imports nothing from models, train or rewards.
"""

from rlcap.data.concepts.build import (
    CONCEPTS_FILE,
    DATASET_FILE,
    FEATURES_FILE,
    BuildResult,
    ConceptsConfig,
    build_concepts,
    load_concepts,
)

__all__ = ["CONCEPTS_FILE", "DATASET_FILE", "FEATURES_FILE", "BuildResult", "ConceptsConfig",
           "build_concepts", "load_concepts"]
