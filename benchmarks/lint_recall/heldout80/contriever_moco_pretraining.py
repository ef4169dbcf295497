"""Unsupervised dense retriever pre-training with independent cropping and MoCo (Contriever).

Two random crops of the same document (with random word deletion) form a positive pair;
negatives come from a queue of keys produced by a momentum copy of the encoder. The
retriever is a small BERT-like model whose embedding is the average of the token states
over real tokens (`pooling="average"`). After training, passages are embedded with the
query encoder and searched by inner product.

Source: seed masked_fill_inplace.txt (非原地操作; 区别; 总结 1).
"""
import copy
import random
from types import SimpleNamespace

import torch
import torch.nn as nn
import torch.nn.functional as F

opt = SimpleNamespace(pooling="average", projection_size=64, queue_size=16, momentum=0.999, temperature=0.05,
                      label_smoothing=0.0, norm_query=True, norm_doc=True, ratio_min=0.3, ratio_max=0.6,
                      prob_delete=0.1, vocab_size=1200, bos=101, eos=102)


def text_to_ids(text):
    return torch.tensor([200 + sum(ord(c) * 41 ** i for i, c in enumerate(w)) % (opt.vocab_size - 200)
                         for w in text.lower().split()])


def randomcrop(x, ratio_min, ratio_max):
    ratio = random.uniform(ratio_min, ratio_max)
    length = max(int(len(x) * ratio), 2)
    start = random.randint(0, len(x) - length)
    return x[start:start + length].clone()


def deleteword(x, p=0.1):
    keep = torch.rand(len(x)) > p
    return x[keep] if keep.any() else x


def add_bos_eos(x, bos_token_id, eos_token_id):
    return torch.cat([torch.tensor([bos_token_id]), x, torch.tensor([eos_token_id])])


def build_mask(tensors):
    maxlength = max(len(x) for x in tensors)
    returnmasks, ids = [], []
    for x in tensors:
        returnmasks.append(torch.tensor([1] * len(x) + [0] * (maxlength - len(x))))
        ids.append(torch.cat((x, torch.zeros(maxlength - len(x), dtype=torch.long))))
    return torch.stack(ids, dim=0).long(), torch.stack(returnmasks, dim=0).bool()


class Contriever(nn.Module):
    def __init__(self, config, hidden=64, heads=4, layers=2):
        super().__init__()
        self.config = config
        self.heads = heads
        self.embeddings = nn.Embedding(config.vocab_size, hidden, padding_idx=0)
        self.position = nn.Embedding(64, hidden)
        self.qkv = nn.ModuleList(nn.Linear(hidden, 3 * hidden) for _ in range(layers))
        self.out = nn.ModuleList(nn.Linear(hidden, hidden) for _ in range(layers))
        self.ffn = nn.ModuleList(nn.Sequential(nn.Linear(hidden, 4 * hidden), nn.GELU(), nn.Linear(4 * hidden, hidden))
                                 for _ in range(layers))
        self.ln = nn.ModuleList(nn.LayerNorm(hidden) for _ in range(2 * layers))

    def forward(self, input_ids, attention_mask, normalize=False):
        b, n = input_ids.shape
        h = self.embeddings(input_ids) + self.position.weight[:n]
        keep = attention_mask.bool()[:, None, None, :]
        for i in range(len(self.qkv)):
            q, k, v = self.qkv[i](h).view(b, n, 3, self.heads, -1).permute(2, 0, 3, 1, 4)
            a = F.scaled_dot_product_attention(q, k, v, attn_mask=keep)
            h = self.ln[2 * i](h + self.out[i](a.transpose(1, 2).reshape(b, n, -1)))
            h = self.ln[2 * i + 1](h + self.ffn[i](h))
        last_hidden = h
        last_hidden.masked_fill(~attention_mask[..., None].bool(), 0.0)  # expect: MC525 discarded
        if self.config.pooling == "average":
            emb = last_hidden.sum(dim=1) / attention_mask.sum(dim=1)[..., None]
        else:
            emb = last_hidden[:, 0]
        if normalize:
            emb = F.normalize(emb, dim=-1)
        return emb


