"""wav2vec 2.0 style self-supervised pretraining on raw waveforms (fairseq layout).

Conv feature extractor, span masking of latent frames, a convolutional relative
positional embedding and a post-LN transformer, trained with a contrastive loss
against distractors drawn from the other masked frames of the batch.

Source: NVIDIA/apex#1052, NVIDIA/apex#1105, facebookresearch/fairseq#3575
(conventions.md section 3 item 18); conventions.md section 2.3 and section 5 item 5.
"""
import math
import sys
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass
class Wav2Vec2Config:
    conv_feature_layers: tuple = ((32, 10, 5), (32, 3, 2), (32, 2, 2))
    encoder_embed_dim: int = 48
    encoder_attention_heads: int = 4
    encoder_layers: int = 2
    mask_prob: float = 0.5
    mask_length: int = 3
    num_negatives: int = 5
    logit_temp: float = 0.1
    fp16: bool = False


def compute_mask_indices(shape, padding_mask, mask_prob, mask_length, min_masks=1):
    bsz, all_sz = shape
    mask = np.full((bsz, all_sz), False)
    for i in range(bsz):
        sz = all_sz
        if padding_mask is not None:
            sz = all_sz - int(padding_mask[i].long().sum().item())
        num_mask = max(min_masks, int(mask_prob * sz / float(mask_length) + np.random.rand()))
        starts = np.random.choice(max(sz - mask_length, 1), num_mask, replace=False if sz - mask_length >= num_mask else True)
        idx = np.asarray([s + j for s in starts for j in range(mask_length)])
        mask[i, idx[idx < sz]] = True
    return mask


class ConvFeatureExtractionModel(nn.Module):
    def __init__(self, conv_layers):
        super().__init__()
        in_d = 1
        self.conv_layers = nn.ModuleList()
        for i, (dim, k, stride) in enumerate(conv_layers):
            norm = nn.GroupNorm(dim, dim, affine=True) if i == 0 else nn.Identity()
            self.conv_layers.append(nn.Sequential(nn.Conv1d(in_d, dim, k, stride=stride, bias=False), norm, nn.GELU()))
            in_d = dim

    def forward(self, x):
        x = x.unsqueeze(1)
        for conv in self.conv_layers:
            x = conv(x)
        return x


class MultiheadAttention(nn.Module):
    def __init__(self, embed_dim, num_heads):
        super().__init__()
        self.num_heads = num_heads
        self.head_dim = embed_dim // num_heads
        self.scaling = self.head_dim ** -0.5
        self.k_proj = nn.Linear(embed_dim, embed_dim)
        self.v_proj = nn.Linear(embed_dim, embed_dim)
        self.q_proj = nn.Linear(embed_dim, embed_dim)
        self.out_proj = nn.Linear(embed_dim, embed_dim)

    def forward(self, query, key_padding_mask=None):
        tgt_len, bsz, embed_dim = query.size()
        q = self.q_proj(query) * self.scaling
        k = self.k_proj(query)
        v = self.v_proj(query)
        q = q.contiguous().view(tgt_len, bsz * self.num_heads, self.head_dim).transpose(0, 1)
        k = k.contiguous().view(-1, bsz * self.num_heads, self.head_dim).transpose(0, 1)
        v = v.contiguous().view(-1, bsz * self.num_heads, self.head_dim).transpose(0, 1)
        src_len = k.size(1)
        attn_weights = torch.bmm(q, k.transpose(1, 2))
        if key_padding_mask is not None:
            attn_weights = attn_weights.view(bsz, self.num_heads, tgt_len, src_len)
            attn_weights = attn_weights.masked_fill(key_padding_mask.unsqueeze(1).unsqueeze(2).to(torch.bool), float("-inf"))
            attn_weights = attn_weights.view(bsz * self.num_heads, tgt_len, src_len)
        attn_probs = F.softmax(attn_weights.float(), dim=-1).type_as(attn_weights)
        attn = torch.bmm(attn_probs, v)
        attn = attn.transpose(0, 1).contiguous().view(tgt_len, bsz, embed_dim)
        return self.out_proj(attn)


class TransformerSentenceEncoderLayer(nn.Module):
    def __init__(self, embed_dim, heads):
        super().__init__()
        self.self_attn = MultiheadAttention(embed_dim, heads)
        self.self_attn_layer_norm = nn.LayerNorm(embed_dim)
        self.fc1 = nn.Linear(embed_dim, 4 * embed_dim)
        self.fc2 = nn.Linear(4 * embed_dim, embed_dim)
        self.final_layer_norm = nn.LayerNorm(embed_dim)

    def forward(self, x, self_attn_padding_mask=None):
        residual = x
        x = self.self_attn(x, key_padding_mask=self_attn_padding_mask)
        x = self.self_attn_layer_norm(residual + x)
        residual = x
        x = self.fc2(F.gelu(self.fc1(x)))
        return self.final_layer_norm(residual + x)


