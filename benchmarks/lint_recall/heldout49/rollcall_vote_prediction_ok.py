"""Roll-call vote prediction from bill text and legislators' ideal points.

Each bill's summary is encoded by a small transformer into a policy vector;
every legislator has a learned ideal point and propensity, and the yea
probability is their bilinear score (a text-based extension of the
DW-NOMINATE spatial model). Bills are padded to a fixed number of tokens and
batched; the votes of the whole chamber form each bill's target row.

Source: conventions.md §2.6, §1 (SDPA row), §5 item 6
"""

from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass
class ChamberConfig:
    n_legislators: int = 60
    vocab_size: int = 81
    max_tokens: int = 32
    batch_size: int = 32
    dim: int = 48
    heads: int = 4
    layers: int = 2
    pad_id: int = 0


def synth_session(cfg, n_bills, ideal, seed=0):
    g = torch.Generator().manual_seed(seed)
    topic_words = torch.arange(1, cfg.vocab_size).view(4, -1)
    tokens = torch.full((n_bills, cfg.max_tokens), cfg.pad_id)
    position = torch.empty(n_bills, 2)
    for b in range(n_bills):
        mix = torch.rand(4, generator=g) ** 3
        mix = mix / mix.sum()
        position[b] = torch.stack([mix[0] - mix[1], mix[2] - mix[3]])
        n = int(torch.randint(6, cfg.max_tokens + 1, (1,), generator=g))
        topics = torch.multinomial(mix, n, replacement=True, generator=g)
        tokens[b, :n] = topic_words[topics, torch.randint(topic_words.shape[1], (n,), generator=g)]
    utility = position @ ideal.T + 0.3 * torch.randn(n_bills, len(ideal), generator=g)
    return tokens, (utility > 0).float()


class Block(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 2 * dim), nn.GELU(), nn.Linear(2 * dim, dim))

    def forward(self, x, attn_mask=None):
        b, n, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(b, n, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        a = F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask)
        x = x + self.proj(a.transpose(1, 2).reshape(b, n, d))
        return x + self.mlp(self.ln2(x))


class BillEncoder(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.pad_id = cfg.pad_id
        self.tok = nn.Embedding(cfg.vocab_size, cfg.dim, padding_idx=cfg.pad_id)
        self.pos = nn.Embedding(cfg.max_tokens, cfg.dim)
        self.blocks = nn.ModuleList(Block(cfg.dim, cfg.heads) for _ in range(cfg.layers))
        self.ln = nn.LayerNorm(cfg.dim)

    def forward(self, tokens):
        keep = tokens != self.pad_id
        x = self.tok(tokens) + self.pos(torch.arange(tokens.shape[1], device=tokens.device))
        for block in self.blocks:
            x = block(x, attn_mask=keep[:, None, None, :])
        w = keep.unsqueeze(-1).float()
        return self.ln((x * w).sum(1) / w.sum(1))


class TextIdealPointModel(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.encoder = BillEncoder(cfg)
        self.bill_proj = nn.Linear(cfg.dim, 8)
        self.bill_bias = nn.Linear(cfg.dim, 1)
        self.ideal = nn.Embedding(cfg.n_legislators, 8)
        self.propensity = nn.Embedding(cfg.n_legislators, 1)

    def forward(self, tokens):
        bill = self.encoder(tokens)
        legislators = torch.arange(self.ideal.num_embeddings, device=tokens.device)
        return self.bill_proj(bill) @ self.ideal(legislators).T + self.bill_bias(bill) + self.propensity(legislators).T


@torch.no_grad()
def vote_accuracy(model, tokens, votes, batch_size):
    model.eval()
    correct = 0
    for i in range(0, len(tokens), batch_size):
        logits = model(tokens[i : i + batch_size])
        correct += ((logits > 0).float() == votes[i : i + batch_size]).sum().item()
    return correct / votes.numel()


def main():
    torch.manual_seed(0)
    cfg = ChamberConfig()
    ideal = torch.randn(cfg.n_legislators, 2)
    train_tokens, train_votes = synth_session(cfg, 480, ideal, seed=1)
    test_tokens, test_votes = synth_session(cfg, 128, ideal, seed=2)
    model = TextIdealPointModel(cfg)
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    for epoch in range(8):
        model.train()
        perm = torch.randperm(len(train_tokens))
        for i in range(0, len(perm) - cfg.batch_size + 1, cfg.batch_size):
            idx = perm[i : i + cfg.batch_size]
            loss = F.binary_cross_entropy_with_logits(model(train_tokens[idx]), train_votes[idx])
            opt.zero_grad()
            loss.backward()
            opt.step()
        acc = vote_accuracy(model, test_tokens, test_votes, cfg.batch_size)
        print(f"epoch {epoch} loss {loss.item():.3f} held-out vote accuracy {acc:.3f}")


if __name__ == "__main__":
    main()
