"""Multi-hop dense retrieval (MDR) for HotpotQA-style bridge questions.

One shared RoBERTa-like encoder embeds questions, passages and the question concatenated
with the first-hop passage (`q_sp`). Training follows `mhop_loss`: first hop against all
positive passages of the batch plus one hard negative per question, second hop from the
expanded query, with the question's own second-hop passage masked out of the first-hop
scores. Inference is a beam search: top-k first-hop passages, re-encode question + passage,
top-k second-hop passages, paths ranked by the sum of both scores.

Source: conventions.md §1 (direction cheat-sheet; SDPA and HF attention_mask rows), §5 item 1; rasbt/LLMs-from-scratch#1061 (§3 item 14).
"""
import torch
import torch.nn as nn
import torch.nn.functional as F


class RobertaLikeTokenizer:
    bos_token_id, pad_token_id, eos_token_id = 0, 1, 2

    def __init__(self, vocab_size=1200):
        self.vocab_size = vocab_size

    def _encode(self, text):
        return [3 + sum(ord(c) << (i % 5) for i, c in enumerate(w)) % (self.vocab_size - 3) for w in text.lower().split()]

    def __call__(self, text, text_pair=None, max_length=32, padding="longest", truncation=True):
        pairs = text_pair if text_pair is not None else [None] * len(text)
        rows = []
        for a, b in zip(text, pairs):
            ids = [self.bos_token_id] + self._encode(a) + [self.eos_token_id]
            if b is not None:
                ids += [self.eos_token_id] + self._encode(b) + [self.eos_token_id]
            rows.append(ids[:max_length])
        width = max_length if padding == "max_length" else max(len(r) for r in rows)
        input_ids = torch.full((len(rows), width), self.pad_token_id)
        attention_mask = torch.zeros(len(rows), width, dtype=torch.long)
        for i, r in enumerate(rows):
            input_ids[i, : len(r)], attention_mask[i, : len(r)] = torch.tensor(r), 1
        return {"input_ids": input_ids, "attention_mask": attention_mask}


class Encoder(nn.Module):
    def __init__(self, vocab_size=1200, hidden=64, heads=4, layers=2):
        super().__init__()
        self.heads = heads
        self.embed = nn.Embedding(vocab_size, hidden, padding_idx=1)
        self.pos = nn.Embedding(40, hidden)
        self.blocks = nn.ModuleList(
            nn.ModuleDict({"qkv": nn.Linear(hidden, 3 * hidden), "o": nn.Linear(hidden, hidden),
                           "ln1": nn.LayerNorm(hidden), "ff": nn.Sequential(nn.Linear(hidden, 2 * hidden), nn.GELU(),
                                                                            nn.Linear(2 * hidden, hidden)),
                           "ln2": nn.LayerNorm(hidden)}) for _ in range(layers))

    def forward(self, input_ids, attn_mask=None):
        b, n = input_ids.shape
        x = self.embed(input_ids) + self.pos(torch.arange(n, device=input_ids.device))
        for blk in self.blocks:
            q, k, v = blk["qkv"](x).view(b, n, 3, self.heads, -1).permute(2, 0, 3, 1, 4)
            a = F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask)
            x = blk["ln1"](x + blk["o"](a.transpose(1, 2).reshape(b, n, -1)))
            x = blk["ln2"](x + blk["ff"](x))
        return x


class RobertaRetriever(nn.Module):
    def __init__(self, pooling="cls"):
        super().__init__()
        self.encoder = Encoder()
        self.project = nn.Sequential(nn.Linear(64, 64), nn.LayerNorm(64))
        self.pooling = pooling

    def encode_seq(self, input_ids, mask):
        pad = mask == 0
        h = self.encoder(input_ids, attn_mask=~pad[:, None, None, :])
        if self.pooling == "mean":
            pooled = h.masked_fill(pad[..., None], 0.0).sum(1) / (~pad).sum(1, keepdim=True)
        else:
            pooled = h[:, 0]
        return self.project(pooled)

    def forward(self, batch):
        return {name: self.encode_seq(batch[f"{name}_input_ids"], batch[f"{name}_mask"])
                for name in ("c1", "c2", "neg_1", "neg_2", "q", "q_sp1")}


