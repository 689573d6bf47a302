"""`QuantLinear`: the drop-in replacement for `nn.Linear` that the quantizer puts into a model;
`QuantEmbedding`: the int8 token embedding used with an int8 lm_head (opt-in, see apply.py).

QuantLinear is the kernels' int8 layer (engine.kernels.int8_linear.Int8Linear: the int8 weight,
its scales, the bias, the static input scale, and the backend that multiplies) plus what
quantization adds: rounding a float layer into it and reading the weight back as floats.
"""

from __future__ import annotations

import torch
from torch import nn

from ..kernels import qmath
from ..kernels.int8_linear import Int8Linear, apply_keeping_fp32_scales, dequantize_rows


class QuantLinear(Int8Linear):
    @classmethod
    def from_linear(cls, linear: nn.Linear, method: str, group_size: int = 0,
                    input_scale: float | None = None,
                    rounded: tuple[torch.Tensor, torch.Tensor] | None = None) -> QuantLinear:
        """`rounded`: (int8 weight, scales) already computed (error-compensated rounding,
        engine.quant.gptq) instead of rounding to nearest here."""
        w = linear.weight.detach()
        mod = cls(linear.in_features, linear.out_features, method, bias=linear.bias is not None,
                  group_size=group_size, dtype=w.dtype)
        q, s = rounded if rounded is not None else qmath.quantize_weight(w, group_size)
        mod.weight.copy_(q)
        mod.weight_scale.copy_(s)
        if linear.bias is not None:
            mod.bias.copy_(linear.bias.detach())
        if method == "w8a8-static":
            if input_scale is None:
                raise ValueError("w8a8-static needs a calibrated input scale")
            mod.input_scale.fill_(float(input_scale))
        return mod.to(w.device)

    def dequantized_weight(self) -> torch.Tensor:
        return qmath.dequantize_weight(self.plain_weight(), self.plain_scale())


class QuantEmbedding(nn.Module):
    """Token embedding stored as int8 rows with one fp32 scale per row (or per group of 32
    columns: a GGUF's Q8_0 table, engine.quant.gguf_load); a lookup dequantizes
    only the rows it reads. With a tied model it owns nothing and reads the int8 lm_head's
    weight and scales (one int8 copy of the vocabulary matrix, as the float model had one).
    `embed_scale`: the factor a scaled embedding multiplies its rows by (Gemma's sqrt(hidden),
    `*ScaledWordEmbedding`); it is a property of the architecture, so it is not saved: the
    loader takes it from the freshly built model's own embedding."""

    def __init__(self, num_embeddings: int, embedding_dim: int, dtype: torch.dtype,
                 tied_to: QuantLinear | None = None, embed_scale: float = 1.0, group: int = 0):
        super().__init__()
        self.num_embeddings = num_embeddings
        self.embedding_dim = embedding_dim
        self.float_dtype = dtype
        self.embed_scale = float(embed_scale)
        # a plain attribute in a tuple, not a submodule: the head is saved and moved as lm_head
        self._tied = (tied_to,) if tied_to is not None else None
        if tied_to is None:
            self.register_buffer("weight", torch.zeros(num_embeddings, embedding_dim,
                                                       dtype=torch.int8))
            self.register_buffer("weight_scale", torch.ones(
                (num_embeddings, embedding_dim // group) if group else (num_embeddings,)))
        else:
            tied_to.keep_plain_weight = True

    @classmethod
    def from_embedding(cls, emb: nn.Embedding, embed_scale: float = 1.0,
                       group: int = 0) -> QuantEmbedding:
        w = emb.weight.detach()
        mod = cls(emb.num_embeddings, emb.embedding_dim, w.dtype, embed_scale=embed_scale,
                  group=group)
        q, s = qmath.quantize_weight(w, group)
        mod.weight.copy_(q)
        mod.weight_scale.copy_(s)
        return mod.to(w.device)

    @classmethod
    def tied(cls, head: QuantLinear, embed_scale: float = 1.0) -> QuantEmbedding:
        return cls(head.out_features, head.in_features, head.float_dtype, tied_to=head,
                   embed_scale=embed_scale)

    @property
    def is_tied(self) -> bool:
        return self._tied is not None

    def _apply(self, fn, recurse=True):
        return apply_keeping_fp32_scales(self, fn, recurse)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        if self._tied is not None:
            rows = self._tied[0].float_rows(ids)
        else:
            rows = dequantize_rows(self.weight[ids], self.weight_scale[ids], ids.dim())
        if self.embed_scale != 1.0:
            # as the float module does it: the scale rounded to the float dtype first
            rows = rows.to(self.float_dtype) * torch.tensor(self.embed_scale,
                                                            dtype=self.float_dtype)
        return rows.to(self.float_dtype)

    def extra_repr(self) -> str:
        return (f"{self.num_embeddings}, {self.embedding_dim}, int8"
                + (f", scaled by {self.embed_scale:g}" if self.embed_scale != 1.0 else "")
                + (", tied to lm_head" if self.is_tied else ""))
