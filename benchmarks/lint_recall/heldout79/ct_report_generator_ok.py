"""Abdominal CT report generation: 3-D patch encoder and a cached report decoder.

Volumes are resampled in-plane but keep their own number of slices, so a
batch is padded along depth and the visual tokens of padded slabs are masked
in the encoder and in cross-attention.  The decoder is trained with teacher
forcing and generates the FINDINGS section greedily with per-layer key/value
caches, after a short prompt that names the section.

Source: conventions.md §1 (SDPA is_causal row), §2.7, §5 item 8; pytorch/pytorch PR #111007.
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

VOCAB = ["<pad>", "<bos>", "<eos>", "findings:", "impression:", "the", "liver", "spleen", "kidneys",
         "pancreas", "is", "are", "normal", "in", "size", "no", "focal", "lesion", "mild", "steatosis",
         "hypodense", "cyst", "unremarkable", "."]
W2I = {w: i for i, w in enumerate(VOCAB)}
PAD, BOS, EOS = 0, 1, 2
SLAB = 4
PATCH = 8


class VolumeEncoder(nn.Module):
    def __init__(self, d_model, n_heads, n_layers):
        super().__init__()
        self.patch = nn.Conv3d(1, d_model, kernel_size=(SLAB, PATCH, PATCH), stride=(SLAB, PATCH, PATCH))
        layer = nn.TransformerEncoderLayer(d_model, n_heads, 2 * d_model, dropout=0.0, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, n_layers, enable_nested_tensor=False)

    def forward(self, volume, n_slices):
        z = self.patch(volume)
        b, d, dz, hz, wz = z.shape
        tokens = z.flatten(2).transpose(1, 2)
        slab_keep = torch.arange(dz, device=volume.device)[None, :] < (n_slices // SLAB)[:, None]
        token_keep = slab_keep.repeat_interleave(hz * wz, dim=1)
        return self.encoder(tokens, src_key_padding_mask=~token_keep), token_keep


class DecoderLayer(nn.Module):
    def __init__(self, d_model, n_heads):
        super().__init__()
        self.h = n_heads
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.o = nn.Linear(d_model, d_model)
        self.q_x = nn.Linear(d_model, d_model)
        self.kv_x = nn.Linear(d_model, 2 * d_model)
        self.o_x = nn.Linear(d_model, d_model)
        self.ln = nn.ModuleList([nn.LayerNorm(d_model) for _ in range(3)])
        self.ff = nn.Sequential(nn.Linear(d_model, 4 * d_model), nn.GELU(), nn.Linear(4 * d_model, d_model))

    def heads(self, x):
        b, n, d = x.shape
        return x.view(b, n, self.h, d // self.h).transpose(1, 2)

    def forward(self, x, memory, memory_keep, cache=None):
        b, n, d = x.shape
        q, k, v = (self.heads(t) for t in self.qkv(self.ln[0](x)).chunk(3, dim=-1))
        if cache is not None:
            if "k" in cache:
                k = torch.cat([cache["k"], k], dim=2)
                v = torch.cat([cache["v"], v], dim=2)
            cache["k"], cache["v"] = k, v
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=torch.ones(n, k.size(2), dtype=torch.bool, device=x.device).tril(k.size(2) - n))
        x = x + self.o(y.transpose(1, 2).reshape(b, n, d))
        q = self.heads(self.q_x(self.ln[1](x)))
        k, v = (self.heads(t) for t in self.kv_x(memory).chunk(2, dim=-1))
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=memory_keep[:, None, None, :])
        x = x + self.o_x(y.transpose(1, 2).reshape(b, n, d))
        return x + self.ff(self.ln[2](x))


class CTReportGenerator(nn.Module):
    def __init__(self, d_model=64, n_heads=4, enc_layers=2, dec_layers=2, max_len=64):
        super().__init__()
        self.encoder = VolumeEncoder(d_model, n_heads, enc_layers)
        self.embed = nn.Embedding(len(VOCAB), d_model, padding_idx=PAD)
        self.pos = nn.Embedding(max_len, d_model)
        self.layers = nn.ModuleList([DecoderLayer(d_model, n_heads) for _ in range(dec_layers)])
        self.norm = nn.LayerNorm(d_model)
        self.lm_head = nn.Linear(d_model, len(VOCAB), bias=False)
        self.lm_head.weight = self.embed.weight

    def decode(self, tokens, memory, memory_keep, past=None, offset=0):
        pos = torch.arange(offset, offset + tokens.size(1), device=tokens.device)
        x = self.embed(tokens) + self.pos(pos)[None]
        for i, layer in enumerate(self.layers):
            x = layer(x, memory, memory_keep, None if past is None else past[i])
        return self.lm_head(self.norm(x))

    def forward(self, volume, n_slices, reports):
        memory, memory_keep = self.encoder(volume, n_slices)
        logits = self.decode(reports[:, :-1], memory, memory_keep)
        return F.cross_entropy(logits.transpose(1, 2), reports[:, 1:], ignore_index=PAD)

    @torch.no_grad()
    def generate(self, volume, n_slices, prompt, max_new_tokens=12):
        memory, memory_keep = self.encoder(volume, n_slices)
        past = [dict() for _ in self.layers]
        logits = self.decode(prompt, memory, memory_keep, past)
        out, done = prompt, torch.zeros(prompt.size(0), dtype=torch.bool)
        for _ in range(max_new_tokens):
            nxt = logits[:, -1].argmax(-1).masked_fill(done, PAD)
            out = torch.cat([out, nxt[:, None]], dim=1)
            done |= nxt == EOS
            if done.all():
                break
            logits = self.decode(nxt[:, None], memory, memory_keep, past, offset=out.size(1) - 1)
        return out


def encode_reports(texts):
    rows = [[BOS] + [W2I[w] for w in t.split()] + [EOS] for t in texts]
    out = torch.full((len(rows), max(map(len, rows))), PAD, dtype=torch.long)
    for i, r in enumerate(rows):
        out[i, :len(r)] = torch.tensor(r)
    return out


if __name__ == "__main__":
    torch.manual_seed(0)
    n_slices = torch.tensor([16, 12])
    volume = torch.randn(2, 1, 16, 32, 32)
    volume[1, :, 12:] = 0.0
    reports = encode_reports(["findings: the liver is normal in size . no focal lesion .",
                              "findings: mild steatosis . hypodense cyst in the kidneys ."])
    model = CTReportGenerator()
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    for step in range(20):
        loss = model(volume, n_slices, reports)
        opt.zero_grad()
        loss.backward()
        opt.step()
    model.eval()
    prompt = torch.tensor([[BOS, W2I["findings:"]]] * 2)
    out = model.generate(volume, n_slices, prompt)
    print("loss", round(loss.item(), 4))
    print(" ".join(VOCAB[i] for i in out[0].tolist() if i != PAD))
