"""ComiRec-SA: controllable multi-interest retrieval with self-attentive interest extraction.

The item sequence (right-padded with 0) plus learned positions goes through a two-layer
self-attentive extractor that produces K attention distributions over the history, one per
interest; training picks the interest closest to the target (hard readout) and the
aggregation module re-ranks the merged top-N candidates with a diversity controller.

Source: seed self_attention_mask_guide.txt section 3 (常见误区: mask is added, not multiplied);
conventions.md section 1 (additive masks, 0 keep / large negative drop).
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

MASK_VALUE = -1e9


def additive_padding(item_seq, dtype=torch.float32):
    keep = (item_seq > 0).to(dtype)
    return (1.0 - keep) * MASK_VALUE


class SelfAttentiveExtractor(nn.Module):
    def __init__(self, hidden_size, num_interest, max_len, att_dim=None):
        super().__init__()
        att_dim = att_dim or 4 * hidden_size
        self.position_embedding = nn.Parameter(torch.randn(1, max_len, hidden_size) * 0.02)
        self.linear1 = nn.Linear(hidden_size, att_dim)
        self.linear2 = nn.Linear(att_dim, num_interest)
        self.num_interest = num_interest

    def forward(self, item_eb, item_seq):
        x = item_eb + self.position_embedding[:, : item_eb.size(1)]
        h = torch.tanh(self.linear1(x))
        a = self.linear2(h).transpose(1, 2)
        pad_bias = additive_padding(item_seq, a.dtype)
        a = a * pad_bias[:, None, :]  # expect: MC523 multiplied
        a = F.softmax(a, dim=-1)
        interests = torch.matmul(a, item_eb)
        return interests, a


class ComiRecSA(nn.Module):
    def __init__(self, n_items, hidden_size=16, num_interest=4, max_len=10, num_sampled=8):
        super().__init__()
        self.n_items = n_items
        self.item_embedding = nn.Embedding(n_items, hidden_size, padding_idx=0)
        self.extractor = SelfAttentiveExtractor(hidden_size, num_interest, max_len)
        self.num_sampled = num_sampled

    def interests(self, item_seq):
        item_eb = self.item_embedding(item_seq) * (item_seq > 0).unsqueeze(-1)
        return self.extractor(item_eb, item_seq)

    def read_out(self, interests, target_eb):
        att = torch.matmul(interests, target_eb.unsqueeze(-1)).squeeze(-1)
        idx = att.argmax(dim=-1)
        return interests[torch.arange(interests.size(0)), idx]

    def sampled_softmax_loss(self, user_eb, pos_items):
        b = pos_items.size(0)
        neg = torch.randint(1, self.n_items, (b, self.num_sampled), device=pos_items.device)
        cand = torch.cat([pos_items[:, None], neg], dim=1)
        logits = torch.einsum("bd,bnd->bn", user_eb, self.item_embedding(cand))
        hit = torch.zeros_like(cand, dtype=torch.bool)
        hit[:, 1:] = cand[:, 1:] == pos_items[:, None]
        logits = logits.masked_fill(hit, float("-inf"))
        return F.cross_entropy(logits, torch.zeros(b, dtype=torch.long, device=logits.device))

    def forward(self, item_seq, pos_items):
        interests, att = self.interests(item_seq)
        user_eb = self.read_out(interests, self.item_embedding(pos_items))
        return self.sampled_softmax_loss(user_eb, pos_items), att


def item_category(items, n_cates=5):
    return items % n_cates


@torch.no_grad()
def controllable_aggregation(model, item_seq, topn=6, lam=0.5, per_interest=8):
    interests, _ = model.interests(item_seq)
    scores = torch.matmul(interests, model.item_embedding.weight.t())
    scores[:, :, 0] = float("-inf")
    history = torch.zeros(item_seq.size(0), model.n_items, dtype=torch.bool)
    history.scatter_(1, item_seq, item_seq > 0)
    scores = scores.masked_fill(history[:, None, :], float("-inf"))
    top_scores, top_items = scores.topk(per_interest, dim=-1)
    results = []
    for u in range(item_seq.size(0)):
        cand = {}
        for s, i in zip(top_scores[u].flatten().tolist(), top_items[u].flatten().tolist()):
            cand[i] = max(s, cand.get(i, float("-inf")))
        chosen = []
        while cand and len(chosen) < topn:
            def gain(i):
                div = sum(item_category(torch.tensor(i)) != item_category(torch.tensor(j)) for j in chosen)
                return cand[i] + lam * float(div)
            best = max(cand, key=gain)
            chosen.append(best)
            cand.pop(best)
        results.append(chosen)
    return results


def make_sequences(batch_size, max_len, n_items, generator=None):
    lengths = torch.randint(2, max_len + 1, (batch_size,), generator=generator)
    seq = torch.randint(1, n_items, (batch_size, max_len), generator=generator)
    seq = seq * (torch.arange(max_len)[None, :] < lengths[:, None])
    target = torch.randint(1, n_items, (batch_size,), generator=generator)
    return seq, target


def recall_at_k(model, seq, target, k=10):
    with torch.no_grad():
        interests, _ = model.interests(seq)
        scores = torch.matmul(interests, model.item_embedding.weight.t()).max(dim=1).values
        scores[:, 0] = float("-inf")
        topk = scores.topk(k, dim=-1).indices
    return (topk == target[:, None]).any(dim=1).float().mean().item()


if __name__ == "__main__":
    torch.manual_seed(11)
    n_items, max_len = 60, 10
    model = ComiRecSA(n_items, max_len=max_len)
    opt = torch.optim.Adam(model.parameters(), lr=5e-3)
    seq, target = make_sequences(8, max_len, n_items)
    for epoch in range(5):
        loss, att = model(seq, target)
        opt.zero_grad()
        loss.backward()
        opt.step()
    pad = seq == 0
    print("loss %.4f  recall@10 %.3f  attention on padding %.4f"
          % (loss.item(), recall_at_k(model, seq, target), (att * pad[:, None, :]).sum().item()))
    print("aggregated:", controllable_aggregation(model, seq[:2]))
