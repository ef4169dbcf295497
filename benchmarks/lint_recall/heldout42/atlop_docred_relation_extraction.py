"""Document-level relation extraction with ATLOP (Zhou et al., 2021) on DocRED-like documents.

wzhouad/ATLOP's DocREModel over a small BERT encoder (scaled_dot_product_attention in every
layer, the eager path where the attention probabilities are needed): entity mentions wrapped in
"*" markers, logsumexp pooling of the mention embeddings, localized context pooling from the
last layer's attention, grouped bilinear classifier, adaptive-thresholding loss, collate_fn with
a float input_mask, micro-F1 over ordered entity pairs.

Source: rasbt/LLMs-from-scratch#1061 (conventions.md section 3 item 14), conventions.md section 1 (SDPA row, direction cheat-sheet) and section 5 item 1, seed self_attention_mask_guide.txt section 2
"""

import math
import random

import torch
import torch.nn as nn
import torch.nn.functional as F

PAD, CLS, SEP, STAR = 0, 1, 2, 3
N_NAMES, TRIGGER0, FILLER0, N_REL = 40, 44, 47, 4


class BertSelfAttention(nn.Module):
    def __init__(self, hidden, heads, dropout):
        super().__init__()
        self.heads, self.dropout = heads, dropout
        self.qkv = nn.Linear(hidden, 3 * hidden)

    def forward(self, x, mask, output_attentions=False):
        B, T, C = x.shape
        q, k, v = self.qkv(x).view(B, T, 3, self.heads, C // self.heads).permute(2, 0, 3, 1, 4)
        if output_attentions:
            scores = q @ k.transpose(-1, -2) / math.sqrt(C // self.heads)
            probs = scores.masked_fill(mask, torch.finfo(scores.dtype).min).softmax(dim=-1)
            return (probs @ v).transpose(1, 2).reshape(B, T, C), probs
        context = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=self.dropout if self.training else 0.0)  # expect: MC511 atlop
        return context.transpose(1, 2).reshape(B, T, C), None


class BertLayer(nn.Module):
    def __init__(self, hidden, heads, dropout=0.1):
        super().__init__()
        self.attention = BertSelfAttention(hidden, heads, dropout)
        self.attention_output = nn.Linear(hidden, hidden)
        self.ln1 = nn.LayerNorm(hidden)
        self.ffn = nn.Sequential(nn.Linear(hidden, 2 * hidden), nn.GELU(), nn.Linear(2 * hidden, hidden))
        self.ln2 = nn.LayerNorm(hidden)
        self.drop = nn.Dropout(dropout)

    def forward(self, x, mask, output_attentions=False):
        attn, probs = self.attention(x, mask, output_attentions)
        x = self.ln1(x + self.drop(self.attention_output(attn)))
        return self.ln2(x + self.drop(self.ffn(x))), probs


class BertModel(nn.Module):
    def __init__(self, vocab_size, hidden=64, heads=4, layers=3, max_len=128):
        super().__init__()
        self.word_embeddings = nn.Embedding(vocab_size, hidden, padding_idx=PAD)
        self.position_embeddings = nn.Embedding(max_len, hidden)
        self.ln = nn.LayerNorm(hidden)
        self.layer = nn.ModuleList(BertLayer(hidden, heads) for _ in range(layers))

    def forward(self, input_ids, attention_mask):
        pos = torch.arange(input_ids.size(1), device=input_ids.device)
        x = self.ln(self.word_embeddings(input_ids) + self.position_embeddings(pos))
        mask = (attention_mask == 0)[:, None, None, :]
        for i, layer in enumerate(self.layer):
            x, attention = layer(x, mask, output_attentions=i == len(self.layer) - 1)
        return x, attention


class ATLoss(nn.Module):
    def forward(self, logits, labels):
        th_label = torch.zeros_like(labels, dtype=torch.float)
        th_label[:, 0] = 1.0
        labels = labels.clone()
        labels[:, 0] = 0.0
        p_mask, n_mask = labels + th_label, 1 - labels
        logit1 = logits.masked_fill(p_mask == 0, torch.finfo(logits.dtype).min)
        loss1 = -(F.log_softmax(logit1, dim=-1) * labels).sum(1)
        logit2 = logits.masked_fill(n_mask == 0, torch.finfo(logits.dtype).min)
        loss2 = -(F.log_softmax(logit2, dim=-1) * th_label).sum(1)
        return (loss1 + loss2).mean()

    def get_label(self, logits):
        output = (logits > logits[:, :1]).float()
        output[:, 0] = (output.sum(1) == 0.0).float()
        return output


class DocREModel(nn.Module):
    def __init__(self, model, hidden=64, emb_size=128, block_size=16, num_labels=N_REL):
        super().__init__()
        self.model = model
        self.head_extractor = nn.Linear(2 * hidden, emb_size)
        self.tail_extractor = nn.Linear(2 * hidden, emb_size)
        self.bilinear = nn.Linear(emb_size * block_size, num_labels)
        self.emb_size, self.block_size = emb_size, block_size
        self.loss_fnt = ATLoss()

    def get_hrt(self, sequence_output, attention, entity_pos, hts):
        hss, tss, rss = [], [], []
        for i in range(len(entity_pos)):
            entity_embs, entity_atts = [], []
            for mentions in entity_pos[i]:
                starts = [start for start, _ in mentions]
                entity_embs.append(torch.logsumexp(sequence_output[i, starts], dim=0))
                entity_atts.append(attention[i, :, starts].mean(1))
            entity_embs, entity_atts = torch.stack(entity_embs), torch.stack(entity_atts)
            ht_i = torch.tensor(hts[i], dtype=torch.long)
            hs, ts = entity_embs[ht_i[:, 0]], entity_embs[ht_i[:, 1]]
            ht_att = (entity_atts[ht_i[:, 0]] * entity_atts[ht_i[:, 1]]).mean(1)
            ht_att = ht_att / (ht_att.sum(1, keepdim=True) + 1e-5)
            rss.append(ht_att @ sequence_output[i])
            hss.append(hs)
            tss.append(ts)
        return torch.cat(hss), torch.cat(rss), torch.cat(tss)

    def forward(self, input_ids, attention_mask, entity_pos, hts, labels=None):
        sequence_output, attention = self.model(input_ids, attention_mask)
        hs, rs, ts = self.get_hrt(sequence_output, attention, entity_pos, hts)
        hs = torch.tanh(self.head_extractor(torch.cat([hs, rs], dim=1)))
        ts = torch.tanh(self.tail_extractor(torch.cat([ts, rs], dim=1)))
        b1 = hs.view(-1, self.emb_size // self.block_size, self.block_size)
        b2 = ts.view(-1, self.emb_size // self.block_size, self.block_size)
        bl = (b1.unsqueeze(3) * b2.unsqueeze(2)).view(-1, self.emb_size * self.block_size)
        logits = self.bilinear(bl)
        if labels is None:
            return self.loss_fnt.get_label(logits)
        return self.loss_fnt(logits, torch.cat(labels).float())


def make_document(rng):
    names = rng.sample(range(4, 4 + N_NAMES), 4)
    facts = {}
    for _ in range(rng.randint(1, 2)):
        h, t = rng.sample(range(4), 2)
        facts[(h, t)] = rng.randint(1, N_REL - 1)
    sentences = [[STAR, names[h], STAR, TRIGGER0 + r - 1, STAR, names[t], STAR] for (h, t), r in facts.items()]
    sentences += [[STAR, names[e], STAR] + [FILLER0 + rng.randrange(40) for _ in range(rng.randint(1, 4))] for e in range(4)]
    rng.shuffle(sentences)
    input_ids, entity_pos = [CLS], [[] for _ in range(4)]
    for sent in sentences:
        for j, tok in enumerate(sent):
            if tok == STAR and j + 1 < len(sent) and sent[j + 1] in names:
                entity_pos[names.index(sent[j + 1])].append((len(input_ids) + j, len(input_ids) + j + 3))
        input_ids += sent + [FILLER0 + rng.randrange(40) for _ in range(rng.randint(0, 3))]
    hts = [[h, t] for h in range(4) for t in range(4) if h != t]
    labels = torch.zeros(len(hts), N_REL)
    for k, (h, t) in enumerate(hts):
        labels[k, facts.get((h, t), 0)] = 1.0
    return {"input_ids": input_ids + [SEP], "entity_pos": entity_pos, "hts": hts, "labels": labels}


def collate_fn(batch):
    max_len = max(len(f["input_ids"]) for f in batch)
    input_ids = [f["input_ids"] + [0] * (max_len - len(f["input_ids"])) for f in batch]
    input_mask = [[1.0] * len(f["input_ids"]) + [0.0] * (max_len - len(f["input_ids"])) for f in batch]
    return (torch.tensor(input_ids, dtype=torch.long), torch.tensor(input_mask, dtype=torch.float),
            [f["labels"] for f in batch], [f["entity_pos"] for f in batch], [f["hts"] for f in batch])


def evaluate(model, features):
    model.eval()
    tp = n_pred = n_gold = 0
    with torch.no_grad():
        for i in range(0, len(features), 16):
            input_ids, input_mask, labels, entity_pos, hts = collate_fn(features[i : i + 16])
            pred = model(input_ids, input_mask, entity_pos, hts)[:, 1:]
            gold = torch.cat(labels)[:, 1:]
            tp += (pred * gold).sum().item()
            n_pred += pred.sum().item()
            n_gold += gold.sum().item()
    return 2 * tp / max(n_pred + n_gold, 1)


def main():
    torch.manual_seed(0)
    rng = random.Random(0)
    train = [make_document(rng) for _ in range(1200)]
    dev = [make_document(rng) for _ in range(200)]
    model = DocREModel(BertModel(FILLER0 + 40))
    optimizer = torch.optim.AdamW(model.parameters(), lr=2e-3)
    for epoch in range(5):
        model.train()
        rng.shuffle(train)
        for i in range(0, len(train), 16):
            input_ids, input_mask, labels, entity_pos, hts = collate_fn(train[i : i + 16])
            loss = model(input_ids, input_mask, entity_pos, hts, labels)
            optimizer.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
        print(f"epoch {epoch} loss {loss.item():.4f} dev F1 {evaluate(model, dev):.3f}")
    short, long = sorted(dev, key=lambda f: len(f["input_ids"]))[:: len(dev) - 1]
    with torch.no_grad():
        alone = model.model(*collate_fn([short])[:2])[0]
        padded = model.model(*collate_fn([short, long])[:2])[0][:1, : alone.size(1)]
    print(f"shortest document alone vs padded: {(alone - padded).abs().max():.2e}")


if __name__ == "__main__":
    main()
