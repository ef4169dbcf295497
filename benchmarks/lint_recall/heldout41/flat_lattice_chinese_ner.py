"""Chinese NER with FLAT, the flat-lattice Transformer.

Layout of LeeSureman/Flat-Lattice-Transformer (Li et al., ACL 2020): the lattice of characters
followed by the lexicon words they match, with pos_s / pos_e, fastNLP's seq_len_to_mask,
Four_Pos_Fusion_Embedding over the head/tail distances (ss, se, es, ee) fused by a
feed-forward layer, MultiHead_Attention_Lattice_rel_save_gpumm with the u / v biases,
Transformer_Encoder, Lattice_Transformer_SeqLabel with a CRF over the character positions,
on a Resume/Weibo-like synthetic corpus with a small gazetteer.

Source: conventions.md §1 (HF 2-D attention_mask row, direction cheat-sheet), seed self_attention_mask_guide.txt §7 Q1, seed masked_fill_inplace.txt (作用)
"""

import math
import random

import torch
import torch.nn as nn
import torch.nn.functional as F


def seq_len_to_mask(seq_len, max_len=None):
    max_len = int(max_len) if max_len else int(seq_len.max())
    broad_cast_seq_len = torch.arange(max_len).expand(seq_len.size(0), -1).to(seq_len)
    return broad_cast_seq_len.lt(seq_len.unsqueeze(1))


def get_embedding(max_seq_len, embedding_dim, rel_pos_init=0):
    num_embeddings = 2 * max_seq_len + 1
    half_dim = embedding_dim // 2
    emb = torch.exp(torch.arange(half_dim, dtype=torch.float) * -(math.log(10000) / (half_dim - 1)))
    start = -max_seq_len if rel_pos_init == 0 else 0
    emb = torch.arange(start, start + num_embeddings, dtype=torch.float).unsqueeze(1) * emb.unsqueeze(0)
    return torch.cat([torch.sin(emb), torch.cos(emb)], dim=1).view(num_embeddings, -1)


class Four_Pos_Fusion_Embedding(nn.Module):
    def __init__(self, pe, max_seq_len, hidden_size):
        super().__init__()
        self.max_seq_len = max_seq_len
        self.register_buffer("pe", pe)
        self.pos_fusion_forward = nn.Sequential(nn.Linear(hidden_size * 4, hidden_size), nn.ReLU(inplace=True))

    def forward(self, pos_s, pos_e):
        batch, max_seq_len = pos_s.size()
        pos = [pos_s.unsqueeze(-1) - pos_s.unsqueeze(-2), pos_s.unsqueeze(-1) - pos_e.unsqueeze(-2),
               pos_e.unsqueeze(-1) - pos_s.unsqueeze(-2), pos_e.unsqueeze(-1) - pos_e.unsqueeze(-2)]
        pe_4 = torch.cat(
            [self.pe[p.view(-1) + self.max_seq_len].view(batch, max_seq_len, max_seq_len, -1) for p in pos], dim=-1)
        return self.pos_fusion_forward(pe_4)


