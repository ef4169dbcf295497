"""Visual question answering with MCAN (Deep Modular Co-Attention Networks), encoder-decoder variant.

Ported from MILVLG/mcan-vqa's core/model/mca.py and net.py to nn.MultiheadAttention: SA blocks
over the question, SGA blocks over the region features guided by the question, AttFlat pooling
of both, a sigmoid answer head trained with BCE on CLEVR-like scenes of padded region features.

Source: conventions.md section 1 (nn.MultiheadAttention row, direction cheat-sheet) and section 5 item 1, seed self_attention_mask_guide.txt section 2
"""

import random
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F

SHAPES = ["cube", "sphere", "cylinder"]
COLORS = ["red", "blue", "green", "yellow"]
SIZES = ["small", "large"]
ANSWERS = COLORS + ["yes", "no"] + [str(i) for i in range(6)]


@dataclass
class MCANConfig:
    word_vocab: int
    img_feat_size: int = 32
    hidden_size: int = 64
    multi_head: int = 4
    ff_size: int = 128
    layer: int = 2
    dropout_r: float = 0.1
    flat_out_size: int = 128
    answer_size: int = len(ANSWERS)
    max_regions: int = 10


class QuestionTokenizer:
    def __init__(self):
        words = ["[PAD]", "what", "color", "is", "the", "how", "many", "things", "are", "there", "?", "a"]
        self.vocab = {w: i for i, w in enumerate(words + SHAPES + COLORS + SIZES)}

    def __call__(self, questions, return_tensors="pt"):
        ids = [[self.vocab[w] for w in q.split()] for q in questions]
        width = max(len(x) for x in ids)
        return {
            "input_ids": torch.tensor([x + [0] * (width - len(x)) for x in ids]),
            "attention_mask": torch.tensor([[1] * len(x) + [0] * (width - len(x)) for x in ids]),
        }


