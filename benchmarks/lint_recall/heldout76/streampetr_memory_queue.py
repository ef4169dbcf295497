"""StreamPETR-style object-centric temporal modelling with a memory queue.

The head keeps a fixed-length memory of the top-k object queries of past
frames (embedding, reference point, timestamp, validity). Every frame the
current queries (learned ones plus the last frame's propagated top-k) attend
to themselves and to the memory, then read the camera tokens. After the
frame the new top-k are pushed to the front of the queue. Memory slots of a
sample are cleared when a new scene starts (``prev_exists`` False).

Source: seed masked_fill_inplace.txt (与模型缓冲区的配合; 张量共享内存风险); conventions.md §2.3.
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

HEAD_CFG = dict(embed_dims=64, num_heads=4, num_query=24, memory_len=12, topk_proposals=4, num_classes=3, batch_size=2)


def pos2embed(pos, num_feats=32, temperature=10000):
    dim_t = temperature ** (2 * (torch.arange(num_feats) // 2) / num_feats)
    emb = pos[..., None] * 2 * torch.pi / dim_t
    emb = torch.stack((emb[..., 0::2].sin(), emb[..., 1::2].cos()), dim=-1).flatten(-2)
    return emb.flatten(-2)


class TemporalAttention(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.heads = heads
        self.q = nn.Linear(d, d)
        self.kv = nn.Linear(d, 2 * d)
        self.out = nn.Linear(d, d)

    def forward(self, query, query_pos, keys, key_pos, attn_bias):
        b, n, d = query.shape
        m = keys.size(1)
        q = self.q(query + query_pos).view(b, n, self.heads, -1).transpose(1, 2)
        k, v = self.kv(keys + key_pos).view(b, m, 2, self.heads, -1).permute(2, 0, 3, 1, 4)
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=attn_bias[:, None, None, :].to(q.dtype))
        return self.out(out.transpose(1, 2).reshape(b, n, d))


class StreamPETRHead(nn.Module):
    def __init__(self, embed_dims, num_heads, num_query, memory_len, topk_proposals, num_classes, batch_size):
        super().__init__()
        self.memory_len, self.topk = memory_len, topk_proposals
        self.reference_points = nn.Embedding(num_query, 3)
        self.query_embedding = nn.Sequential(nn.Linear(96, embed_dims), nn.ReLU(), nn.Linear(embed_dims, embed_dims))
        self.time_embedding = nn.Sequential(nn.Linear(embed_dims, embed_dims), nn.LayerNorm(embed_dims))
        self.temporal_attn = TemporalAttention(embed_dims, num_heads)
        self.cross_attn = nn.MultiheadAttention(embed_dims, num_heads, batch_first=True)
        self.norms = nn.ModuleList([nn.LayerNorm(embed_dims) for _ in range(3)])
        self.ffn = nn.Sequential(nn.Linear(embed_dims, 2 * embed_dims), nn.ReLU(), nn.Linear(2 * embed_dims, embed_dims))
        self.cls_branch = nn.Linear(embed_dims, num_classes)
        self.reg_branch = nn.Linear(embed_dims, 3 + 3 + 2)
        self.register_buffer("memory_embedding", torch.zeros(batch_size, memory_len, embed_dims))
        self.register_buffer("memory_reference_point", torch.zeros(batch_size, memory_len, 3))
        self.register_buffer("memory_timestamp", torch.zeros(batch_size, memory_len))
        self.register_buffer("memory_valid", torch.zeros(batch_size, memory_len, dtype=torch.bool))
        self.register_buffer("memory_bias", torch.zeros(batch_size, memory_len))

    def reset_memory(self):
        self.memory_embedding = torch.zeros_like(self.memory_embedding)
        self.memory_reference_point = torch.zeros_like(self.memory_reference_point)
        self.memory_timestamp = torch.zeros_like(self.memory_timestamp)
        self.memory_valid = torch.zeros_like(self.memory_valid)

    def pre_update_memory(self, prev_exists, ego_shift, dt):
        keep = prev_exists[:, None]
        self.memory_valid = self.memory_valid & keep
        self.memory_timestamp = torch.where(keep, self.memory_timestamp + dt[:, None], torch.zeros_like(self.memory_timestamp))
        self.memory_reference_point = torch.where(keep[..., None], self.memory_reference_point - ego_shift[:, None], torch.zeros_like(self.memory_reference_point))
        self.memory_embedding = self.memory_embedding * keep[..., None]

    def post_update_memory(self, query, ref_points, cls_scores):
        scores = cls_scores.sigmoid().amax(-1)
        idx = scores.topk(self.topk, dim=-1).indices
        gather = lambda t: t.gather(1, idx[..., None].expand(-1, -1, t.size(-1)))
        self.memory_embedding = torch.cat([gather(query).detach(), self.memory_embedding], 1)[:, : self.memory_len]
        self.memory_reference_point = torch.cat([gather(ref_points).detach(), self.memory_reference_point], 1)[:, : self.memory_len]
        self.memory_timestamp = torch.cat([torch.zeros_like(scores[:, : self.topk]), self.memory_timestamp], 1)[:, : self.memory_len]
        self.memory_valid = torch.cat([torch.ones_like(idx, dtype=torch.bool), self.memory_valid], 1)[:, : self.memory_len]

    def forward(self, img_tokens, img_pos, prev_exists, ego_shift, dt):
        self.pre_update_memory(prev_exists, ego_shift, dt)
        b = img_tokens.size(0)
        ref_points = self.reference_points.weight.sigmoid()[None].expand(b, -1, -1)
        query_pos = self.query_embedding(pos2embed(ref_points))
        query = torch.zeros_like(query_pos)
        mem_pos = self.query_embedding(pos2embed(self.memory_reference_point.sigmoid()))
        mem_pos = mem_pos + self.time_embedding(pos2embed(self.memory_timestamp[..., None], num_feats=64))
        memory_bias = self.memory_bias.masked_fill_(~self.memory_valid, float("-inf"))  # expect: MC524 buffer
        attn_bias = torch.cat([query.new_zeros(b, query.size(1)), memory_bias], dim=1)
        keys = torch.cat([query, self.memory_embedding], dim=1)
        key_pos = torch.cat([query_pos, mem_pos], dim=1)
        query = self.norms[0](query + self.temporal_attn(query, query_pos, keys, key_pos, attn_bias))
        query = self.norms[1](query + self.cross_attn(query + query_pos, img_tokens + img_pos, img_tokens, need_weights=False)[0])
        query = self.norms[2](query + self.ffn(query))
        cls_scores = self.cls_branch(query)
        boxes = self.reg_branch(query)
        self.post_update_memory(query, ref_points, cls_scores)
        return cls_scores, boxes


@torch.no_grad()
def decode_predictions(cls_scores, boxes, score_threshold=0.3, max_num=10):
    scores, labels = cls_scores.sigmoid().max(-1)
    results = []
    for s, l, bx in zip(scores, labels, boxes):
        keep = s > score_threshold
        order = s[keep].argsort(descending=True)[:max_num]
        results.append({"scores": s[keep][order], "labels": l[keep][order], "boxes": bx[keep][order]})
    return results


if __name__ == "__main__":
    torch.manual_seed(0)
    head = StreamPETRHead(**HEAD_CFG).eval()
    frames = 4
    with torch.no_grad():
        for t in range(frames):
            img_tokens = torch.randn(2, 6 * 20, 64)
            img_pos = torch.randn(2, 6 * 20, 64) * 0.1
            prev_exists = torch.tensor([t > 0, t not in (0, 2)])
            ego_shift = torch.randn(2, 3) * 0.05
            dt = torch.full((2,), 0.5)
            cls_scores, boxes = head(img_tokens, img_pos, prev_exists, ego_shift, dt)
            dets = decode_predictions(cls_scores, boxes, score_threshold=0.45)
            print(f"frame {t}: memory valid {head.memory_valid.sum(1).tolist()} max score {cls_scores.sigmoid().max().item():.4f} dets {[len(d['scores']) for d in dets]}")
    head.reset_memory()
    print("after reset", head.memory_valid.sum().item())
