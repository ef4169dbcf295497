"""Chest X-ray report generation served on GPUs in half precision.

A study holds one to three views (frontal, lateral, sometimes a second frontal); each view
is encoded by a frozen CNN into a grid of region features upstream, and the server receives
the regions of a batch of studies padded to the largest study. A transformer decoder writes
the findings section token by token with cross-attention over the regions. The serving
process loads the checkpoint, casts the model to float16 and decodes batches greedily.

Source: TransformerLensOrg/TransformerLens PR #366 (conventions.md §3 item 20), §1, §5 item 5
"""

import argparse
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

PAD, BOS, EOS = 0, 1, 2
REGIONS_PER_VIEW = 49


def masked_softmax(scores, keep):
    scores = scores.masked_fill(~keep, -1e-9)  # expect: MC516 helper
    return scores.softmax(dim=-1)


class Attention(nn.Module):
    def __init__(self, dim, heads, kv_dim=None):
        super().__init__()
        self.heads = heads
        self.q = nn.Linear(dim, dim)
        self.kv = nn.Linear(kv_dim or dim, 2 * dim)
        self.o = nn.Linear(dim, dim)

    def forward(self, x, memory, keep):
        b, t, d = x.shape
        q = self.q(x).view(b, t, self.heads, -1).transpose(1, 2)
        k, v = self.kv(memory).view(b, memory.size(1), 2, self.heads, -1).permute(2, 0, 3, 1, 4)
        weights = masked_softmax(q @ k.transpose(-2, -1) / math.sqrt(q.size(-1)), keep)
        return self.o((weights @ v).transpose(1, 2).reshape(b, t, d))


class ReportDecoderLayer(nn.Module):
    def __init__(self, dim, heads, region_dim):
        super().__init__()
        self.self_attn = Attention(dim, heads)
        self.cross_attn = Attention(dim, heads, kv_dim=region_dim)
        self.ff = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))
        self.norms = nn.ModuleList(nn.LayerNorm(dim) for _ in range(3))

    def forward(self, y, regions, token_keep, region_keep):
        h = self.norms[0](y)
        y = y + self.self_attn(h, h, token_keep)
        y = y + self.cross_attn(self.norms[1](y), regions, region_keep)
        return y + self.ff(self.norms[2](y))


class ReportGenerator(nn.Module):
    def __init__(self, vocab=4000, dim=256, heads=8, layers=3, region_dim=512, max_len=160):
        super().__init__()
        self.embed = nn.Embedding(vocab, dim, padding_idx=PAD)
        self.pos = nn.Embedding(max_len, dim)
        self.view_type = nn.Embedding(3, region_dim)
        self.layers = nn.ModuleList(ReportDecoderLayer(dim, heads, region_dim) for _ in range(layers))
        self.norm = nn.LayerNorm(dim)
        self.lm_head = nn.Linear(dim, vocab)
        self.register_buffer("causal", torch.tril(torch.ones(max_len, max_len, dtype=torch.bool)), persistent=False)

    def forward(self, tokens, regions, view_ids, view_count):
        t = tokens.size(1)
        regions = regions + self.view_type(view_ids).repeat_interleave(REGIONS_PER_VIEW, dim=1)
        n_regions = (view_count * REGIONS_PER_VIEW)[:, None]
        region_keep = (torch.arange(regions.size(1), device=regions.device)[None, :] < n_regions)[:, None, None, :]
        token_keep = self.causal[:t, :t] & (tokens != PAD)[:, None, None, :]
        y = self.embed(tokens) + self.pos(torch.arange(t, device=tokens.device))
        for layer in self.layers:
            y = layer(y, regions, token_keep, region_keep)
        return self.lm_head(self.norm(y))


def collate_studies(studies):
    views = max(len(s["views"]) for s in studies)
    dim = studies[0]["views"][0].size(-1)
    regions = torch.zeros(len(studies), views * REGIONS_PER_VIEW, dim)
    view_ids = torch.zeros(len(studies), views, dtype=torch.long)
    for i, study in enumerate(studies):
        for j, (feat, kind) in enumerate(zip(study["views"], study["kinds"])):
            regions[i, j * REGIONS_PER_VIEW:(j + 1) * REGIONS_PER_VIEW] = feat
            view_ids[i, j] = kind
    view_count = torch.tensor([len(s["views"]) for s in studies])
    return {"regions": regions, "view_ids": view_ids, "view_count": view_count}


@torch.inference_mode()
def generate(model, batch, max_len=120):
    device = next(model.parameters()).device
    dtype = next(model.parameters()).dtype
    regions = batch["regions"].to(device, dtype)
    tokens = torch.full((regions.size(0), 1), BOS, device=device)
    done = torch.zeros(regions.size(0), dtype=torch.bool, device=device)
    for _ in range(max_len):
        logits = model(tokens, regions, batch["view_ids"].to(device), batch["view_count"].to(device))
        nxt = logits[:, -1].float().argmax(-1).masked_fill(done, PAD)
        tokens = torch.cat([tokens, nxt[:, None]], dim=1)
        done |= nxt == EOS
        if done.all():
            break
    return tokens[:, 1:]


def teacher_forced_loss(model, batch, reports):
    logits = model(reports[:, :-1], batch["regions"], batch["view_ids"], batch["view_count"])
    return F.cross_entropy(logits.transpose(1, 2), reports[:, 1:], ignore_index=PAD)


def load_for_serving(checkpoint, device="cuda"):
    model = ReportGenerator()
    state = torch.load(checkpoint, map_location="cpu")
    model.load_state_dict(state["model"] if "model" in state else state)
    return model.to(device).half().eval()


def main(argv=None):
    parser = argparse.ArgumentParser()
    parser.add_argument("--checkpoint", required=True)
    parser.add_argument("--features", required=True)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--device", default="cuda")
    args = parser.parse_args(argv)
    model = load_for_serving(args.checkpoint, args.device)
    studies = torch.load(args.features)
    for start in range(0, len(studies), args.batch_size):
        chunk = studies[start:start + args.batch_size]
        reports = generate(model, collate_studies(chunk))
        for study, report in zip(chunk, reports.tolist()):
            print(study["accession"], [t for t in report if t not in (PAD, EOS)])


if __name__ == "__main__":
    main()