def mhop_loss(outputs):
    all_ctx = torch.cat([outputs["c1"], outputs["c2"]], dim=0)
    neg_ctx = torch.stack([outputs["neg_1"], outputs["neg_2"]], dim=1)
    scores_1_hop = outputs["q"] @ all_ctx.t()
    neg_scores_1 = torch.bmm(outputs["q"].unsqueeze(1), neg_ctx.transpose(1, 2)).squeeze(1)
    scores_2_hop = outputs["q_sp1"] @ all_ctx.t()
    neg_scores_2 = torch.bmm(outputs["q_sp1"].unsqueeze(1), neg_ctx.transpose(1, 2)).squeeze(1)
    bsize = outputs["q"].size(0)
    scores_1_mask = torch.cat([torch.zeros(bsize, bsize), torch.eye(bsize)], dim=1)
    scores_1_hop = scores_1_hop.float().masked_fill(scores_1_mask.bool(), float("-inf")).type_as(scores_1_hop)
    scores_1_hop = torch.cat([scores_1_hop, neg_scores_1], dim=1)
    scores_2_hop = torch.cat([scores_2_hop, neg_scores_2], dim=1)
    target_1_hop = torch.arange(bsize)
    target_2_hop = torch.arange(bsize) + bsize
    return F.cross_entropy(scores_1_hop, target_1_hop) + F.cross_entropy(scores_2_hop, target_2_hop)


def collate(tokenizer, examples):
    batch = {}
    fields = {"q": [e["question"] for e in examples], "c1": [e["sp1"] for e in examples],
              "c2": [e["sp2"] for e in examples], "neg_1": [e["neg"][0] for e in examples],
              "neg_2": [e["neg"][1] for e in examples]}
    for name, texts in fields.items():
        enc = tokenizer(texts)
        batch[f"{name}_input_ids"], batch[f"{name}_mask"] = enc["input_ids"], enc["attention_mask"]
    enc = tokenizer(fields["q"], text_pair=fields["c1"])
    batch["q_sp1_input_ids"], batch["q_sp1_mask"] = enc["input_ids"], enc["attention_mask"]
    return batch


@torch.no_grad()
def beam_search(model, tokenizer, question, corpus, corpus_emb, beam=2, topk=2):
    model.eval()
    enc = tokenizer([question])
    q = model.encode_seq(enc["input_ids"], enc["attention_mask"])
    s1, hop1 = (q @ corpus_emb.t())[0].topk(beam)
    enc = tokenizer([question] * beam, text_pair=[corpus[i] for i in hop1.tolist()])
    q_sp = model.encode_seq(enc["input_ids"], enc["attention_mask"])
    s2, hop2 = (q_sp @ corpus_emb.t()).topk(topk, dim=1)
    paths = [((hop1[b].item(), hop2[b, j].item()), (s1[b] + s2[b, j]).item())
             for b in range(beam) for j in range(topk) if hop2[b, j] != hop1[b]]
    return sorted(paths, key=lambda p: -p[1])


if __name__ == "__main__":
    torch.manual_seed(0)
    tok = RobertaLikeTokenizer()
    corpus = ["Inception is a 2010 film directed by Christopher Nolan.",
              "Christopher Nolan is a British-American filmmaker born in London.",
              "The Shard is a skyscraper in London.",
              "Avatar is a 2009 film directed by James Cameron.",
              "James Cameron is a Canadian filmmaker born in Kapuskasing, Ontario.",
              "Ontario is a province of Canada."]
    examples = [{"question": "Where was the director of Inception born?", "sp1": corpus[0], "sp2": corpus[1],
                 "neg": [corpus[2], corpus[3]]},
                {"question": "In which country was the director of Avatar born?", "sp1": corpus[3],
                 "sp2": corpus[4], "neg": [corpus[5], corpus[0]]}]
    model = RobertaRetriever()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    for step in range(3):
        model.train()
        loss = mhop_loss(model(collate(tok, examples)))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        print(f"step {step} loss {loss.item():.4f}")
    model.eval()
    with torch.no_grad():
        enc = tok(corpus)
        corpus_emb = model.encode_seq(enc["input_ids"], enc["attention_mask"])
    print(beam_search(model, tok, examples[0]["question"], corpus, corpus_emb))
