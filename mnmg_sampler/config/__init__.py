"""The YAML job schema: nested dataclasses, dotted overrides, validation with dotted keys.

A job is ``defaults < YAML file < command-line overrides``, checked before any rank starts so
a typo fails in one second instead of after the rendezvous::

    cfg = load_config("configs/quickstart.yaml", ["sampler.fanouts=15,10", "training.epochs=5"])

Every field carries a one-line doc, shown by ``--help`` and the generated
``docs/configuration.md`` (:func:`iter_fields`). Every problem is a
:class:`~mnmg_sampler.errors.ConfigError` whose message starts with the dotted key (or the file
path); unknown keys get a "did you mean" hint. Relative paths are relative to the working
directory; ``~`` and ``$VARS`` in path fields are expanded.
"""

from ..graph.names import BUILTIN_DATASETS
from .cli import add_config_arguments
from .datasets import DatasetSpec, check_paths, parse_dataset_name
from .fields import FieldInfo, fields_epilog, format_value, iter_fields, num_hops, section_docs
from .load import config_from_dict, config_to_dict, config_to_yaml, load_config, validate_config
from .parse import apply_overrides
from .schema import (
    CROSS_FIELD_RULES,
    DatasetConfig,
    FeaturesConfig,
    JobConfig,
    ModelConfig,
    OptimizerConfig,
    OutputConfig,
    PartitionConfig,
    RuntimeConfig,
    SamplerConfig,
    TrainingConfig,
)

__all__ = [
    "BUILTIN_DATASETS",
    "add_config_arguments",
    "apply_overrides",
    "CROSS_FIELD_RULES",
    "DatasetConfig",
    "DatasetSpec",
    "FeaturesConfig",
    "FieldInfo",
    "JobConfig",
    "ModelConfig",
    "OptimizerConfig",
    "OutputConfig",
    "PartitionConfig",
    "RuntimeConfig",
    "SamplerConfig",
    "TrainingConfig",
    "check_paths",
    "config_from_dict",
    "config_to_dict",
    "config_to_yaml",
    "fields_epilog",
    "format_value",
    "iter_fields",
    "load_config",
    "num_hops",
    "parse_dataset_name",
    "section_docs",
    "validate_config",
]