class MultiHead_Attention_Lattice_rel_save_gpumm(nn.Module):
    def __init__(self, hidden_size, num_heads, scaled=True, attn_dropout=0.1):
        super().__init__()
        self.hidden_size = hidden_size
        self.num_heads = num_heads
        self.per_head_size = hidden_size // num_heads
        self.scaled = scaled
        self.w_k = nn.Linear(hidden_size, hidden_size)
        self.w_q = nn.Linear(hidden_size, hidden_size)
        self.w_v = nn.Linear(hidden_size, hidden_size)
        self.w_r = nn.Linear(hidden_size, hidden_size)
        self.u = nn.Parameter(torch.zeros(num_heads, self.per_head_size))
        self.v = nn.Parameter(torch.zeros(num_heads, self.per_head_size))
        self.dropout = nn.Dropout(attn_dropout)

    def forward(self, key, query, value, seq_len, lex_num, rel_pos_embedding):
        batch, max_seq_len = key.size(0), key.size(1)
        key = self.w_k(key).view(batch, max_seq_len, self.num_heads, self.per_head_size).transpose(1, 2)
        query = self.w_q(query).view(batch, max_seq_len, self.num_heads, self.per_head_size).transpose(1, 2)
        value = self.w_v(value).view(batch, max_seq_len, self.num_heads, self.per_head_size).transpose(1, 2)
        rel_pos_embedding = self.w_r(rel_pos_embedding).view(
            batch, max_seq_len, max_seq_len, self.num_heads, self.per_head_size)
        A_C = torch.matmul(query + self.u.unsqueeze(0).unsqueeze(-2), key.transpose(-1, -2))
        rel_pos_embedding_for_b = rel_pos_embedding.permute(0, 3, 1, 4, 2)
        query_for_b = query.view(batch, self.num_heads, max_seq_len, 1, self.per_head_size)
        query_for_b_and_v_for_d = query_for_b + self.v.view(1, self.num_heads, 1, 1, self.per_head_size)
        B_D = torch.matmul(query_for_b_and_v_for_d, rel_pos_embedding_for_b).squeeze(-2)
        attn_score_raw = A_C + B_D
        if self.scaled:
            attn_score_raw = attn_score_raw / math.sqrt(self.per_head_size)
        mask = seq_len_to_mask(seq_len + lex_num, max_len=max_seq_len).bool().unsqueeze(1).unsqueeze(1)
        attn_score_raw_masked = attn_score_raw.masked_fill(mask, torch.finfo(attn_score_raw.dtype).min)  # expect: MC519 flat
        attn_score = self.dropout(F.softmax(attn_score_raw_masked, dim=-1))
        value_weighted_sum = torch.matmul(attn_score, value)
        return value_weighted_sum.transpose(1, 2).contiguous().reshape(batch, max_seq_len, self.hidden_size)


class Transformer_Encoder_Layer(nn.Module):
    def __init__(self, hidden_size, num_heads, ff_size, dropout=0.1):
        super().__init__()
        self.attn = MultiHead_Attention_Lattice_rel_save_gpumm(hidden_size, num_heads)
        self.layer_norm_1 = nn.LayerNorm(hidden_size)
        self.ff = nn.Sequential(nn.Linear(hidden_size, ff_size), nn.ReLU(), nn.Dropout(dropout),
                                nn.Linear(ff_size, hidden_size))
        self.layer_norm_2 = nn.LayerNorm(hidden_size)
        self.dropout = nn.Dropout(dropout)

    def forward(self, inp, seq_len, lex_num, rel_pos_embedding):
        output = self.attn(inp, inp, inp, seq_len, lex_num=lex_num, rel_pos_embedding=rel_pos_embedding)
        output = self.layer_norm_1(inp + self.dropout(output))
        return self.layer_norm_2(output + self.dropout(self.ff(output)))


class Transformer_Encoder(nn.Module):
    def __init__(self, hidden_size, num_heads, num_layers, max_seq_len, ff_size):
        super().__init__()
        pe = get_embedding(max_seq_len, hidden_size)
        self.four_pos_fusion_embedding = Four_Pos_Fusion_Embedding(pe, max_seq_len, hidden_size)
        self.layers = nn.ModuleList(
            [Transformer_Encoder_Layer(hidden_size, num_heads, ff_size) for _ in range(num_layers)])

    def forward(self, inp, seq_len, lex_num, pos_s, pos_e):
        rel_pos_embedding = self.four_pos_fusion_embedding(pos_s, pos_e)
        for layer in self.layers:
            inp = layer(inp, seq_len, lex_num, rel_pos_embedding)
        return inp


