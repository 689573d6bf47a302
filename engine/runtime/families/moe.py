"""What the MoE families share: the attention of their dense sibling, and the sparse MLP block
called as the model's own module on every token of the step at once, so each expert's weights
are read once per step for all the rows routed to it (transformers' experts module multiplies
expert by expert over the tokens that chose it). Not on the native decode step."""

from __future__ import annotations

from .. import cpu_linear


def layer_linears(layer) -> list:
    """The attention's projections and the plain linears of the MLP (a dense layer's three, or
    a sparse block's shared expert); the experts' 3-D tables are not nn.Linear."""
    a, mlp = layer.self_attn, layer.mlp
    out = [a.q_proj, a.k_proj, a.v_proj, a.o_proj]
    dense = getattr(mlp, "shared_expert", None) or mlp
    return out + [getattr(dense, n, None) for n in ("gate_proj", "up_proj", "down_proj")]


def layer_calls(layer, native: bool) -> tuple:
    a = layer.self_attn
    mlp = layer.mlp
    if not hasattr(mlp, "experts"):
        mlp = cpu_linear.mlp_fn(mlp, native)  # a dense layer (mlp_only_layers)
    return (*(cpu_linear.linear_fn(p, native) for p in (a.q_proj, a.k_proj, a.v_proj,
                                                         a.o_proj)), mlp)
