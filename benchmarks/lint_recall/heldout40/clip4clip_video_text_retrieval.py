"""CLIP4Clip-style text-video retrieval with the seqTransf similarity header.

Frames arrive as per-frame features (up to ``max_frames``, flagged by ``video_mask``), captions as
BPE-like ids between a start and an end-of-text token. The layout follows ArrowLuo/CLIP4Clip
(``modules/modeling.py`` and ``modules/module_cross.py``): ``CLIP4Clip.get_sequence_output``,
``get_visual_output``, the frame position embeddings and ``TransformerClip`` of the seqTransf
header, ``_mean_pooling_for_similarity_visual``, ``CrossEn`` and ``compute_metrics``; CLIP's own
``convert_weights`` and ``LayerNorm`` come from openai/CLIP's ``clip/model.py``.

Source: NVIDIA/apex#1052, facebookresearch/fairseq#3575 (conventions.md §3 item 18),
conventions.md §2.3
"""

import math
from collections import OrderedDict
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

PAD_TOKEN = 0
SOT_TOKEN = 1


@dataclass
class CLIP4ClipConfig:
    vocab_size: int = 48
    context_length: int = 12
    width: int = 64
    heads: int = 4
    layers: int = 2
    embed_dim: int = 64
    frame_feature_dim: int = 80
    max_frames: int = 12
    cross_num_hidden_layers: int = 2

    @property
    def eot_token(self):
        return self.vocab_size - 1


class LayerNorm(nn.LayerNorm):
    def forward(self, x):
        orig_type = x.dtype
        ret = super().forward(x.type(torch.float32))
        return ret.type(orig_type)


class QuickGELU(nn.Module):
    def forward(self, x):
        return x * torch.sigmoid(1.702 * x)


class ResidualAttentionBlock(nn.Module):
    def __init__(self, d_model, n_head):
        super().__init__()
        self.n_head = n_head
        self.in_proj = nn.Linear(d_model, 3 * d_model)
        self.out_proj = nn.Linear(d_model, d_model)
        self.ln_1 = LayerNorm(d_model)
        self.mlp = nn.Sequential(
            OrderedDict(
                [
                    ("c_fc", nn.Linear(d_model, d_model * 4)),
                    ("gelu", QuickGELU()),
                    ("c_proj", nn.Linear(d_model * 4, d_model)),
                ]
            )
        )
        self.ln_2 = LayerNorm(d_model)

    def attention(self, x, attn_mask):
        b, t, c = x.shape
        q, k, v = self.in_proj(x).split(c, dim=-1)
        q = q.view(b, t, self.n_head, -1).transpose(1, 2)
        k = k.view(b, t, self.n_head, -1).transpose(1, 2)
        v = v.view(b, t, self.n_head, -1).transpose(1, 2)
        scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
        scores = scores.masked_fill(~attn_mask, -1e9)  # expect: MC501 clip4clip
        probs = scores.softmax(dim=-1)
        return self.out_proj((probs @ v).transpose(1, 2).reshape(b, t, c))

    def forward(self, para_tuple):
        x, attn_mask = para_tuple
        x = x + self.attention(self.ln_1(x), attn_mask)
        x = x + self.mlp(self.ln_2(x))
        return (x, attn_mask)


class TransformerClip(nn.Module):
    def __init__(self, width, layers, heads):
        super().__init__()
        self.width = width
        self.resblocks = nn.Sequential(
            *[ResidualAttentionBlock(width, heads) for _ in range(layers)]
        )

    def forward(self, x, attn_mask):
        return self.resblocks((x, attn_mask))[0]


def convert_weights(model: nn.Module):
    def _convert_weights_to_fp16(layer):
        if isinstance(layer, (nn.Conv1d, nn.Conv2d, nn.Linear)):
            layer.weight.data = layer.weight.data.half()
            if layer.bias is not None:
                layer.bias.data = layer.bias.data.half()
        for name in ["text_projection", "proj"]:
            attr = getattr(layer, name, None)
            if attr is not None:
                attr.data = attr.data.half()

    model.apply(_convert_weights_to_fp16)


class CrossEn(nn.Module):
    def forward(self, sim_matrix):
        logpt = F.log_softmax(sim_matrix, dim=-1)
        return (-torch.diag(logpt)).mean()