class ConditionalRandomField(nn.Module):
    def __init__(self, num_tags):
        super().__init__()
        self.trans_m = nn.Parameter(torch.zeros(num_tags, num_tags))
        self.start_scores = nn.Parameter(torch.zeros(num_tags))
        self.end_scores = nn.Parameter(torch.zeros(num_tags))

    def forward(self, feats, tags, mask):
        feats, tags, mask = feats.transpose(0, 1), tags.transpose(0, 1), mask.transpose(0, 1).float()
        alpha = feats[0] + self.start_scores
        for i in range(1, feats.size(0)):
            tmp = torch.logsumexp(alpha.unsqueeze(2) + self.trans_m + feats[i].unsqueeze(1), dim=1)
            alpha = tmp * mask[i].unsqueeze(1) + alpha * (1 - mask[i]).unsqueeze(1)
        normalizer = torch.logsumexp(alpha + self.end_scores, dim=1)
        batch_idx = torch.arange(feats.size(1))
        trans_score = (self.trans_m[tags[:-1], tags[1:]] * mask[1:]).sum(0)
        emit_score = (feats.gather(2, tags.unsqueeze(2)).squeeze(2) * mask).sum(0)
        last_tags = tags[mask.long().sum(0) - 1, batch_idx]
        gold = trans_score + emit_score + self.start_scores[tags[0]] + self.end_scores[last_tags]
        return normalizer - gold

    def viterbi_decode(self, logits, mask):
        score = logits[:, 0] + self.start_scores
        history = []
        for i in range(1, logits.size(1)):
            best, idx = (score.unsqueeze(2) + self.trans_m).max(dim=1)
            new_score = best + logits[:, i]
            score = torch.where(mask[:, i:i + 1], new_score, score)
            history.append(torch.where(mask[:, i:i + 1], idx, torch.arange(score.size(1)).expand_as(idx)))
        best_last = (score + self.end_scores).argmax(dim=1)
        path = [best_last]
        for idx in reversed(history):
            path.append(idx.gather(1, path[-1].unsqueeze(1)).squeeze(1))
        return torch.stack(path[::-1], dim=1)


class Lattice_Transformer_SeqLabel(nn.Module):
    def __init__(self, vocab_size, label_size, hidden_size=64, num_heads=4, num_layers=1, max_seq_len=64):
        super().__init__()
        self.lattice_embed = nn.Embedding(vocab_size, 50, padding_idx=0)
        self.char_proj = nn.Linear(50, hidden_size)
        self.lex_proj = nn.Linear(50, hidden_size)
        self.encoder = Transformer_Encoder(hidden_size, num_heads, num_layers, max_seq_len, ff_size=2 * hidden_size)
        self.output = nn.Linear(hidden_size, label_size)
        self.crf = ConditionalRandomField(label_size)
        self.dropout = nn.Dropout(0.2)

    def forward(self, lattice, seq_len, lex_num, pos_s, pos_e, target=None):
        max_seq_len_and_lex_num = lattice.size(1)
        raw_embed = self.dropout(self.lattice_embed(lattice))
        char_mask = seq_len_to_mask(seq_len, max_len=max_seq_len_and_lex_num).bool()
        embed_char = self.char_proj(raw_embed).masked_fill(~(char_mask.unsqueeze(-1)), 0)
        lex_mask = seq_len_to_mask(seq_len + lex_num, max_len=max_seq_len_and_lex_num).bool() ^ char_mask
        embed_lex = self.lex_proj(raw_embed).masked_fill(~(lex_mask.unsqueeze(-1)), 0)
        encoded = self.encoder(embed_char + embed_lex, seq_len, lex_num=lex_num, pos_s=pos_s, pos_e=pos_e)
        pred = self.output(self.dropout(encoded[:, : int(seq_len.max())]))
        mask = seq_len_to_mask(seq_len).bool()
        if target is not None:
            return {"loss": self.crf(pred, target, mask).mean(dim=0)}
        return {"pred": self.crf.viterbi_decode(pred, mask)}


