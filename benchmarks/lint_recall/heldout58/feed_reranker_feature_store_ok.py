"""List-wise re-ranker for a shopping feed, with features from an online feature store, served int8.

Retrieval hands over up to 50 candidate items per feed request. The re-ranker fetches each
item's features and the user's profile from the online feature store, lets the candidates
attend to each other (a PRM-style list-wise transformer, so an item's score depends on what
else is on the slate), and returns the new order. The serving copy is dynamically quantized
to int8 for the CPU fleet.

Source: seed self_attention_mask_guide.txt §3 (常见误区), §7 Q3; pytorch/pytorch#103963 (conventions.md §3 item 6)
"""

import argparse
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

PAD_ITEM = 0
MAX_SLATE = 50


class FeatureStoreClient:
    def __init__(self, item_dim=16, user_dim=8, seed=0):
        self.item_dim = item_dim
        self.user_dim = user_dim
        self.gen = torch.Generator().manual_seed(seed)
        self._items = {}

    def item_features(self, item_ids):
        rows = []
        for item in item_ids:
            if item not in self._items:
                self._items[item] = torch.randn(self.item_dim, generator=self.gen)
            rows.append(self._items[item])
        return torch.stack(rows)

    def user_features(self, user_id):
        return torch.randn(self.user_dim, generator=torch.Generator().manual_seed(user_id))


class SlateAttention(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.o = nn.Linear(dim, dim)
        self.norm = nn.LayerNorm(dim)
        self.ff = nn.Sequential(nn.Linear(dim, 2 * dim), nn.ReLU(), nn.Linear(2 * dim, dim))

    def forward(self, x, slot_keep):
        b, n, d = x.shape
        q, k, v = self.qkv(self.norm(x)).view(b, n, 3, self.heads, -1).permute(2, 0, 3, 1, 4).unbind(0)
        scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
        scores = scores.masked_fill(slot_keep[:, None, None, :] == 0, float("-inf"))
        x = x + self.o((scores.softmax(-1) @ v).transpose(1, 2).reshape(b, n, d))
        return x + self.ff(x)


class ListwiseReranker(nn.Module):
    def __init__(self, item_dim=16, user_dim=8, dim=64, heads=4, layers=2):
        super().__init__()
        self.inp = nn.Linear(item_dim + user_dim + 1, dim)
        self.slot_pos = nn.Embedding(MAX_SLATE, dim)
        self.blocks = nn.ModuleList(SlateAttention(dim, heads) for _ in range(layers))
        self.score = nn.Linear(dim, 1)

    def forward(self, item_feats, user_feats, retrieval_score, item_ids):
        slot_keep = (item_ids != PAD_ITEM).float()
        n = item_feats.size(1)
        user = user_feats[:, None, :].expand(-1, n, -1)
        x = self.inp(torch.cat([item_feats, user, retrieval_score[..., None]], dim=-1))
        x = x + self.slot_pos(torch.arange(n, device=x.device))
        for block in self.blocks:
            x = block(x, slot_keep)
        logits = self.score(x).squeeze(-1)
        return logits.masked_fill(slot_keep == 0, float("-inf"))


def assemble(store, requests):
    n = max(len(r["items"]) for r in requests)
    item_ids = torch.full((len(requests), n), PAD_ITEM, dtype=torch.long)
    item_feats = torch.zeros(len(requests), n, store.item_dim)
    scores = torch.zeros(len(requests), n)
    for i, req in enumerate(requests):
        k = len(req["items"])
        item_ids[i, :k] = torch.tensor(req["items"])
        item_feats[i, :k] = store.item_features(req["items"])
        scores[i, :k] = torch.tensor(req["retrieval_scores"])
    users = torch.stack([store.user_features(r["user_id"]) for r in requests])
    return {"item_ids": item_ids, "item_feats": item_feats, "user_feats": users, "retrieval_score": scores}


def listwise_loss(logits, clicks, item_ids):
    keep = item_ids != PAD_ITEM
    log_p = logits.log_softmax(-1).masked_fill(~keep, 0.0)
    target = clicks * keep
    return -(target * log_p).sum(-1).div(target.sum(-1).clamp(min=1.0)).mean()


def simulate_requests(n, generator=None):
    out = []
    for _ in range(n):
        k = int(torch.randint(5, MAX_SLATE + 1, (1,), generator=generator))
        items = torch.randint(1, 5000, (k,), generator=generator).tolist()
        out.append({"user_id": int(torch.randint(0, 1000, (1,), generator=generator)), "items": items,
                    "retrieval_scores": torch.rand(k, generator=generator).tolist()})
    return out


def train(model, store, steps=200, batch=32, generator=None):
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    for _ in range(steps):
        batch_in = assemble(store, simulate_requests(batch, generator))
        clicks = (batch_in["item_feats"][..., 0] + batch_in["retrieval_score"] > 1.2).float()
        logits = model(batch_in["item_feats"], batch_in["user_feats"], batch_in["retrieval_score"], batch_in["item_ids"])
        loss = listwise_loss(logits, clicks, batch_in["item_ids"])
        opt.zero_grad()
        loss.backward()
        opt.step()
    return loss.item()


def quantize_for_serving(model):
    model.eval()
    return torch.ao.quantization.quantize_dynamic(model, {nn.Linear}, dtype=torch.qint8)


@torch.inference_mode()
def rerank(model, store, request):
    batch = assemble(store, [request])
    logits = model(batch["item_feats"], batch["user_feats"], batch["retrieval_score"], batch["item_ids"])[0]
    order = logits.argsort(descending=True)
    return [request["items"][i] for i in order.tolist()]


def main(argv=None):
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--save", default="feed_reranker_int8.pt")
    args = parser.parse_args(argv)
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(0)
    store = FeatureStoreClient()
    model = ListwiseReranker()
    print("train loss", train(model, store, args.steps, generator=gen))
    served = quantize_for_serving(model)
    torch.save(served.state_dict(), args.save)
    request = simulate_requests(1, gen)[0]
    print(rerank(served, store, request)[:10])


if __name__ == "__main__":
    main()
