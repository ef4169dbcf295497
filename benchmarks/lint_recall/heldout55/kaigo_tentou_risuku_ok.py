"""介護記録からの転倒リスク予測モデル（施設内実証用）。

介護職員が毎日記入する経過記録（単語列）を入力とし、翌週の転倒リスク（高・低）を推定する。
記録の長さは利用者ごとに異なるため、ミニバッチ内で PAD を詰めて揃える。
設定値は ``SETTEI`` 辞書にまとめ、注意マスクは collate 関数で作る。

Source: conventions.md §1 (HF 4.x AttentionMaskConverter 行); huggingface/transformers#32195 (conventions.md §3 第 25 項)
"""

import math
import random

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset

SETTEI = {
    "goi_suu": 80,
    "kakure_jigen": 64,
    "heddo_suu": 4,
    "sou_suu": 2,
    "saidai_nagasa": 40,
    "gakushuuritsu": 2e-3,
    "epokku": 4,
    "batchi": 16,
}
PAD = 0
KIKEN_GO = list(range(1, 11))
FUTSUU_GO = list(range(11, 80))


class KirokuDataset(Dataset):
    def __init__(self, kensuu, shido):
        rng = random.Random(shido)
        self.rei = []
        for _ in range(kensuu):
            nagasa = rng.randint(6, SETTEI["saidai_nagasa"])
            tango = [rng.choice(FUTSUU_GO) for _ in range(nagasa)]
            risuku = rng.random() < 0.5
            if risuku:
                for _ in range(2):
                    tango[rng.randrange(nagasa)] = rng.choice(KIKEN_GO)
            self.rei.append((tango, int(risuku)))

    def __len__(self):
        return len(self.rei)

    def __getitem__(self, i):
        return self.rei[i]


def kiroku_collate(batchi):
    nagasa = max(len(t) for t, _ in batchi)
    ids = torch.full((len(batchi), nagasa), PAD, dtype=torch.long)
    for i, (tango, _) in enumerate(batchi):
        ids[i, : len(tango)] = torch.tensor(tango)
    yuukou = ids != PAD
    masuku_bias = (1 - yuukou[:, None, None, :].float()) * -10000.0
    raberu = torch.tensor([r for _, r in batchi])
    return {"ids": ids, "yuukou": yuukou, "masuku_bias": masuku_bias, "raberu": raberu}


class JikoChuui(nn.Module):
    def __init__(self, jigen, heddo):
        super().__init__()
        self.heddo = heddo
        self.qkv = nn.Linear(jigen, 3 * jigen)
        self.dezain = nn.Linear(jigen, jigen)

    def forward(self, x, masuku_bias):
        b, n, d = x.shape
        q, k, v = self.qkv(x).view(b, n, 3, self.heddo, d // self.heddo).permute(2, 0, 3, 1, 4)
        sukoa = q @ k.transpose(-2, -1) / math.sqrt(d // self.heddo)
        sukoa = sukoa + masuku_bias
        omomi = sukoa.softmax(dim=-1)
        return self.dezain((omomi @ v).transpose(1, 2).reshape(b, n, d))


class KirokuSou(nn.Module):
    def __init__(self, jigen, heddo):
        super().__init__()
        self.chuui = JikoChuui(jigen, heddo)
        self.norm1 = nn.LayerNorm(jigen)
        self.ff = nn.Sequential(nn.Linear(jigen, 2 * jigen), nn.GELU(), nn.Linear(2 * jigen, jigen))
        self.norm2 = nn.LayerNorm(jigen)

    def forward(self, x, masuku_bias):
        x = self.norm1(x + self.chuui(x, masuku_bias))
        return self.norm2(x + self.ff(x))


class TentouRisukuModel(nn.Module):
    def __init__(self, s):
        super().__init__()
        self.umekomi = nn.Embedding(s["goi_suu"], s["kakure_jigen"], padding_idx=PAD)
        self.ichi = nn.Embedding(s["saidai_nagasa"], s["kakure_jigen"])
        self.sou = nn.ModuleList([KirokuSou(s["kakure_jigen"], s["heddo_suu"]) for _ in range(s["sou_suu"])])
        self.bunrui = nn.Linear(s["kakure_jigen"], 2)

    def forward(self, ids, yuukou, masuku_bias):
        h = self.umekomi(ids) + self.ichi(torch.arange(ids.shape[1]))
        for sou in self.sou:
            h = sou(h, masuku_bias)
        w = yuukou.unsqueeze(-1).float()
        heikin = (h * w).sum(1) / w.sum(1)
        return self.bunrui(heikin)


def hyouka(model, loader):
    model.eval()
    seikai = zensuu = 0
    with torch.no_grad():
        for b in loader:
            yosoku = model(b["ids"], b["yuukou"], b["masuku_bias"]).argmax(-1)
            seikai += int((yosoku == b["raberu"]).sum())
            zensuu += len(yosoku)
    return seikai / zensuu


def main():
    torch.manual_seed(0)
    gakushuu = DataLoader(KirokuDataset(400, 1), batch_size=SETTEI["batchi"], shuffle=True, collate_fn=kiroku_collate)
    kenshou = DataLoader(KirokuDataset(100, 2), batch_size=SETTEI["batchi"], collate_fn=kiroku_collate)
    model = TentouRisukuModel(SETTEI)
    opt = torch.optim.Adam(model.parameters(), lr=SETTEI["gakushuuritsu"])
    for epokku in range(SETTEI["epokku"]):
        model.train()
        for b in gakushuu:
            sonshitsu = F.cross_entropy(model(b["ids"], b["yuukou"], b["masuku_bias"]), b["raberu"])
            opt.zero_grad()
            sonshitsu.backward()
            opt.step()
        print(f"エポック {epokku}: 損失 {sonshitsu.item():.3f}  正解率 {hyouka(model, kenshou):.3f}")


if __name__ == "__main__":
    main()
