"""Chinese dependency parsing with a biaffine parser over an ERNIE-style encoder.

A PyTorch port of baidu/DDParser (PaddlePaddle): the PaddleNLP-style tokenizer returns
`input_ids`, `token_type_ids` and an int64 `attention_mask`, the encoder stands in for
ERNIE 1.0 (`paddle.nn.TransformerEncoder` became `nn.TransformerEncoder`), `[CLS]` plays ROOT,
and the parser keeps DDParser's `mlp_arc_h` / `mlp_arc_d` / `mlp_rel_h` / `mlp_rel_d` and the
two `Biaffine` scorers, the arc and relation losses and UAS / LAS. Sentences come pre-segmented
into words, as LAC gives them to DDParser, with DDParser's relation labels.

Source: seed self_attention_mask_guide.txt 2 and 7 (Q1); conventions.md 1 (direction cheat-sheet), 5.1
"""

import random

import torch
import torch.nn as nn
import torch.nn.functional as F

RELATIONS = ["<pad>", "HED", "SBV", "VOB", "ATT", "ADV", "MT"]
SUBJECTS, ADVERBS = ["我", "他", "老师", "学生", "妈妈"], ["很", "也", "已经", "常常"]
VERBS, ADJECTIVES = ["喜欢", "吃", "买", "看", "写"], ["红", "新", "大", "便宜"]
OBJECTS = ["苹果", "书", "电影", "衣服", "信"]


def make_sentence(rng):
    words, heads, rels = [rng.choice(SUBJECTS)], [None], ["SBV"]
    if rng.random() < 0.5:
        words.append(rng.choice(ADVERBS)); heads.append(None); rels.append("ADV")
    verb = len(words)
    words.append(rng.choice(VERBS)); heads.append(0); rels.append("HED")
    if rng.random() < 0.4:
        words.append("了"); heads.append(verb + 1); rels.append("MT")
    if rng.random() < 0.5:
        words.append(rng.choice(ADJECTIVES)); heads.append(len(words) + 1); rels.append("ATT")
    words.append(rng.choice(OBJECTS)); heads.append(verb + 1); rels.append("VOB")
    heads = [verb + 1 if h is None else h for h in heads]
    return words, heads, [RELATIONS.index(r) for r in rels]


class ErnieTokenizer:
    def __init__(self, words):
        self.vocab = {w: i for i, w in enumerate(["[PAD]", "[CLS]", "[UNK]"] + sorted(words))}

    def __call__(self, batch_words, return_attention_mask=True):
        length = max(map(len, batch_words)) + 1
        input_ids = torch.zeros(len(batch_words), length, dtype=torch.long)
        attention_mask = torch.zeros(len(batch_words), length, dtype=torch.long)
        for i, words in enumerate(batch_words):
            input_ids[i, :len(words) + 1] = torch.tensor([1] + [self.vocab.get(w, 2) for w in words])
            attention_mask[i, :len(words) + 1] = 1
        encoded = {"input_ids": input_ids, "token_type_ids": torch.zeros_like(input_ids)}
        if return_attention_mask:
            encoded["attention_mask"] = attention_mask
        return encoded


class ErnieModel(nn.Module):
    def __init__(self, vocab_size, hidden_size=64, num_heads=4, num_layers=2, max_position=64):
        super().__init__()
        self.word_embeddings = nn.Embedding(vocab_size, hidden_size, padding_idx=0)
        self.position_embeddings = nn.Embedding(max_position, hidden_size)
        self.token_type_embeddings = nn.Embedding(2, hidden_size)
        self.layer_norm = nn.LayerNorm(hidden_size)
        layer = nn.TransformerEncoderLayer(hidden_size, num_heads, 4 * hidden_size, dropout=0.1, activation="gelu", batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, num_layers, enable_nested_tensor=False)

    def forward(self, input_ids, token_type_ids, attention_mask):
        positions = torch.arange(input_ids.shape[1], device=input_ids.device)
        x = self.word_embeddings(input_ids) + self.position_embeddings(positions) + self.token_type_embeddings(token_type_ids)
        return self.encoder(self.layer_norm(x), src_key_padding_mask=attention_mask.bool())  # expect: MC511 kwarg


