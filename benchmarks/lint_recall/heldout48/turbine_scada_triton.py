"""Wind-turbine fault detection from 10-minute SCADA windows: `model.py` of a Triton Python backend.

The model repository is `turbine_fault/1/model.py` with a `config.pbtxt` declaring the inputs
`SCADA` (FP32, [-1, 144, 12]) and `VALID` (BOOL, [-1, 144]), the output `FAULT_PROB`
(FP32, [-1, 6]), and a `precision` parameter ("fp32" or "fp16"). Gaps in the SCADA log
(communication outages) arrive as VALID = false. A temporal transformer over the 144 steps of
the last day scores six fault families (pitch, yaw, gearbox, generator, converter, icing).

Source: NVIDIA/apex#1052, huggingface/lerobot PR #710 (conventions.md section 3 items 18 and 19), section 2.3.
"""

import json
import math
import os
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn as nn
import triton_python_backend_utils as pb_utils

FAULTS = ["pitch", "yaw", "gearbox", "generator", "converter", "icing"]


@dataclass
class TurbineModelConfig:
    n_channels: int = 12
    window: int = 144
    d_model: int = 64
    n_heads: int = 4
    n_layers: int = 2
    n_faults: int = len(FAULTS)
    mask_value: float = torch.finfo(torch.float32).min  # expect: MC517 dataclass


class TemporalAttention(nn.Module):
    def __init__(self, cfg: TurbineModelConfig):
        super().__init__()
        self.n_heads = cfg.n_heads
        self.mask_value = cfg.mask_value
        self.qkv = nn.Linear(cfg.d_model, 3 * cfg.d_model)
        self.out = nn.Linear(cfg.d_model, cfg.d_model)

    def forward(self, x, valid):
        b, t, d = x.shape
        q, k, v = self.qkv(x).view(b, t, 3, self.n_heads, d // self.n_heads).permute(2, 0, 3, 1, 4)
        scores = q @ k.transpose(-2, -1) / math.sqrt(d // self.n_heads)
        scores = scores.masked_fill(~valid[:, None, None, :], self.mask_value)  # also: MC517
        return self.out((scores.softmax(dim=-1) @ v).transpose(1, 2).reshape(b, t, d))


class ScadaFaultNet(nn.Module):
    def __init__(self, cfg: TurbineModelConfig):
        super().__init__()
        self.inp = nn.Linear(cfg.n_channels, cfg.d_model)
        self.pos = nn.Parameter(torch.randn(1, cfg.window, cfg.d_model) * 0.02)
        self.attn = nn.ModuleList([TemporalAttention(cfg) for _ in range(cfg.n_layers)])
        self.norm1 = nn.ModuleList([nn.LayerNorm(cfg.d_model) for _ in range(cfg.n_layers)])
        self.ffn = nn.ModuleList([nn.Sequential(nn.LayerNorm(cfg.d_model), nn.Linear(cfg.d_model, 2 * cfg.d_model), nn.GELU(),
                                                nn.Linear(2 * cfg.d_model, cfg.d_model)) for _ in range(cfg.n_layers)])
        self.head = nn.Linear(cfg.d_model, cfg.n_faults)

    def forward(self, scada, valid):
        x = self.inp(scada.nan_to_num(0.0)) + self.pos[:, : scada.size(1)]
        for attn, norm, ffn in zip(self.attn, self.norm1, self.ffn):
            x = x + attn(norm(x), valid)
            x = x + ffn(x)
        keep = valid.unsqueeze(-1).to(x.dtype)
        return torch.sigmoid(self.head((x * keep).sum(1) / keep.sum(1).clamp(min=1.0)))


class TritonPythonModel:
    def initialize(self, args):
        self.model_config = json.loads(args["model_config"])
        params = self.model_config.get("parameters", {})
        self.precision = params.get("precision", {}).get("string_value", "fp32")
        on_gpu = args.get("model_instance_kind") == "GPU"
        self.device = torch.device(f"cuda:{args['model_instance_device_id']}" if on_gpu else "cpu")
        self.dtype = torch.float16 if self.precision == "fp16" else torch.float32
        self.cfg = TurbineModelConfig()
        self.model = ScadaFaultNet(self.cfg)
        weights = os.path.join(args["model_repository"], args["model_version"], "scada_fault.pt")
        if os.path.exists(weights):
            self.model.load_state_dict(torch.load(weights, map_location="cpu"))
        self.model = self.model.to(self.device, self.dtype).eval()
        output_config = pb_utils.get_output_config_by_name(self.model_config, "FAULT_PROB")
        self.output_dtype = pb_utils.triton_string_to_numpy(output_config["data_type"])

    def execute(self, requests):
        responses = []
        for request in requests:
            scada = pb_utils.get_input_tensor_by_name(request, "SCADA").as_numpy()
            valid = pb_utils.get_input_tensor_by_name(request, "VALID").as_numpy()
            with torch.inference_mode():
                x = torch.from_numpy(scada).to(self.device, self.dtype)
                m = torch.from_numpy(valid.astype(bool)).to(self.device)
                probs = self.model(x, m).float().cpu().numpy()
            out = pb_utils.Tensor("FAULT_PROB", probs.astype(self.output_dtype))
            responses.append(pb_utils.InferenceResponse(output_tensors=[out]))
        return responses

    def finalize(self):
        self.model = None
