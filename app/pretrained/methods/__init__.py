"""Methods beyond the raw attention weights, each described once in :mod:`.registry`.

:mod:`.registry` holds every method's label, note, citation, rules, bounds and
computation; :mod:`.norm` the norm-based maps (Kobayashi et al. 2020) and
:mod:`.flow` attention flow (Abnar & Zuidema 2020). Gradient methods are computed in
:mod:`attnviz.pretrained.gradients`, value zeroing in :mod:`attnviz.pretrained.zeroing`.
"""

from .flow import FLOW_SCALE, MAX_FLOW_WORK, attention_flow, flow_map, flow_token_limit
from .norm import (
    MAX_SUMMED_NORM_TOKENS,
    OUTPUT_PROJECTIONS,
    NormRecording,
    output_projection,
    summed_norm,
    transformed_values,
)
from .registry import (
    DRAWN_METHODS,
    GRADIENT_METHODS,
    METHOD_LABELS,
    METHODS,
    ONE_INPUT_METHODS,
    PER_HEAD_METHODS,
    STATE_METHODS,
    Method,
    MethodMaps,
    MethodRun,
    MethodSpec,
    check_method_bounds,
    method_description,
    method_spec,
    page_methods,
    with_method,
)

__all__ = [
    "DRAWN_METHODS",
    "FLOW_SCALE",
    "GRADIENT_METHODS",
    "MAX_FLOW_WORK",
    "MAX_SUMMED_NORM_TOKENS",
    "METHODS",
    "METHOD_LABELS",
    "ONE_INPUT_METHODS",
    "OUTPUT_PROJECTIONS",
    "PER_HEAD_METHODS",
    "STATE_METHODS",
    "Method",
    "MethodMaps",
    "MethodRun",
    "MethodSpec",
    "NormRecording",
    "attention_flow",
    "check_method_bounds",
    "flow_map",
    "flow_token_limit",
    "method_description",
    "method_spec",
    "output_projection",
    "page_methods",
    "summed_norm",
    "transformed_values",
    "with_method",
]