class FFN(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.mlp = nn.Sequential(nn.Linear(cfg.hidden_size, cfg.ff_size), nn.ReLU(inplace=True),
                                 nn.Dropout(cfg.dropout_r), nn.Linear(cfg.ff_size, cfg.hidden_size))

    def forward(self, x):
        return self.mlp(x)


class SA(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.mhatt = nn.MultiheadAttention(cfg.hidden_size, cfg.multi_head, dropout=cfg.dropout_r, batch_first=True)
        self.ffn = FFN(cfg)
        self.dropout1, self.norm1 = nn.Dropout(cfg.dropout_r), nn.LayerNorm(cfg.hidden_size)
        self.dropout2, self.norm2 = nn.Dropout(cfg.dropout_r), nn.LayerNorm(cfg.hidden_size)

    def forward(self, x, key_padding_mask):
        att = self.mhatt(x, x, x, key_padding_mask=key_padding_mask, need_weights=False)[0]
        x = self.norm1(x + self.dropout1(att))
        return self.norm2(x + self.dropout2(self.ffn(x)))


class SGA(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.mhatt1 = nn.MultiheadAttention(cfg.hidden_size, cfg.multi_head, dropout=cfg.dropout_r, batch_first=True)
        self.mhatt2 = nn.MultiheadAttention(cfg.hidden_size, cfg.multi_head, dropout=cfg.dropout_r, batch_first=True)
        self.ffn = FFN(cfg)
        self.dropout1, self.norm1 = nn.Dropout(cfg.dropout_r), nn.LayerNorm(cfg.hidden_size)
        self.dropout2, self.norm2 = nn.Dropout(cfg.dropout_r), nn.LayerNorm(cfg.hidden_size)
        self.dropout3, self.norm3 = nn.Dropout(cfg.dropout_r), nn.LayerNorm(cfg.hidden_size)

    def forward(self, x, y, x_pad, y_pad):
        x = self.norm1(x + self.dropout1(self.mhatt1(x, x, x, key_padding_mask=x_pad, need_weights=False)[0]))
        x = self.norm2(x + self.dropout2(self.mhatt2(x, y, y, key_padding_mask=y_pad, need_weights=False)[0]))
        return self.norm3(x + self.dropout3(self.ffn(x)))


class MCA_ED(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.enc_list = nn.ModuleList(SA(cfg) for _ in range(cfg.layer))
        self.dec_list = nn.ModuleList(SGA(cfg) for _ in range(cfg.layer))

    def forward(self, lang_feat, img_feat, attention_mask, img_pad):
        lang_pad = ~attention_mask
        for enc in self.enc_list:
            lang_feat = enc(lang_feat, key_padding_mask=lang_pad)
        for dec in self.dec_list:
            img_feat = dec(img_feat, lang_feat, img_pad, lang_pad)
        return lang_feat, img_feat


class AttFlat(nn.Module):
    def __init__(self, cfg, glimpses=1):
        super().__init__()
        self.mlp = nn.Sequential(nn.Linear(cfg.hidden_size, cfg.hidden_size), nn.ReLU(inplace=True),
                                 nn.Linear(cfg.hidden_size, glimpses))
        self.linear_merge = nn.Linear(cfg.hidden_size * glimpses, cfg.flat_out_size)

    def forward(self, x, pad):
        att = self.mlp(x)
        att = att.masked_fill(pad.unsqueeze(2), torch.finfo(att.dtype).min)
        att = F.softmax(att, dim=1)
        x_atted = torch.einsum("bng,bnd->bgd", att, x).flatten(1)
        return self.linear_merge(x_atted)


class Net(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.embedding = nn.Embedding(cfg.word_vocab, cfg.hidden_size, padding_idx=0)
        self.lstm = nn.LSTM(cfg.hidden_size, cfg.hidden_size, batch_first=True)
        self.img_feat_linear = nn.Linear(cfg.img_feat_size, cfg.hidden_size)
        self.backbone = MCA_ED(cfg)
        self.attflat_img, self.attflat_lang = AttFlat(cfg), AttFlat(cfg)
        self.proj_norm = nn.LayerNorm(cfg.flat_out_size)
        self.proj = nn.Linear(cfg.flat_out_size, cfg.answer_size)

    @staticmethod
    def make_mask(feature):
        return torch.sum(torch.abs(feature), dim=-1) == 0

    def forward(self, img_feat, input_ids, attention_mask):
        attention_mask = attention_mask.bool()
        img_pad = self.make_mask(img_feat)
        lang_feat, _ = self.lstm(self.embedding(input_ids))
        img_feat = self.img_feat_linear(img_feat)
        lang_feat, img_feat = self.backbone(lang_feat, img_feat, attention_mask, img_pad)
        proj_feat = self.attflat_lang(lang_feat, ~attention_mask) + self.attflat_img(img_feat, img_pad)
        return self.proj(self.proj_norm(proj_feat))


def region_feature(shape, color, size, g):
    onehot = torch.zeros(9)
    onehot[SHAPES.index(shape)] = onehot[3 + COLORS.index(color)] = onehot[7 + SIZES.index(size)] = 1.0
    return torch.cat([onehot, torch.randn(23, generator=g) * 0.1]) + 0.05


def make_dataset(n, cfg, seed):
    rng, g = random.Random(seed), torch.Generator().manual_seed(seed)
    feats, questions, answers = [], [], []
    for _ in range(n):
        objs = [(rng.choice(SHAPES), rng.choice(COLORS), rng.choice(SIZES)) for _ in range(rng.randint(3, cfg.max_regions))]
        kind = rng.randrange(3)
        if kind == 0 and sum(o[0] == objs[0][0] for o in objs) == 1:
            q, a = f"what color is the {objs[0][0]} ?", objs[0][1]
        elif kind == 1:
            c = rng.choice(COLORS)
            q, a = f"how many {c} things are there ?", str(min(5, sum(o[1] == c for o in objs)))
        else:
            s, c, z = rng.choice(SHAPES), rng.choice(COLORS), rng.choice(SIZES)
            q, a = f"is there a {z} {c} {s} ?", "yes" if (s, c, z) in objs else "no"
        rng.shuffle(objs)
        f = torch.zeros(cfg.max_regions, cfg.img_feat_size)
        f[: len(objs)] = torch.stack([region_feature(*o, g) for o in objs])
        feats.append(f)
        questions.append(q)
        answers.append(ANSWERS.index(a))
    return torch.stack(feats), questions, torch.tensor(answers)


def main():
    torch.manual_seed(0)
    tokenizer = QuestionTokenizer()
    cfg = MCANConfig(word_vocab=len(tokenizer.vocab))
    train = make_dataset(3000, cfg, seed=0)
    test = make_dataset(500, cfg, seed=1)
    net = Net(cfg)
    optim = torch.optim.Adam(net.parameters(), lr=1e-3)
    for epoch in range(8):
        net.train()
        perm = torch.randperm(len(train[2]))
        for i in range(0, len(perm), 64):
            idx = perm[i : i + 64].tolist()
            batch = tokenizer([train[1][j] for j in idx])
            logits = net(train[0][idx], **batch)
            loss = F.binary_cross_entropy_with_logits(logits, F.one_hot(train[2][idx], cfg.answer_size).float())
            optim.zero_grad()
            loss.backward()
            optim.step()
        net.eval()
        with torch.no_grad():
            pred = net(test[0], **tokenizer(test[1])).argmax(-1)
        print(f"epoch {epoch} bce {loss.item():.4f} accuracy {(pred == test[2]).float().mean():.3f}")
    with torch.no_grad():
        short = min(range(len(test[1])), key=lambda i: len(test[1][i].split()))
        alone = net(test[0][short : short + 1], **tokenizer([test[1][short]]))
        padded = net(test[0][[short, 0]], **tokenizer([test[1][short], "is there a large yellow cylinder ?"]))[:1]
    print(f"shortest question alone vs padded: {(alone - padded).abs().max():.2e}")


if __name__ == "__main__":
    main()
