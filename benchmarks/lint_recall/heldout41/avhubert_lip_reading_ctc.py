"""Visual speech recognition (lip reading) with an AV-HuBERT-style video encoder and a CTC head.

Layout of facebookresearch/av_hubert on fairseq: a ResNet front-end with a 3-D convolutional
stem (ResEncoder), wav2vec 2.0's TransformerEncoder with the convolutional pos_conv and
layer_norm_first TransformerSentenceEncoderLayer, fairseq's MultiheadAttention over (T, B, C)
with key_padding_mask, lengths_to_padding_mask, CTC fine-tuning over characters, greedy CTC
decoding and CER; inference runs under bfloat16 autocast, on synthetic LRS3-like mouth crops.

Source: NVIDIA/apex#1052, facebookresearch/fairseq#3575, huggingface/lerobot PR #710, conventions.md §2.3
"""

import math
import random

import torch
import torch.nn as nn
import torch.nn.functional as F

CHARS = "_abcdefghij"


def lengths_to_padding_mask(lens):
    bsz, max_lens = lens.size(0), torch.max(lens).item()
    mask = torch.arange(max_lens).to(lens.device).view(1, max_lens)
    return mask.expand(bsz, -1) >= lens.view(bsz, 1).expand(-1, max_lens)


class BasicBlock(nn.Module):
    def __init__(self, inplanes, planes, stride=1):
        super().__init__()
        self.conv1 = nn.Conv2d(inplanes, planes, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.downsample = None
        if stride != 1 or inplanes != planes:
            self.downsample = nn.Sequential(nn.Conv2d(inplanes, planes, 1, stride, bias=False), nn.BatchNorm2d(planes))

    def forward(self, x):
        residual = x if self.downsample is None else self.downsample(x)
        out = F.relu(self.bn1(self.conv1(x)))
        return F.relu(self.bn2(self.conv2(out)) + residual)


class ResEncoder(nn.Module):
    def __init__(self, frontend_nout=16, backend_out=64):
        super().__init__()
        self.frontend3D = nn.Sequential(
            nn.Conv3d(1, frontend_nout, kernel_size=(5, 7, 7), stride=(1, 2, 2), padding=(2, 3, 3), bias=False),
            nn.BatchNorm3d(frontend_nout), nn.PReLU(num_parameters=frontend_nout),
            nn.MaxPool3d(kernel_size=(1, 3, 3), stride=(1, 2, 2), padding=(0, 1, 1)))
        self.trunk = nn.Sequential(BasicBlock(frontend_nout, 32), BasicBlock(32, backend_out, stride=2))
        self.avgpool = nn.AdaptiveAvgPool2d(1)

    def forward(self, x):
        B, C, T, H, W = x.size()
        x = self.frontend3D(x)
        x = x.transpose(1, 2).reshape(B * T, x.size(1), x.size(3), x.size(4))
        x = self.avgpool(self.trunk(x)).flatten(1)
        return x.view(B, T, -1)


class MultiheadAttention(nn.Module):
    def __init__(self, embed_dim, num_heads, dropout=0.0):
        super().__init__()
        self.embed_dim = embed_dim
        self.num_heads = num_heads
        self.head_dim = embed_dim // num_heads
        self.scaling = self.head_dim ** -0.5
        self.dropout = dropout
        self.k_proj = nn.Linear(embed_dim, embed_dim)
        self.v_proj = nn.Linear(embed_dim, embed_dim)
        self.q_proj = nn.Linear(embed_dim, embed_dim)
        self.out_proj = nn.Linear(embed_dim, embed_dim)

    def forward(self, query, key, value, key_padding_mask=None):
        tgt_len, bsz, embed_dim = query.size()
        src_len = key.size(0)
        q = self.q_proj(query) * self.scaling
        k = self.k_proj(key)
        v = self.v_proj(value)
        q = q.contiguous().view(tgt_len, bsz * self.num_heads, self.head_dim).transpose(0, 1)
        k = k.contiguous().view(-1, bsz * self.num_heads, self.head_dim).transpose(0, 1)
        v = v.contiguous().view(-1, bsz * self.num_heads, self.head_dim).transpose(0, 1)
        attn_weights = torch.bmm(q, k.transpose(1, 2))
        if key_padding_mask is not None:
            attn_weights = attn_weights.view(bsz, self.num_heads, tgt_len, src_len)
            attn_weights = attn_weights.masked_fill(key_padding_mask.unsqueeze(1).unsqueeze(2).to(torch.bool), torch.finfo(torch.float).min)  # expect: MC517 avhubert
            attn_weights = attn_weights.view(bsz * self.num_heads, tgt_len, src_len)
        attn_weights_float = F.softmax(attn_weights, dim=-1, dtype=torch.float32)
        attn_probs = F.dropout(attn_weights_float.type_as(attn_weights), p=self.dropout, training=self.training)
        attn = torch.bmm(attn_probs, v)
        attn = attn.transpose(0, 1).contiguous().view(tgt_len, bsz, embed_dim)
        return self.out_proj(attn)


class TransformerSentenceEncoderLayer(nn.Module):
    def __init__(self, embedding_dim=64, ffn_embedding_dim=256, num_attention_heads=4, dropout=0.1,
                 layer_norm_first=True):
        super().__init__()
        self.self_attn = MultiheadAttention(embedding_dim, num_attention_heads, dropout=dropout)
        self.dropout1 = nn.Dropout(dropout)
        self.dropout2 = nn.Dropout(dropout)
        self.layer_norm_first = layer_norm_first
        self.self_attn_layer_norm = nn.LayerNorm(embedding_dim)
        self.fc1 = nn.Linear(embedding_dim, ffn_embedding_dim)
        self.fc2 = nn.Linear(ffn_embedding_dim, embedding_dim)
        self.final_layer_norm = nn.LayerNorm(embedding_dim)

    def forward(self, x, self_attn_padding_mask=None):
        residual = x
        if self.layer_norm_first:
            x = self.self_attn_layer_norm(x)
            x = residual + self.dropout1(self.self_attn(x, x, x, key_padding_mask=self_attn_padding_mask))
            residual = x
            x = residual + self.dropout2(self.fc2(F.gelu(self.fc1(self.final_layer_norm(x)))))
        else:
            x = self.self_attn_layer_norm(residual + self.dropout1(self.self_attn(x, x, x, self_attn_padding_mask)))
            x = self.final_layer_norm(x + self.dropout2(self.fc2(F.gelu(self.fc1(x)))))
        return x


class TransformerEncoder(nn.Module):
    def __init__(self, embed_dim=64, layers=3, conv_pos=15, conv_pos_groups=4):
        super().__init__()
        self.pos_conv = nn.Conv1d(embed_dim, embed_dim, kernel_size=conv_pos, padding=conv_pos // 2,
                                  groups=conv_pos_groups)
        nn.init.normal_(self.pos_conv.weight, mean=0, std=math.sqrt(4 / (conv_pos * embed_dim)))
        self.pos_conv = nn.utils.parametrizations.weight_norm(self.pos_conv, name="weight", dim=2)
        self.layers = nn.ModuleList([TransformerSentenceEncoderLayer(embed_dim) for _ in range(layers)])
        self.layer_norm = nn.LayerNorm(embed_dim)

    def forward(self, x, padding_mask=None):
        if padding_mask is not None:
            x = x.masked_fill(padding_mask.unsqueeze(-1), 0.0)
        x_conv = self.pos_conv(x.transpose(1, 2)).transpose(1, 2)
        x = x + F.gelu(x_conv)
        x = x.transpose(0, 1)
        for layer in self.layers:
            x = layer(x, self_attn_padding_mask=padding_mask)
        return self.layer_norm(x.transpose(0, 1))


class AVHubertCtc(nn.Module):
    def __init__(self, encoder_embed_dim=64, vocab_size=len(CHARS)):
        super().__init__()
        self.feature_extractor_video = ResEncoder(backend_out=encoder_embed_dim)
        self.layer_norm = nn.LayerNorm(encoder_embed_dim)
        self.encoder = TransformerEncoder(encoder_embed_dim)
        self.proj = nn.Linear(encoder_embed_dim, vocab_size)

    def forward(self, video, lengths):
        features = self.layer_norm(self.feature_extractor_video(video))
        padding_mask = lengths_to_padding_mask(lengths)
        x = self.encoder(features, padding_mask=padding_mask)
        return F.log_softmax(self.proj(x).float(), dim=-1), lengths


def ctc_greedy(log_probs, lengths):
    hyps = []
    for lp, n in zip(log_probs, lengths):
        ids = torch.unique_consecutive(lp[:n].argmax(-1)).tolist()
        hyps.append("".join(CHARS[i] for i in ids if i != 0))
    return hyps


def edit_distance(a, b):
    d = list(range(len(b) + 1))
    for i in range(1, len(a) + 1):
        prev, d[0] = d[0], i
        for j in range(1, len(b) + 1):
            prev, d[j] = d[j], min(d[j] + 1, d[j - 1] + 1, prev + (a[i - 1] != b[j - 1]))
    return d[len(b)]


def mouth_crops(n, rng, gen, size=24):
    yy, xx = torch.meshgrid(torch.linspace(-1, 1, size), torch.linspace(-1, 1, size), indexing="ij")
    texts = ["".join(rng.choice(CHARS[1:]) for _ in range(rng.randint(3, 7))) for _ in range(n)]
    frames = [[f for ch in t for f in [CHARS.index(ch)] * rng.randint(2, 4)] for t in texts]
    lengths = torch.tensor([len(f) for f in frames])
    video = torch.zeros(n, 1, int(lengths.max()), size, size)
    for i, seq in enumerate(frames):
        for t, c in enumerate(seq):
            w, h = 0.25 + 0.06 * c, 0.7 - 0.05 * c
            video[i, 0, t] = ((xx / w) ** 2 + (yy / h) ** 2 < 1).float()
        video[i, 0, : len(seq)] += 0.3 * torch.randn(len(seq), size, size, generator=gen)
    targets = [torch.tensor([CHARS.index(ch) for ch in t]) for t in texts]
    return video, lengths, texts, targets


@torch.no_grad()
def evaluate(model, video, lengths, texts, dtype=None):
    model.eval()
    with torch.autocast(device_type="cpu", dtype=dtype or torch.bfloat16, enabled=dtype is not None):
        log_probs, out_lengths = model(video, lengths)
    hyps = ctc_greedy(log_probs, out_lengths)
    return sum(edit_distance(h, r) for h, r in zip(hyps, texts)) / sum(len(r) for r in texts)


if __name__ == "__main__":
    rng = random.Random(0)
    gen = torch.Generator().manual_seed(0)
    torch.manual_seed(0)
    model = AVHubertCtc()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    for step in range(200):
        model.train()
        video, lengths, texts, targets = mouth_crops(16, rng, gen)
        log_probs, out_lengths = model(video, lengths)
        loss = F.ctc_loss(log_probs.transpose(0, 1), torch.cat(targets), out_lengths,
                          torch.tensor([len(t) for t in targets]), blank=0, zero_infinity=True)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if step % 50 == 0:
            print(f"step {step} ctc {loss.item():.3f}")
    video, lengths, texts, _ = mouth_crops(64, rng, gen)
    print(f"CER float32 {evaluate(model, video, lengths, texts):.3f}")
    print(f"CER bfloat16 autocast {evaluate(model, video, lengths, texts, dtype=torch.bfloat16):.3f}")
