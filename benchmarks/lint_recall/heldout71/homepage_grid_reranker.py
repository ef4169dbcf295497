"""Context-aware re-ranking of a two-column homepage grid (waterfall feed) in an e-commerce app.

The first-stage ranker proposes ``n_slots`` items for a page; the re-ranker lets every slot
attend to the slots a user sees together (same and neighbouring rows of the two-column grid, a
fixed layout bias kept as a buffer), adds the user's real-time intent vector, and rescores the
page with a listwise softmax loss. Slots reserved by the page template (banners, ads) are hidden
from the organic items on that request.

Source: seed masked_fill_inplace.txt (与模型缓冲区的配合; 张量共享内存风险); conventions.md
section 2.3.
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

N_SLOTS = 8
N_COLS = 2


def grid_layout_bias(n_slots, n_cols, max_row_gap=1):
    rows = torch.arange(n_slots) // n_cols
    gap = (rows[:, None] - rows[None, :]).abs()
    return torch.zeros(n_slots, n_slots).masked_fill(gap > max_row_gap, float("-inf"))


class GridAttention(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.out = nn.Linear(dim, dim)

    def forward(self, x, bias):
        b, n, d = x.shape
        q, k, v = self.qkv(x).view(b, n, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        scores = q @ k.transpose(-2, -1) / (d // self.heads) ** 0.5 + bias
        return self.out((scores.softmax(-1) @ v).transpose(1, 2).reshape(b, n, d))


class GridReRanker(nn.Module):
    def __init__(self, n_items, n_feats, dim=16, heads=2, n_slots=N_SLOTS, n_cols=N_COLS):
        super().__init__()
        self.item_emb = nn.Embedding(n_items, dim, padding_idx=0)
        self.feat_proj = nn.Linear(n_feats, dim)
        self.slot_emb = nn.Embedding(n_slots, dim)
        self.intent_proj = nn.Linear(dim, dim)
        self.attn = GridAttention(dim, heads)
        self.norm = nn.LayerNorm(dim)
        self.score = nn.Sequential(nn.Linear(2 * dim, dim), nn.ReLU(), nn.Linear(dim, 1))
        self.register_buffer("layout_bias", grid_layout_bias(n_slots, n_cols))

    def forward(self, items, feats, intent, reserved):
        x = self.item_emb(items) + self.feat_proj(feats) + self.slot_emb.weight[None]
        x = x + self.intent_proj(intent)[:, None, :]
        bias = self.layout_bias.masked_fill_(reserved[None, :], float("-inf"))  # expect: MC524 buffer
        bias = bias.masked_fill(torch.eye(bias.size(0), dtype=torch.bool), 0.0)
        h = self.norm(x + self.attn(x, bias))
        logits = self.score(torch.cat([h, x], dim=-1)).squeeze(-1)
        return logits.masked_fill(reserved[None, :] | (items == 0), float("-inf"))


def listwise_loss(logits, clicks):
    valid = torch.isfinite(logits)
    target = clicks.float() * valid
    target = target / target.sum(dim=-1, keepdim=True).clamp(min=1.0)
    logp = F.log_softmax(logits, dim=-1).masked_fill(~valid, 0.0)
    has_click = target.sum(dim=-1) > 0
    return -(target * logp).sum(dim=-1)[has_click].mean()


def rerank(logits, items):
    order = logits.argsort(dim=-1, descending=True)
    return torch.gather(items, 1, order)


def ndcg_at_k(logits, clicks, k=4):
    order = logits.argsort(dim=-1, descending=True)[:, :k]
    gains = torch.gather(clicks.float(), 1, order)
    disc = 1.0 / torch.log2(torch.arange(2, k + 2).float())
    dcg = (gains * disc).sum(-1)
    ideal = (clicks.float().sort(dim=-1, descending=True).values[:, :k] * disc).sum(-1)
    return (dcg / ideal.clamp(min=1e-9)).mean().item()


def page_template(name):
    reserved = torch.zeros(N_SLOTS, dtype=torch.bool)
    if name == "banner":
        reserved[0:2] = True
    elif name == "mid_ad":
        reserved[5] = True
    return reserved


def fake_requests(batch_size, n_items, n_feats, generator=None):
    items = torch.randint(1, n_items, (batch_size, N_SLOTS), generator=generator)
    items[0, -1] = 0
    feats = torch.randn(batch_size, N_SLOTS, n_feats, generator=generator)
    intent = torch.randn(batch_size, 16, generator=generator)
    clicks = torch.rand(batch_size, N_SLOTS, generator=generator) < 0.3
    clicks[:, 3] = True
    return items, feats, intent, clicks


class TemplateBatcher:
    def __init__(self, templates):
        self.templates = list(templates)
        self.i = 0

    def next(self):
        name = self.templates[self.i % len(self.templates)]
        self.i += 1
        return name, page_template(name)


if __name__ == "__main__":
    torch.manual_seed(6)
    n_items, n_feats = 100, 5
    model = GridReRanker(n_items, n_feats)
    opt = torch.optim.Adam(model.parameters(), lr=2e-3)
    batcher = TemplateBatcher(["plain", "banner", "mid_ad", "plain"])
    for step in range(4):
        name, reserved = batcher.next()
        items, feats, intent, clicks = fake_requests(6, n_items, n_feats)
        clicks = clicks & ~reserved[None, :]
        logits = model(items, feats, intent, reserved)
        loss = listwise_loss(logits, clicks)
        opt.zero_grad()
        loss.backward()
        opt.step()
    with torch.no_grad():
        logits = model(items, feats, intent, reserved)
    print("template %s loss %.4f ndcg@4 %.3f first page %s" % (name, loss.item(), ndcg_at_k(logits.nan_to_num(-1e4), clicks),
                                                          rerank(logits, items)[0].tolist()))
    print("hidden layout cells:", int(torch.isinf(model.layout_bias).sum()))
