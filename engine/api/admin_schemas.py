"""Request bodies of /v1/admin (routes_admin.py). Unknown fields are refused (a typo in an
admin call should fail loudly, not run a different job than the one meant)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

# a model id clients will send as `model`: printable, no spaces
MODEL_NAME = r"^[A-Za-z0-9][A-Za-z0-9._:+/-]{0,127}$"
ADMIN_PATH = Field(..., min_length=1, max_length=1024,
                   description="ROOT/REL as GET /v1/admin/models lists it; never absolute")


class LoadBody(BaseModel):
    model_config = ConfigDict(extra="forbid")

    path: str = ADMIN_PATH
    name: str | None = Field(None, pattern=MODEL_NAME,
                             description="the id requests use (default: the folder or file name)")
    device: str = Field("auto", max_length=32, description="auto, cpu, npu[:N] or cuda[:N]")
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = "auto"
    replace: bool = Field(False, description="put it in place of a loaded model of that name "
                                             "(requests already on the old one finish there)")
    default: bool = Field(False, description="make it the model requests without `model` get")


class UnloadBody(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = Field(..., min_length=1, max_length=128)


class QuantizeBody(BaseModel):
    """engine.quant.QuantizeRequest's fields a remote client may set; paths are admin paths."""

    model_config = ConfigDict(extra="forbid")

    path: str = ADMIN_PATH
    out_name: str = Field(..., min_length=1, max_length=128,
                          description="the output folder's name, under the server's output root")
    method: Literal["w8a16", "w8a8-dynamic", "w8a8-static"] = "w8a8-dynamic"
    recipe: Literal["auto", "plain"] = "auto"
    format: Literal["native", "compressed-tensors", "msmodelslim"] = "native"
    preset: Literal["all", "attention", "no-down-proj"] = "all"
    skip: list[str] = Field(default_factory=list, max_length=256)
    smoothquant: float | None = Field(None, ge=0.0, le=1.0)
    group_size: int = Field(0, ge=0, le=4096)
    samples: int = Field(64, ge=1, le=4096)
    seq_len: int = Field(256, ge=8, le=32768)
    int8_head: bool | Literal["auto", "on", "off"] = Field(
        False, description="lm_head and embeddings in int8: on, off, or auto (int8 when the "
                           "head is at least 15 % of the weights); true / false as on / off")
    rotate: Literal["off", "on"] = Field(
        "off", description="rotate the residual stream and value heads first (as `quantize "
                           "--rotate`)")
    turn_down: Literal["auto", "on", "off"] = Field(
        "auto", description="w8a8-static: turn down_proj's inputs at run time (as `quantize "
                            "--turn-down`; auto: on in the native format)")
    budget_pct: float | None = Field(None, gt=0.0, lt=1000.0)
    calib_path: str | None = Field(None, max_length=1024,
                                   description="calibration text (an admin path); default: the "
                                               "recipe's own")
    eval_path: str | None = Field(None, max_length=1024,
                                  description="held-out text for budget_pct (an admin path)")
    evaluate: bool = Field(False, description="measure float against the INT8 checkpoint "
                                              "before it is put in place (as the wizard does)")
    device: str = Field("cpu", max_length=32)
    dtype: Literal["float32", "bfloat16", "float16"] = "float32"
    overwrite: bool = Field(False, description="replace an existing output folder of that name")