GAZETTEER = {"北京": "LOC", "上海": "LOC", "南京": "LOC", "清华大学": "ORG", "南京大学": "ORG",
             "华为公司": "ORG", "张伟": "PER", "李娜": "PER", "王芳": "PER"}
WORDS = ["今天", "我们", "学习", "工作", "去了", "参观",
         "毕业于", "担任", "经理", "大学", "公司", "在"]
LABELS = ["O", "B-LOC", "I-LOC", "B-ORG", "I-ORG", "B-PER", "I-PER"]


def make_sentence(rng, char_vocab):
    chars, tags = [], []
    for _ in range(rng.randint(3, 8)):
        word = rng.choice(list(GAZETTEER) + WORDS + WORDS)
        kind = GAZETTEER.get(word)
        chars += list(word)
        tags += ["O"] * len(word) if kind is None else [f"B-{kind}"] + [f"I-{kind}"] * (len(word) - 1)
    text = "".join(chars)
    lexicon = [(s, s + len(w) - 1, w) for w in list(GAZETTEER) + WORDS if len(w) > 1
               for s in range(len(text)) if text.startswith(w, s)]
    lattice = [char_vocab.setdefault(c, len(char_vocab)) for c in chars]
    lattice += [char_vocab.setdefault(w, len(char_vocab)) for _, _, w in lexicon]
    pos_s = list(range(len(chars))) + [s for s, _, _ in lexicon]
    pos_e = list(range(len(chars))) + [e for _, e, _ in lexicon]
    return lattice, pos_s, pos_e, [LABELS.index(t) for t in tags], len(chars), len(lexicon)


def collate(samples):
    width = max(len(s[0]) for s in samples)
    char_width = max(s[4] for s in samples)
    pad = lambda xs, w: torch.tensor([x + [0] * (w - len(x)) for x in xs])
    return (pad([s[0] for s in samples], width), torch.tensor([s[4] for s in samples]),
            torch.tensor([s[5] for s in samples]), pad([s[1] for s in samples], width),
            pad([s[2] for s in samples], width), pad([s[3] for s in samples], char_width))


def spans(tags):
    out, start = set(), None
    for i, t in enumerate(tags + [0]):
        if start is not None and not LABELS[t].startswith("I-"):
            out.add((start, i, LABELS[tags[start]][2:]))
            start = None
        if LABELS[t].startswith("B-"):
            start = i
    return out


if __name__ == "__main__":
    rng, char_vocab = random.Random(0), {"<pad>": 0}
    torch.manual_seed(0)
    train = [make_sentence(rng, char_vocab) for _ in range(1024)]
    test = [make_sentence(rng, char_vocab) for _ in range(200)]
    model = Lattice_Transformer_SeqLabel(vocab_size=len(char_vocab) + 1, label_size=len(LABELS))
    optimizer = torch.optim.Adam(model.parameters(), lr=2e-3)
    for epoch in range(6):
        model.train()
        rng.shuffle(train)
        for b in range(0, 1024, 32):
            lattice, seq_len, lex_num, pos_s, pos_e, target = collate(train[b:b + 32])
            loss = model(lattice, seq_len, lex_num, pos_s, pos_e, target=target)["loss"]
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        model.eval()
        with torch.no_grad():
            lattice, seq_len, lex_num, pos_s, pos_e, target = collate(test)
            pred = model(lattice, seq_len, lex_num, pos_s, pos_e)["pred"]
        tp = n_pred = n_gold = 0
        for i, n in enumerate(seq_len.tolist()):
            p, g = spans(pred[i, :n].tolist()), spans(target[i, :n].tolist())
            tp, n_pred, n_gold = tp + len(p & g), n_pred + len(p), n_gold + len(g)
        print(f"epoch {epoch} loss {loss.item():.3f} entity F1 {2 * tp / max(n_pred + n_gold, 1):.3f}")