class Biaffine(nn.Module):
    def __init__(self, n_in, n_out=1, bias_x=True, bias_y=True):
        super().__init__()
        self.n_out, self.bias_x, self.bias_y = n_out, bias_x, bias_y
        self.weight = nn.Parameter(torch.zeros(n_out, n_in + bias_x, n_in + bias_y))

    def forward(self, x, y):
        if self.bias_x:
            x = torch.cat([x, torch.ones_like(x[..., :1])], dim=-1)
        if self.bias_y:
            y = torch.cat([y, torch.ones_like(y[..., :1])], dim=-1)
        s = torch.einsum("bxi,oij,byj->boxy", x, self.weight, y)
        return s.squeeze(1) if self.n_out == 1 else s.permute(0, 2, 3, 1)


class DDParserModel(nn.Module):
    def __init__(self, vocab_size, n_mlp_arc=64, n_mlp_rel=32, hidden_size=64):
        super().__init__()
        self.embed = ErnieModel(vocab_size, hidden_size)
        mlp = lambda n: nn.Sequential(nn.Linear(hidden_size, n), nn.LeakyReLU(0.1), nn.Dropout(0.1))
        self.mlp_arc_h, self.mlp_arc_d = mlp(n_mlp_arc), mlp(n_mlp_arc)
        self.mlp_rel_h, self.mlp_rel_d = mlp(n_mlp_rel), mlp(n_mlp_rel)
        self.arc_attn = Biaffine(n_mlp_arc, bias_x=True, bias_y=False)
        self.rel_attn = Biaffine(n_mlp_rel, n_out=len(RELATIONS), bias_x=True, bias_y=True)

    def forward(self, input_ids, token_type_ids, attention_mask):
        x = self.embed(input_ids, token_type_ids, attention_mask)
        s_arc = self.arc_attn(self.mlp_arc_d(x), self.mlp_arc_h(x))
        s_rel = self.rel_attn(self.mlp_rel_d(x), self.mlp_rel_h(x))
        s_arc = s_arc.masked_fill(attention_mask[:, None, :] == 0, float("-inf"))
        return s_arc, s_rel


def gold_tensors(batch, length):
    arcs = torch.zeros(len(batch), length, dtype=torch.long)
    rels = torch.zeros(len(batch), length, dtype=torch.long)
    for i, (words, heads, labels) in enumerate(batch):
        arcs[i, 1:len(words) + 1], rels[i, 1:len(words) + 1] = torch.tensor(heads), torch.tensor(labels)
    return arcs, rels


def loss_function(s_arc, s_rel, arcs, rels, words_mask):
    arc_loss = F.cross_entropy(s_arc[words_mask], arcs[words_mask])
    s_rel = s_rel[words_mask].gather(1, arcs[words_mask][:, None, None].expand(-1, 1, s_rel.shape[-1])).squeeze(1)
    return arc_loss + F.cross_entropy(s_rel, rels[words_mask])


def main():
    rng = random.Random(0)
    torch.manual_seed(0)
    tokenizer = ErnieTokenizer(SUBJECTS + ADVERBS + VERBS + ADJECTIVES + OBJECTS + ["了"])
    model = DDParserModel(len(tokenizer.vocab))
    optimizer = torch.optim.Adam(model.parameters(), lr=2e-3, betas=(0.9, 0.9))
    for step in range(200):
        batch = [make_sentence(rng) for _ in range(32)]
        inputs = tokenizer([words for words, _, _ in batch])
        arcs, rels = gold_tensors(batch, inputs["input_ids"].shape[1])
        words_mask = inputs["attention_mask"].bool() & (torch.arange(arcs.shape[1]) > 0)
        loss = loss_function(*model(**inputs), arcs, rels, words_mask)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    model.eval()
    batch = [make_sentence(rng) for _ in range(300)]
    inputs = tokenizer([words for words, _, _ in batch])
    arcs, rels = gold_tensors(batch, inputs["input_ids"].shape[1])
    words_mask = inputs["attention_mask"].bool() & (torch.arange(arcs.shape[1]) > 0)
    with torch.no_grad():
        s_arc, s_rel = model(**inputs)
    arc_preds = s_arc.argmax(-1)
    rel_preds = s_rel.gather(2, arc_preds[..., None, None].expand(-1, -1, 1, s_rel.shape[-1])).squeeze(2).argmax(-1)
    uas = (arc_preds == arcs)[words_mask].float().mean()
    las = ((arc_preds == arcs) & (rel_preds == rels))[words_mask].float().mean()
    print("loss %.3f  UAS %.3f  LAS %.3f" % (loss.item(), uas, las))


if __name__ == "__main__":
    main()
