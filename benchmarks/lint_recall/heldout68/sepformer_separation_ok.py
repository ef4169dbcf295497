"""Two-talker speech separation for a conference-call front end (SepFormer layout).

A learned conv encoder, a dual-path masking network (chunking with 50% overlap,
intra-chunk and inter-chunk transformers, overlap-add), and a transposed-conv
decoder, trained with permutation-invariant SI-SNR. The low-latency mode makes
both transformers look only backwards, with SpeechBrain's look-ahead mask.

Source: seed self_attention_mask_guide.txt section 3 and section 7 Q3; conventions.md section 1.
"""
import itertools
from types import SimpleNamespace

import torch
import torch.nn as nn
import torch.nn.functional as F

CONFIG = SimpleNamespace(N=32, kernel_size=16, stride=8, chunk_size=10, num_spks=2, num_blocks=1, heads=4, causal=True)


def get_lookahead_mask(padded_input):
    seq_len = padded_input.shape[1]
    mask = (torch.triu(torch.ones((seq_len, seq_len), device=padded_input.device)) == 1).transpose(0, 1)
    mask = mask.float().masked_fill(mask == 0, float("-inf")).masked_fill(mask == 1, float(0.0))
    return mask.detach().to(padded_input.device)


class SelfAttention(nn.Module):
    def __init__(self, d_model, nhead):
        super().__init__()
        self.nhead, self.scale = nhead, (d_model // nhead) ** -0.5
        self.in_proj = nn.Linear(d_model, 3 * d_model)
        self.out_proj = nn.Linear(d_model, d_model)

    def forward(self, x, attn_mask=None):
        b, t, d = x.shape
        q, k, v = self.in_proj(x).view(b, t, 3, self.nhead, d // self.nhead).permute(2, 0, 3, 1, 4)
        scores = torch.matmul(q, k.transpose(-2, -1)) * self.scale
        if attn_mask is not None:
            scores = scores + attn_mask
        attn = scores.softmax(dim=-1)
        return self.out_proj(torch.matmul(attn, v).transpose(1, 2).reshape(b, t, d))


class SBTransformerBlock(nn.Module):
    def __init__(self, d_model, nhead, num_layers=1, causal=False):
        super().__init__()
        self.causal = causal
        self.layers = nn.ModuleList(
            nn.ModuleDict({"norm1": nn.LayerNorm(d_model), "attn": SelfAttention(d_model, nhead), "norm2": nn.LayerNorm(d_model),
                           "ffn": nn.Sequential(nn.Linear(d_model, 4 * d_model), nn.ReLU(), nn.Linear(4 * d_model, d_model))})
            for _ in range(num_layers))

    def forward(self, x):
        src_mask = get_lookahead_mask(x) if self.causal else None
        for layer in self.layers:
            x = x + layer["attn"](layer["norm1"](x), attn_mask=src_mask)
            x = x + layer["ffn"](layer["norm2"](x))
        return x


class DualPathBlock(nn.Module):
    def __init__(self, N, heads, causal):
        super().__init__()
        self.intra_mdl, self.inter_mdl = SBTransformerBlock(N, heads, causal=causal), SBTransformerBlock(N, heads, causal=causal)
        self.intra_norm, self.inter_norm = nn.GroupNorm(1, N, eps=1e-8), nn.GroupNorm(1, N, eps=1e-8)

    def forward(self, x):
        B, N, K, S = x.shape
        intra = self.intra_mdl(x.permute(0, 3, 2, 1).contiguous().view(B * S, K, N))
        intra = self.intra_norm(intra.view(B, S, K, N).permute(0, 3, 2, 1).contiguous()) + x
        inter = self.inter_mdl(intra.permute(0, 2, 3, 1).contiguous().view(B * K, S, N))
        return self.inter_norm(inter.view(B, K, S, N).permute(0, 3, 1, 2).contiguous()) + intra


class Dual_Path_Model(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.K, self.num_spks = cfg.chunk_size, cfg.num_spks
        self.norm, self.conv1d = nn.GroupNorm(1, cfg.N, eps=1e-8), nn.Conv1d(cfg.N, cfg.N, 1, bias=False)
        self.dual_mdl = nn.ModuleList(DualPathBlock(cfg.N, cfg.heads, cfg.causal) for _ in range(cfg.num_blocks))
        self.conv2d = nn.Conv2d(cfg.N, cfg.N * cfg.num_spks, kernel_size=1)
        self.prelu = nn.PReLU()
        self.output, self.output_gate = nn.Conv1d(cfg.N, cfg.N, 1), nn.Conv1d(cfg.N, cfg.N, 1)
        self.end_conv1x1 = nn.Conv1d(cfg.N, cfg.N, 1, bias=False)

    def _padding(self, x, K):
        B, N, L = x.shape
        P = K // 2
        gap = K - (P + L % K) % K
        if gap > 0:
            x = torch.cat([x, x.new_zeros(B, N, gap)], dim=2)
        return torch.cat([x.new_zeros(B, N, P), x, x.new_zeros(B, N, P)], dim=2), gap

    def _Segmentation(self, x, K):
        B, N, L = x.shape
        P = K // 2
        x, gap = self._padding(x, K)
        input1 = x[:, :, :-P].contiguous().view(B, N, -1, K)
        input2 = x[:, :, P:].contiguous().view(B, N, -1, K)
        return torch.cat([input1, input2], dim=3).view(B, N, -1, K).transpose(2, 3).contiguous(), gap

    def _over_add(self, x, gap):
        B, N, K, S = x.shape
        P = K // 2
        x = x.transpose(2, 3).contiguous().view(B, N, -1, K * 2)
        input1 = x[:, :, :, :K].contiguous().view(B, N, -1)[:, :, P:]
        input2 = x[:, :, :, K:].contiguous().view(B, N, -1)[:, :, :-P]
        x = input1 + input2
        return x[:, :, :-gap] if gap > 0 else x

    def forward(self, x):
        x, gap = self._Segmentation(self.conv1d(self.norm(x)), self.K)
        for block in self.dual_mdl:
            x = block(x)
        x = self.conv2d(self.prelu(x))
        B, _, K, S = x.shape
        x = self._over_add(x.view(B * self.num_spks, -1, K, S), gap)
        x = self.end_conv1x1(torch.tanh(self.output(x)) * torch.sigmoid(self.output_gate(x)))
        return F.relu(x.view(B, self.num_spks, -1, x.size(-1)).transpose(0, 1))


class SepFormer(nn.Module):
    def __init__(self, cfg=CONFIG):
        super().__init__()
        self.encoder = nn.Conv1d(1, cfg.N, cfg.kernel_size, stride=cfg.stride, bias=False)
        self.masknet = Dual_Path_Model(cfg)
        self.decoder = nn.ConvTranspose1d(cfg.N, 1, cfg.kernel_size, stride=cfg.stride, bias=False)

    def forward(self, mix):
        mix_w = F.relu(self.encoder(mix.unsqueeze(1)))
        est_mask = self.masknet(mix_w)
        sep_h = torch.stack([mix_w] * est_mask.size(0)) * est_mask
        est_source = torch.cat([self.decoder(sep_h[i]) for i in range(est_mask.size(0))], dim=1)
        T_origin, T_est = mix.size(1), est_source.size(2)
        return F.pad(est_source, (0, T_origin - T_est)) if T_origin > T_est else est_source[:, :, :T_origin]


def si_snr(est, target, eps=1e-8):
    est, target = est - est.mean(-1, keepdim=True), target - target.mean(-1, keepdim=True)
    proj = (est * target).sum(-1, keepdim=True) * target / (target.pow(2).sum(-1, keepdim=True) + eps)
    return 10 * torch.log10(proj.pow(2).sum(-1) / ((est - proj).pow(2).sum(-1) + eps) + eps)


def pit_si_snr_loss(est, sources):
    perms = list(itertools.permutations(range(sources.size(1))))
    per_perm = torch.stack([si_snr(est[:, list(p)], sources).mean(-1) for p in perms], dim=1)
    return -per_perm.max(dim=1).values.mean()


if __name__ == "__main__":
    torch.manual_seed(0)
    model = SepFormer()
    opt = torch.optim.Adam(model.parameters(), lr=1.5e-4)
    t = torch.arange(800) / 8000.0
    sources = torch.stack([torch.stack([torch.sin(6.28 * 220 * t), torch.sign(torch.sin(6.28 * 97 * t)) * 0.5]) * (0.5 + torch.rand(2, 1)) for _ in range(2)])
    mix = sources.sum(1)
    for step in range(3):
        loss = pit_si_snr_loss(model(mix), sources)
        opt.zero_grad()
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), 5.0)
        opt.step()
        print(f"step {step} neg SI-SNR {loss.item():.3f} dB")