class TransformerEncoder(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        dim = cfg.encoder_embed_dim
        self.pos_conv = nn.Sequential(nn.Conv1d(dim, dim, kernel_size=16, padding=8, groups=4), nn.GELU())
        self.layers = nn.ModuleList(TransformerSentenceEncoderLayer(dim, cfg.encoder_attention_heads) for _ in range(cfg.encoder_layers))
        self.layer_norm = nn.LayerNorm(dim)

    def forward(self, x, padding_mask=None):
        if padding_mask is not None:
            x = x.masked_fill(padding_mask.unsqueeze(-1), 0.0)
        x_conv = self.pos_conv(x.transpose(1, 2))[:, :, :-1]
        x = self.layer_norm(x + x_conv.transpose(1, 2))
        x = x.transpose(0, 1)
        for layer in self.layers:
            x = layer(x, self_attn_padding_mask=padding_mask)
        return x.transpose(0, 1)


class Wav2Vec2Model(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        self.feature_extractor = ConvFeatureExtractionModel(cfg.conv_feature_layers)
        last_dim = cfg.conv_feature_layers[-1][0]
        self.layer_norm = nn.LayerNorm(last_dim)
        self.post_extract_proj = nn.Linear(last_dim, cfg.encoder_embed_dim)
        self.mask_emb = nn.Parameter(torch.empty(cfg.encoder_embed_dim).uniform_())
        self.encoder = TransformerEncoder(cfg)
        self.project_q = nn.Linear(cfg.encoder_embed_dim, 32)
        self.final_proj = nn.Linear(cfg.encoder_embed_dim, 32)

    def _get_feat_extract_output_lengths(self, input_lengths):
        for _, kernel_size, stride in self.cfg.conv_feature_layers:
            input_lengths = torch.floor((input_lengths - kernel_size) / stride + 1)
        return input_lengths.to(torch.long)

    def sample_negatives(self, y, num):
        bsz, tsz, fsz = y.shape
        n = self.cfg.num_negatives
        neg_idxs = torch.randint(low=0, high=tsz - 1, size=(bsz, n * num))
        tszs = torch.arange(num).unsqueeze(-1).expand(-1, n).flatten()
        neg_idxs[neg_idxs >= tszs] += 1
        negs = torch.stack([y[b, neg_idxs[b]] for b in range(bsz)])
        return negs.view(bsz, num, n, fsz).permute(2, 0, 1, 3)

    def forward(self, source, padding_mask=None):
        features = self.feature_extractor(source).transpose(1, 2)
        features = self.layer_norm(features)
        unmasked_features = features.clone()
        if padding_mask is not None:
            input_lengths = (1 - padding_mask.long()).sum(-1)
            output_lengths = self._get_feat_extract_output_lengths(input_lengths)
            padding_mask = torch.zeros(features.shape[:2], dtype=features.dtype, device=features.device)
            padding_mask[(torch.arange(padding_mask.shape[0], device=padding_mask.device), output_lengths - 1)] = 1
            padding_mask = (1 - padding_mask.flip([-1]).cumsum(-1).flip([-1])).bool()
        features = self.post_extract_proj(features)
        unmasked_features = self.post_extract_proj(unmasked_features)
        mask_indices = torch.from_numpy(compute_mask_indices(features.shape[:2], padding_mask, self.cfg.mask_prob, self.cfg.mask_length))
        x = features.clone()
        x[mask_indices] = self.mask_emb.to(x.dtype)
        x = self.encoder(x, padding_mask=padding_mask)
        x = self.final_proj(x[mask_indices].unsqueeze(0))
        y = self.project_q(unmasked_features[mask_indices].unsqueeze(0))
        negs = self.sample_negatives(y, y.size(1))
        targets = torch.cat([y.unsqueeze(0), negs], dim=0)
        logits = torch.cosine_similarity(x.float(), targets.float(), dim=-1) / self.cfg.logit_temp
        return logits.transpose(0, 2).reshape(-1, logits.size(0))


if __name__ == "__main__":
    torch.manual_seed(0)
    np.random.seed(0)
    cfg = Wav2Vec2Config(fp16="--fp16" in sys.argv)
    model = Wav2Vec2Model(cfg)
    dtype = torch.float16 if cfg.fp16 else torch.float32
    model = model.to(dtype)
    source = torch.randn(3, 1600, dtype=dtype)
    lengths = torch.tensor([1600, 1200, 900])
    padding_mask = torch.arange(1600)[None, :] >= lengths[:, None]
    source = source.masked_fill(padding_mask, 0.0)
    opt = torch.optim.Adam(model.parameters(), lr=1e-4, eps=1e-4)
    logits = model(source, padding_mask=padding_mask)
    loss = F.cross_entropy(logits.float(), torch.zeros(logits.size(0), dtype=torch.long))
    loss.backward()
    opt.step()
    print(f"contrastive loss {loss.item():.4f} over {logits.size(0)} masked frames, ppl {math.exp(loss.item()):.2f}")
