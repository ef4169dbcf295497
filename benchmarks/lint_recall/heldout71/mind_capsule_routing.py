"""MIND: Multi-Interest Network with Dynamic routing for candidate retrieval.

Behaviour-to-interest (B2I) dynamic routing turns a padded click history into K interest
capsules with a shared bilinear map, the number of interests adapts to the history length, and
label-aware attention picks among the capsules for the sampled-softmax loss. Written after the
RecBole / ComiRec ports, with an optional bfloat16 autocast path for the routing (``--amp``).

Source: NVIDIA/apex#1052 and #1105 (conventions.md section 3 item 18), huggingface/lerobot PR #710
(item 19); conventions.md section 2.3 (finfo.min of each dtype).
"""
import argparse
import math

import torch
import torch.nn as nn
import torch.nn.functional as F


def squash(x, dim=-1, eps=1e-9):
    sq_norm = (x ** 2).sum(dim=dim, keepdim=True)
    scale = sq_norm / (1.0 + sq_norm) / torch.sqrt(sq_norm + eps)
    return scale * x


class CapsuleNetwork(nn.Module):
    def __init__(self, hidden_size, seq_len, k_max=4, routing_iters=3, amp=False):
        super().__init__()
        self.hidden_size = hidden_size
        self.seq_len = seq_len
        self.k_max = k_max
        self.routing_iters = routing_iters
        self.amp = amp
        self.S = nn.Parameter(torch.randn(hidden_size, hidden_size) / math.sqrt(hidden_size))

    def interest_count(self, mask):
        lengths = mask.sum(dim=1).float()
        k = torch.log2(lengths.clamp(min=1)).floor().long() + 1
        return k.clamp(min=1, max=self.k_max)

    def forward(self, item_eb, mask):
        b = item_eb.size(0)
        k_user = self.interest_count(mask)
        interest_keep = torch.arange(self.k_max, device=item_eb.device)[None, :] < k_user[:, None]
        with torch.autocast(device_type=item_eb.device.type, dtype=torch.bfloat16, enabled=self.amp):
            item_hat = torch.matmul(item_eb, self.S)
            item_hat_iter = item_hat.detach()
            logits = torch.randn(b, self.k_max, self.seq_len, device=item_eb.device).to(item_hat.dtype)
            pad = ~mask[:, None, :]
            for i in range(self.routing_iters):
                logits = logits.masked_fill(pad, torch.finfo(torch.float32).min)  # expect: MC517 autocast
                weight = F.softmax(logits, dim=-1)
                weight = weight.masked_fill(~interest_keep[:, :, None], 0.0)
                src = item_hat if i == self.routing_iters - 1 else item_hat_iter
                interest = squash(torch.matmul(weight, src))
                if i < self.routing_iters - 1:
                    delta = torch.matmul(interest, item_hat_iter.transpose(1, 2))
                    logits = logits + delta
        return interest.float(), interest_keep


class LabelAwareAttention(nn.Module):
    def __init__(self, pow_p=2.0):
        super().__init__()
        self.pow_p = pow_p

    def forward(self, interests, interest_keep, target_eb):
        att = torch.matmul(interests, target_eb.unsqueeze(-1)).squeeze(-1)
        att = torch.pow(att.abs() + 1e-6, self.pow_p) * torch.sign(att)
        att = att.masked_fill(~interest_keep, float("-inf"))
        att = F.softmax(att, dim=-1)
        return torch.matmul(att.unsqueeze(1), interests).squeeze(1)


class MIND(nn.Module):
    def __init__(self, n_items, embedding_size=16, max_len=8, k_max=4, amp=False):
        super().__init__()
        self.item_embedding = nn.Embedding(n_items, embedding_size, padding_idx=0)
        self.capsule = CapsuleNetwork(embedding_size, max_len, k_max=k_max, amp=amp)
        self.user_proj = nn.Sequential(nn.Linear(embedding_size, 4 * embedding_size), nn.ReLU(),
                                       nn.Linear(4 * embedding_size, embedding_size))
        self.label_attention = LabelAwareAttention()

    def user_interests(self, item_seq):
        mask = item_seq != 0
        item_eb = self.item_embedding(item_seq)
        interests, keep = self.capsule(item_eb, mask)
        return self.user_proj(interests), keep

    def calculate_loss(self, item_seq, pos_items, num_neg=5):
        interests, keep = self.user_interests(item_seq)
        target_eb = self.item_embedding(pos_items)
        user_eb = self.label_attention(interests, keep, target_eb)
        n_items = self.item_embedding.num_embeddings
        neg = torch.randint(1, n_items, (pos_items.size(0), num_neg), device=pos_items.device)
        cand = torch.cat([pos_items[:, None], neg], dim=1)
        logits = torch.bmm(self.item_embedding(cand), user_eb.unsqueeze(-1)).squeeze(-1)
        accidental = cand[:, 1:] == pos_items[:, None]
        logits[:, 1:] = logits[:, 1:].masked_fill(accidental, torch.finfo(logits.dtype).min)
        return F.cross_entropy(logits, torch.zeros_like(pos_items))

    @torch.no_grad()
    def full_sort_predict(self, item_seq, topk=5):
        interests, keep = self.user_interests(item_seq)
        scores = torch.matmul(interests, self.item_embedding.weight.t())
        scores = scores.masked_fill(~keep[:, :, None], float("-inf")).max(dim=1).values
        scores[:, 0] = float("-inf")
        return scores.topk(topk, dim=-1).indices


def right_padded(batch_size, max_len, n_items, generator=None):
    lengths = torch.randint(1, max_len + 1, (batch_size,), generator=generator)
    seq = torch.randint(1, n_items, (batch_size, max_len), generator=generator)
    return seq * (torch.arange(max_len)[None, :] < lengths[:, None])


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--amp", action="store_true")
    parser.add_argument("--steps", type=int, default=3)
    args = parser.parse_args()

    torch.manual_seed(3)
    n_items, max_len = 50, 8
    model = MIND(n_items, max_len=max_len, amp=args.amp)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    seq = right_padded(6, max_len, n_items)
    pos = torch.randint(1, n_items, (6,))
    for _ in range(args.steps):
        loss = model.calculate_loss(seq, pos)
        opt.zero_grad()
        loss.backward()
        opt.step()
    print("loss %.4f top-5 %s" % (loss.item(), model.full_sort_predict(seq)[0].tolist()))
