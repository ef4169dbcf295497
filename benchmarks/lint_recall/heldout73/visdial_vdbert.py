"""Visual dialog (VisDial v1.0) with a VD-BERT-style unified encoder.

Image regions, the dialog history with the current question, and an answer
are packed into one sequence. The discriminative head ranks the candidate
answers from the [CLS] state; the generative head is trained with a UniLM
sequence-to-sequence mask over the answer.

Source: hyunwoongko/transformer PR #40, bentrevett/pytorch-seq2seq#96 (conventions.md §3 item 21).
"""
import math

import torch
import torch.nn.functional as F
from torch import nn

PAD, CLS, SEP, IMG = 0, 1, 2, 3
VOCAB = 256
NUM_REGIONS = 6


def encode_words(text):
    return [10 + sum(map(ord, w)) % (VOCAB - 10) for w in text.lower().split()]


class MultiHeadAttention(nn.Module):
    def __init__(self, d_model, n_head):
        super().__init__()
        self.n_head = n_head
        self.w_q, self.w_k, self.w_v, self.w_concat = (nn.Linear(d_model, d_model) for _ in range(4))

    def split(self, tensor):
        batch_size, length, d_model = tensor.size()
        return tensor.view(batch_size, length, self.n_head, d_model // self.n_head).transpose(1, 2)

    def forward(self, q, k, v, mask=None):
        q, k, v = self.split(self.w_q(q)), self.split(self.w_k(k)), self.split(self.w_v(v))
        score = q @ k.transpose(2, 3) / math.sqrt(q.size(-1))
        if mask is not None:
            score = score.masked_fill(mask == 0, -10000.0)
        out = torch.softmax(score, dim=-1) @ v
        batch_size, head, length, d_tensor = out.size()
        return self.w_concat(out.transpose(1, 2).contiguous().view(batch_size, length, head * d_tensor))


class EncoderLayer(nn.Module):
    def __init__(self, d_model, n_head):
        super().__init__()
        self.attention = MultiHeadAttention(d_model, n_head)
        self.norm1 = nn.LayerNorm(d_model)
        self.ffn = nn.Sequential(nn.Linear(d_model, d_model * 4), nn.GELU(), nn.Linear(d_model * 4, d_model))
        self.norm2 = nn.LayerNorm(d_model)

    def forward(self, x, src_mask):
        x = self.norm1(x + self.attention(x, x, x, mask=src_mask))
        return self.norm2(x + self.ffn(x))


class VDBert(nn.Module):
    def __init__(self, d_model=48, n_head=4, n_layers=2, max_len=48, region_dim=64):
        super().__init__()
        self.pad_idx = PAD
        self.tok_emb = nn.Embedding(VOCAB, d_model, padding_idx=PAD)
        self.pos_emb = nn.Embedding(max_len, d_model)
        self.seg_emb = nn.Embedding(2, d_model)
        self.region_proj = nn.Sequential(nn.Linear(region_dim + 5, d_model), nn.LayerNorm(d_model))
        self.layers = nn.ModuleList([EncoderLayer(d_model, n_head) for _ in range(n_layers)])
        self.nsp_head = nn.Linear(d_model, 1)
        self.lm_head = nn.Linear(d_model, VOCAB)

    def make_pad_mask(self, input_ids):
        return (input_ids != self.pad_idx).unsqueeze(1).unsqueeze(3)  # expect: MC514 padmask

    def make_seq2seq_mask(self, input_ids, segment_ids):
        keep = input_ids != self.pad_idx
        n = input_ids.size(1)
        is_tgt = segment_ids == 1
        causal = torch.tril(torch.ones(n, n, dtype=torch.bool, device=input_ids.device))
        see_src = ~is_tgt[:, None, :]
        allowed = (see_src | (is_tgt[:, :, None] & causal[None])) & keep[:, None, :]
        return allowed.unsqueeze(1)

    def embed(self, input_ids, segment_ids, regions, region_boxes):
        x = self.tok_emb(input_ids)
        region_slots = slice(1, 1 + NUM_REGIONS)
        x[:, region_slots] = x[:, region_slots] + self.region_proj(torch.cat([regions, region_boxes], dim=-1))
        positions = torch.arange(input_ids.size(1), device=input_ids.device)
        return x + self.pos_emb(positions)[None] + self.seg_emb(segment_ids)

    def encode(self, batch, mask):
        x = self.embed(batch["input_ids"], batch["segment_ids"], batch["regions"], batch["region_boxes"])
        for layer in self.layers:
            x = layer(x, mask)
        return x

    def rank_candidates(self, batch):
        h = self.encode(batch, self.make_pad_mask(batch["input_ids"]))
        return self.nsp_head(h[:, 0]).squeeze(-1)

    def generative_loss(self, batch):
        h = self.encode(batch, self.make_seq2seq_mask(batch["input_ids"], batch["segment_ids"]))
        logits = self.lm_head(h[:, :-1])
        target = batch["input_ids"][:, 1:].masked_fill(batch["segment_ids"][:, 1:] == 0, -100)
        target = target.masked_fill(target == PAD, -100)
        return F.cross_entropy(logits.reshape(-1, VOCAB), target.reshape(-1), ignore_index=-100)


def pack_dialog(regions, boxes, num_regions, history, question, answers, max_len=48):
    rows, segs = [], []
    context = []
    for q, a in history:
        context += encode_words(q) + encode_words(a) + [SEP]
    context += encode_words(question)
    for answer in answers:
        image_part = [CLS] + [IMG] * num_regions + [PAD] * (NUM_REGIONS - num_regions) + [SEP]
        src = image_part + context[-(max_len - len(image_part) - 12):] + [SEP]
        tgt = encode_words(answer)[:10] + [SEP]
        rows.append(src + tgt)
        segs.append([0] * len(src) + [1] * len(tgt))
    width = max(map(len, rows))
    input_ids = torch.full((len(rows), width), PAD, dtype=torch.long)
    segment_ids = torch.zeros(len(rows), width, dtype=torch.long)
    for i, (r, s) in enumerate(zip(rows, segs)):
        input_ids[i, : len(r)] = torch.tensor(r)
        segment_ids[i, : len(s)] = torch.tensor(s)
    n = len(rows)
    return {"input_ids": input_ids, "segment_ids": segment_ids,
            "regions": regions.expand(n, -1, -1), "region_boxes": boxes.expand(n, -1, -1)}


if __name__ == "__main__":
    torch.manual_seed(0)
    regions, boxes = torch.randn(1, NUM_REGIONS, 64), torch.rand(1, NUM_REGIONS, 5)
    history = [("is the photo in color", "yes"), ("how many people are there", "two people and a dog")]
    candidates = ["yes he is", "no", "i think it is a frisbee but it is hard to tell", "maybe"]
    batch = pack_dialog(regions, boxes, 4, history, "is the man holding anything", candidates)
    gt_index = torch.tensor([2])
    model = VDBert()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    for step in range(3):
        scores = model.rank_candidates(batch)
        disc_loss = F.cross_entropy(scores[None], gt_index)
        gen_batch = {k: v[gt_index] for k, v in batch.items()}
        gen_loss = model.generative_loss(gen_batch)
        loss = disc_loss + gen_loss
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        print(f"step {step} disc {disc_loss.item():.4f} gen {gen_loss.item():.4f}")
    with torch.no_grad():
        ranks = model.rank_candidates(batch).argsort(descending=True)
    print("ranking", [candidates[i] for i in ranks.tolist()])