class MoCo(nn.Module):
    def __init__(self, opt):
        super().__init__()
        self.queue_size, self.momentum, self.temperature = opt.queue_size, opt.momentum, opt.temperature
        self.label_smoothing, self.norm_query, self.norm_doc = opt.label_smoothing, opt.norm_query, opt.norm_doc
        self.encoder_q = Contriever(opt)
        self.encoder_k = copy.deepcopy(self.encoder_q)
        for param_k in self.encoder_k.parameters():
            param_k.requires_grad = False
        self.register_buffer("queue", F.normalize(torch.randn(opt.projection_size, self.queue_size), dim=0))
        self.register_buffer("queue_ptr", torch.zeros(1, dtype=torch.long))

    @torch.no_grad()
    def _momentum_update_key_encoder(self):
        for param_q, param_k in zip(self.encoder_q.parameters(), self.encoder_k.parameters()):
            param_k.data = param_k.data * self.momentum + param_q.data * (1.0 - self.momentum)

    @torch.no_grad()
    def _dequeue_and_enqueue(self, keys):
        batch_size = keys.shape[0]
        ptr = int(self.queue_ptr)
        self.queue[:, ptr:ptr + batch_size] = keys.T
        self.queue_ptr[0] = (ptr + batch_size) % self.queue_size

    def forward(self, q_tokens, q_mask, k_tokens, k_mask):
        q = self.encoder_q(q_tokens, q_mask, normalize=self.norm_query)
        with torch.no_grad():
            self._momentum_update_key_encoder()
            k = self.encoder_k(k_tokens, k_mask, normalize=self.norm_doc)
        l_pos = torch.einsum("nc,nc->n", q, k).unsqueeze(-1)
        l_neg = torch.einsum("nc,ck->nk", q, self.queue.clone().detach())
        logits = torch.cat([l_pos, l_neg], dim=1) / self.temperature
        labels = torch.zeros(q.size(0), dtype=torch.long)
        loss = F.cross_entropy(logits, labels, label_smoothing=self.label_smoothing)
        self._dequeue_and_enqueue(k)
        return loss, (logits.argmax(-1) == 0).float().mean()


def collate(docs):
    q_views, k_views = [], []
    for doc in docs:
        for views in (q_views, k_views):
            crop = deleteword(randomcrop(doc, opt.ratio_min, opt.ratio_max), opt.prob_delete)
            views.append(add_bos_eos(crop, opt.bos, opt.eos))
    q_tokens, q_mask = build_mask(q_views)
    k_tokens, k_mask = build_mask(k_views)
    return {"q_tokens": q_tokens, "q_mask": q_mask, "k_tokens": k_tokens, "k_mask": k_mask}


if __name__ == "__main__":
    random.seed(0)
    torch.manual_seed(0)
    corpus = ["the mitochondria is the powerhouse of the cell and produces most of its chemical energy",
              "the roman empire was at its largest under trajan around the year one hundred seventeen",
              "a black hole is a region of spacetime where gravity is so strong that nothing escapes",
              "sourdough bread is leavened by a culture of wild yeast and lactic acid bacteria"]
    docs = [text_to_ids(t) for t in corpus]
    model = MoCo(opt)
    optimizer = torch.optim.AdamW(model.encoder_q.parameters(), lr=1e-4)
    for step in range(4):
        loss, acc = model(**collate(docs))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        print(f"step {step} loss {loss.item():.4f} acc {acc.item():.2f}")
    model.eval()
    with torch.no_grad():
        ids, mask = build_mask([add_bos_eos(d, opt.bos, opt.eos) for d in docs])
        passages = model.encoder_q(ids, mask)
        q_ids, q_mask = build_mask([add_bos_eos(text_to_ids("what makes nothing escape gravity"), opt.bos, opt.eos)])
        print("top passage", (model.encoder_q(q_ids, q_mask) @ passages.t()).argmax(-1).item())
