"""Türk makam müziği kayıtlarından makam tanıma (Rast, Hicaz, Uşşak, Nihavent, Segah, Hüzzam).

Ses kayıtlarından çıkarılan perde dizileri Holder-Mercator koma ölçeğine (53 koma/oktav)
nicemlenir ve belirteç olarak modele verilir. Kayıt süreleri farklı olduğu için dizi sonları
``DOLGU`` ile doldurulur. Hiperparametreler ``AYARLAR`` sözlüğündedir; gösterimdeki diziler
makamların dizi yapısından üretilen sentetik ezgilerdir.

Source: hyunwoongko/transformer PR #40, bentrevett/pytorch-seq2seq#96 (conventions.md §3 madde 21)
"""

import math
import random

import torch
import torch.nn as nn
import torch.nn.functional as F

AYARLAR = {
    "koma_sayisi": 54,
    "gizli_boyut": 48,
    "kafa_sayisi": 4,
    "katman_sayisi": 2,
    "azami_uzunluk": 64,
    "ogrenme_orani": 2e-3,
    "adim": 200,
}
DOLGU = 0
MAKAMLAR = {
    "rast": [1, 10, 18, 23, 32, 41, 49],
    "hicaz": [1, 6, 18, 23, 32, 36, 45],
    "ussak": [1, 7, 14, 23, 32, 36, 45],
    "nihavent": [1, 10, 14, 23, 32, 36, 45],
    "segah": [1, 5, 14, 23, 27, 36, 45],
    "huzzam": [1, 5, 10, 23, 27, 36, 45],
}
MAKAM_ADLARI = sorted(MAKAMLAR)


def ezgi_uret(rng):
    ad = rng.choice(MAKAM_ADLARI)
    dizi = MAKAMLAR[ad]
    uzunluk = rng.randint(10, AYARLAR["azami_uzunluk"])
    konum = 0
    ezgi = []
    for _ in range(uzunluk):
        konum = min(len(dizi) - 1, max(0, konum + rng.choice([-1, 0, 1, 1])))
        ezgi.append(dizi[konum] + rng.choice([0, 0, 0, 1]))
    return ezgi, MAKAM_ADLARI.index(ad)


def toplu_hazirla(ornekler):
    n = max(len(e) for e, _ in ornekler)
    perdeler = torch.full((len(ornekler), n), DOLGU, dtype=torch.long)
    for i, (e, _) in enumerate(ornekler):
        perdeler[i, : len(e)] = torch.tensor(e)
    maske = (perdeler != DOLGU).unsqueeze(1).unsqueeze(2)
    return perdeler, maske, torch.tensor([m for _, m in ornekler])


class DikkatKatmani(nn.Module):
    def __init__(self, boyut, kafa):
        super().__init__()
        self.kafa = kafa
        self.sorgu = nn.Linear(boyut, boyut)
        self.anahtar = nn.Linear(boyut, boyut)
        self.deger = nn.Linear(boyut, boyut)
        self.cikis = nn.Linear(boyut, boyut)

    def bol(self, x):
        b, n, d = x.shape
        return x.view(b, n, self.kafa, d // self.kafa).transpose(1, 2)

    def forward(self, x, maske):
        q, k, v = self.bol(self.sorgu(x)), self.bol(self.anahtar(x)), self.bol(self.deger(x))
        skor = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
        skor = skor.masked_fill(maske == 0, torch.finfo(skor.dtype).min)
        agirlik = F.softmax(skor, dim=-1)
        y = (agirlik @ v).transpose(1, 2).reshape(x.shape)
        return self.cikis(y)


class MakamSiniflandirici(nn.Module):
    def __init__(self, a):
        super().__init__()
        d = a["gizli_boyut"]
        self.gomme = nn.Embedding(a["koma_sayisi"], d, padding_idx=DOLGU)
        self.konum = nn.Embedding(a["azami_uzunluk"], d)
        self.dikkatler = nn.ModuleList([DikkatKatmani(d, a["kafa_sayisi"]) for _ in range(a["katman_sayisi"])])
        self.normlar = nn.ModuleList([nn.LayerNorm(d) for _ in range(a["katman_sayisi"])])
        self.siniflandirici = nn.Linear(d, len(MAKAM_ADLARI))

    def forward(self, perdeler, maske):
        h = self.gomme(perdeler) + self.konum(torch.arange(perdeler.shape[1]))
        for dikkat, norm in zip(self.dikkatler, self.normlar):
            h = norm(h + dikkat(h, maske))
        gecerli = (perdeler != DOLGU).unsqueeze(-1).float()
        return self.siniflandirici((h * gecerli).sum(1) / gecerli.sum(1))


def egit_ve_degerlendir():
    torch.manual_seed(0)
    rng = random.Random(0)
    model = MakamSiniflandirici(AYARLAR)
    eniyilestirici = torch.optim.Adam(model.parameters(), lr=AYARLAR["ogrenme_orani"])
    for adim in range(AYARLAR["adim"]):
        perdeler, maske, etiket = toplu_hazirla([ezgi_uret(rng) for _ in range(32)])
        kayip = F.cross_entropy(model(perdeler, maske), etiket)
        eniyilestirici.zero_grad()
        kayip.backward()
        eniyilestirici.step()
        if adim % 50 == 0:
            print(f"adım {adim}: kayıp {kayip.item():.3f}")
    perdeler, maske, etiket = toplu_hazirla([ezgi_uret(random.Random(4242 + i)) for i in range(300)])
    with torch.no_grad():
        dogruluk = (model(perdeler, maske).argmax(-1) == etiket).float().mean().item()
    print(f"doğrulama başarımı: {dogruluk:.3f}")


if __name__ == "__main__":
    egit_ve_degerlendir()