class CLIP4Clip(nn.Module):
    def __init__(self, cfg: CLIP4ClipConfig):
        super().__init__()
        self.cfg = cfg
        self.token_embedding = nn.Embedding(cfg.vocab_size, cfg.width)
        self.positional_embedding = nn.Parameter(torch.randn(cfg.context_length, cfg.width) * 0.01)
        self.transformer = TransformerClip(cfg.width, cfg.layers, cfg.heads)
        self.ln_final = LayerNorm(cfg.width)
        self.text_projection = nn.Parameter(torch.randn(cfg.width, cfg.embed_dim) * cfg.width**-0.5)
        self.visual = nn.Linear(cfg.frame_feature_dim, cfg.embed_dim)
        self.register_buffer("causal_keep", self.build_attention_mask(), persistent=False)
        self.frame_position_embeddings = nn.Embedding(cfg.max_frames, cfg.embed_dim)
        self.transformerClip = TransformerClip(
            cfg.embed_dim, cfg.cross_num_hidden_layers, cfg.heads
        )
        self.logit_scale = nn.Parameter(torch.ones([]) * np.log(1 / 0.07))
        self.loss_fct = CrossEn()

    def build_attention_mask(self):
        n = self.cfg.context_length
        return torch.ones(n, n, dtype=torch.bool).tril()

    @property
    def dtype(self):
        return self.visual.weight.dtype

    def get_sequence_output(self, input_ids):
        x = self.token_embedding(input_ids).type(self.dtype)
        x = x + self.positional_embedding.type(self.dtype)
        x = self.transformer(x, self.causal_keep)
        x = self.ln_final(x).type(self.dtype)
        x = x[torch.arange(x.shape[0]), input_ids.argmax(dim=-1)] @ self.text_projection
        return x.float()

    def get_visual_output(self, video):
        return self.visual(video.type(self.dtype)).float()

    def _mean_pooling_for_similarity_visual(self, visual_output, video_mask):
        video_mask_un = video_mask.to(dtype=torch.float).unsqueeze(-1)
        visual_output = visual_output * video_mask_un
        video_mask_un_sum = torch.sum(video_mask_un, dim=1, dtype=torch.float)
        video_mask_un_sum[video_mask_un_sum == 0.0] = 1.0
        return torch.sum(visual_output, dim=1) / video_mask_un_sum

    def _loose_similarity(self, sequence_output, visual_output, video_mask):
        visual_output_original = visual_output
        position_ids = torch.arange(visual_output.size(1), device=visual_output.device)
        visual_output = visual_output + self.frame_position_embeddings(position_ids)[None]
        extended_video_mask = video_mask[:, None, None, :].bool()
        visual_output = self.transformerClip(visual_output.type(self.dtype), extended_video_mask)
        visual_output = visual_output.float() + visual_output_original
        visual_output = visual_output / visual_output.norm(dim=-1, keepdim=True)
        visual_output = self._mean_pooling_for_similarity_visual(visual_output, video_mask)
        visual_output = visual_output / visual_output.norm(dim=-1, keepdim=True)
        sequence_output = sequence_output / sequence_output.norm(dim=-1, keepdim=True)
        return self.logit_scale.exp() * sequence_output @ visual_output.t()

    def forward(self, input_ids, video, video_mask):
        sequence_output = self.get_sequence_output(input_ids)
        visual_output = self.get_visual_output(video)
        sim_matrix = self._loose_similarity(sequence_output, visual_output, video_mask)
        return (self.loss_fct(sim_matrix) + self.loss_fct(sim_matrix.T)) / 2


def compute_metrics(x):
    sx = np.sort(-x, axis=1)
    d = np.diag(-x)[:, np.newaxis]
    ind = np.where(sx - d == 0)[1]
    return {"R1": float(np.mean(ind == 0)) * 100, "R5": float(np.mean(ind < 5)) * 100}


def make_msrvtt_like(n, cfg, gen, concepts, words):
    ids = torch.randint(0, len(concepts), (n,), generator=gen)
    input_ids = torch.full((n, cfg.context_length), PAD_TOKEN, dtype=torch.long)
    video = torch.zeros(n, cfg.max_frames, cfg.frame_feature_dim)
    video_mask = torch.zeros(n, cfg.max_frames, dtype=torch.long)
    for i, c in enumerate(ids.tolist()):
        k = int(torch.randint(2, 5, (1,), generator=gen))
        caption = [SOT_TOKEN, *words[c, :k].tolist(), cfg.eot_token]
        input_ids[i, : len(caption)] = torch.tensor(caption)
        nf = int(torch.randint(3, cfg.max_frames + 1, (1,), generator=gen))
        drift = torch.linspace(0, 1, nf)[:, None] * concepts[(c + 1) % len(concepts)]
        video[i, :nf] = concepts[c] + 0.3 * drift + 0.4 * torch.randn(nf, cfg.frame_feature_dim)
        video_mask[i, :nf] = 1
    return input_ids, video, video_mask


@torch.no_grad()
def evaluate(model, input_ids, video, video_mask):
    model.eval()
    seq = model.get_sequence_output(input_ids)
    vis = model.get_visual_output(video)
    sim = model._loose_similarity(seq, vis, video_mask)
    model.train()
    return compute_metrics(sim.float().numpy())


if __name__ == "__main__":
    torch.manual_seed(0)
    cfg = CLIP4ClipConfig()
    gen = torch.Generator().manual_seed(0)
    concepts = torch.randn(40, cfg.frame_feature_dim, generator=gen)
    words = torch.randint(3, cfg.eot_token, (len(concepts), 4), generator=gen)
    train = make_msrvtt_like(640, cfg, gen, concepts, words)
    test = make_msrvtt_like(64, cfg, gen, concepts, words)
    model = CLIP4Clip(cfg)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.2)
    for epoch in range(4):
        perm = torch.randperm(640)
        for start in range(0, 640, 32):
            idx = perm[start : start + 32]
            loss = model(train[0][idx], train[1][idx], train[2][idx])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        print(f"epoch {epoch} loss {loss.item():.3f}")
    print("float32", evaluate(model, *test))
    convert_weights(model)
    print("float16", evaluate(model, *test))
