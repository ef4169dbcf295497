"""DSIN: Deep Session Interest Network for click-through-rate prediction.

A user's behaviour log is cut into sessions wherever two clicks are more than 30 minutes
apart. Bias encoding (session, position, unit) is added, a self-attention layer extracts each
session's interest while attending only inside the session, a Bi-LSTM runs over the pooled
session interests and two activation units weigh the sessions and the interests against the
target ad. Behaviours are right-padded with item 0.

Source: seed self_attention_mask_guide.txt section 6 (create_block_mask); conventions.md
section 2.3 (manual softmax of fully masked rows).
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

SESSION_GAP = 30 * 60


def split_sessions(timestamps, lengths, max_sessions):
    spans, sess_index = [], torch.zeros_like(timestamps)
    for b in range(timestamps.size(0)):
        n = int(lengths[b])
        user_spans, start = [], 0
        for t in range(1, n + 1):
            if t == n or timestamps[b, t] - timestamps[b, t - 1] > SESSION_GAP:
                user_spans.append((start, t))
                start = t
        user_spans = user_spans[-max_sessions:]
        for s_id, (s, e) in enumerate(user_spans):
            sess_index[b, s:e] = s_id
        spans.append(user_spans)
    return spans, sess_index


def session_block_bias(spans, seq_len, device=None):
    bias = torch.zeros(len(spans), seq_len, seq_len, device=device)
    for b, user_spans in enumerate(spans):
        for s, e in user_spans:
            bias[b, s:e, s:e] = 0.0  # expect: MC504 blocks
    bias[bias == 0] = float("-inf")  # also: MC504 blocks
    bias[bias == 1] = 0.0
    return bias


class BiasEncoding(nn.Module):
    def __init__(self, max_sessions, seq_len, dim):
        super().__init__()
        self.session_bias = nn.Parameter(torch.zeros(max_sessions, 1))
        self.position_bias = nn.Parameter(torch.zeros(1, seq_len, 1))
        self.unit_bias = nn.Parameter(torch.zeros(1, 1, dim))

    def forward(self, x, sess_index):
        return x + self.session_bias[sess_index] + self.position_bias[:, : x.size(1)] + self.unit_bias


class SessionInterestExtractor(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.out = nn.Linear(dim, dim)
        self.norm = nn.LayerNorm(dim)

    def forward(self, x, block_bias):
        b, n, d = x.shape
        q, k, v = self.qkv(x).view(b, n, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        h = F.scaled_dot_product_attention(q, k, v, attn_mask=block_bias[:, None])
        return self.norm(x + self.out(h.transpose(1, 2).reshape(b, n, d)))


class ActivationUnit(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.mlp = nn.Sequential(nn.Linear(4 * dim, 32), nn.PReLU(), nn.Linear(32, 1))

    def forward(self, target, keys, keep):
        t = target.unsqueeze(1).expand_as(keys)
        w = self.mlp(torch.cat([t, keys, t - keys, t * keys], dim=-1)).squeeze(-1)
        w = F.softmax(w.masked_fill(~keep, float("-inf")), dim=-1)
        return torch.bmm(w.unsqueeze(1), keys).squeeze(1)


class DSIN(nn.Module):
    def __init__(self, n_items, dim=16, heads=2, seq_len=10, max_sessions=4):
        super().__init__()
        self.max_sessions = max_sessions
        self.item_emb = nn.Embedding(n_items, dim, padding_idx=0)
        self.bias_enc = BiasEncoding(max_sessions, seq_len, dim)
        self.extractor = SessionInterestExtractor(dim, heads)
        self.lstm = nn.LSTM(dim, dim // 2, batch_first=True, bidirectional=True)
        self.att_interest = ActivationUnit(dim)
        self.att_evolve = ActivationUnit(dim)
        self.mlp = nn.Sequential(nn.Linear(3 * dim, 64), nn.ReLU(), nn.Linear(64, 1))

    def forward(self, batch):
        items, ts = batch["hist_items"], batch["hist_ts"]
        lengths = (items != 0).sum(dim=1)
        spans, sess_index = split_sessions(ts, lengths, self.max_sessions)
        x = self.bias_enc(self.item_emb(items), sess_index.clamp(max=self.max_sessions - 1))
        h = self.extractor(x, session_block_bias(spans, items.size(1), items.device))
        sess_keep = torch.zeros(items.size(0), self.max_sessions, dtype=torch.bool, device=items.device)
        pooled = h.new_zeros(items.size(0), self.max_sessions, h.size(-1))
        for b, user_spans in enumerate(spans):
            for s_id, (s, e) in enumerate(user_spans):
                pooled[b, s_id] = h[b, s:e].mean(dim=0)
                sess_keep[b, s_id] = True
        evolved, _ = self.lstm(pooled)
        target = self.item_emb(batch["target"])
        u_interest = self.att_interest(target, pooled, sess_keep)
        u_evolved = self.att_evolve(target, evolved, sess_keep)
        return self.mlp(torch.cat([target, u_interest, u_evolved], dim=-1)).squeeze(-1)


def synthetic_logs(batch_size=4, seq_len=10, n_items=50, generator=None):
    lengths = torch.randint(3, seq_len + 1, (batch_size,), generator=generator)
    gaps = torch.randint(60, 600, (batch_size, seq_len), generator=generator)
    gaps[:, 3] += 4000
    gaps[:, 7] += 9000
    ts = 1_600_000_000 + gaps.cumsum(dim=1)
    valid = torch.arange(seq_len)[None, :] < lengths[:, None]
    items = torch.randint(1, n_items, (batch_size, seq_len), generator=generator) * valid
    return {"hist_items": items, "hist_ts": ts * valid,
            "target": torch.randint(1, n_items, (batch_size,), generator=generator),
            "label": torch.randint(0, 2, (batch_size,), generator=generator).float()}


if __name__ == "__main__":
    torch.manual_seed(5)
    model = DSIN(n_items=50)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    batch = synthetic_logs()
    for step in range(3):
        logit = model(batch)
        loss = F.binary_cross_entropy_with_logits(logit, batch["label"])
        opt.zero_grad()
        loss.backward()
        opt.step()
    print("loss %.4f logits %s" % (loss.item(), [round(v, 3) for v in logit.tolist()]))
