"""برچسب‌زنی کسرهٔ اضافه در متن فارسی (تشخیص واژه‌هایی که کسرهٔ اضافه می‌گیرند).

در خط فارسی کسرهٔ اضافه معمولاً نوشته نمی‌شود؛ این مدل برای هر واژه پیش‌بینی می‌کند که
کسره می‌گیرد یا نه، تا در تبدیل نوشتار به گفتار (واج‌نگاری) استفاده شود. توجه خودی با
تابع کمکی ``tavajoh`` پیاده شده است. تنظیمات در دیکشنری ``TANZIMAT``؛ داده‌های نمونه مصنوعی‌اند.

Source: pytorch/pytorch#103749 و Biohub/esm#299 (conventions.md §3 بندهای 5 و 22)، §2.3
"""

import math
import random

import torch
import torch.nn as nn
import torch.nn.functional as F

TANZIMAT = {
    "andaze_vajegan": 90,
    "bod": 48,
    "tedad_sar": 4,
    "tedad_laye": 2,
    "tool_bishine": 30,
    "nerkh_yadgiri": 2e-3,
    "gam": 200,
}
POR_KONANDE = 0
NADIDE = -100
ESM = list(range(1, 40))
SEFAT = list(range(40, 60))
HARF_EZAFE = list(range(60, 90))


def jomle_besaz(rng):
    n = rng.randint(3, TANZIMAT["tool_bishine"])
    vajeha = [rng.choice(ESM + SEFAT + HARF_EZAFE) for _ in range(n)]
    barchasb = []
    for i, v in enumerate(vajeha):
        baadi = vajeha[i + 1] if i + 1 < n else None
        barchasb.append(int(v in ESM and baadi is not None and (baadi in SEFAT or baadi in ESM)))
    return vajeha, barchasb


def daste_besaz(jomleha):
    n = max(len(v) for v, _ in jomleha)
    ids = torch.full((len(jomleha), n), POR_KONANDE, dtype=torch.long)
    hadaf = torch.full((len(jomleha), n), NADIDE, dtype=torch.long)
    for i, (v, b) in enumerate(jomleha):
        ids[i, : len(v)] = torch.tensor(v)
        hadaf[i, : len(b)] = torch.tensor(b)
    return ids, hadaf


def tavajoh(q, k, v, maske_joft):
    emtiaz = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    emtiaz = emtiaz.masked_fill(~maske_joft[:, None], torch.finfo(emtiaz.dtype).min)
    vazn = torch.softmax(emtiaz, dim=-1)
    return vazn @ v


class LayeTavajoh(nn.Module):
    def __init__(self, bod, sar):
        super().__init__()
        self.sar = sar
        self.qkv = nn.Linear(bod, 3 * bod)
        self.khoruji = nn.Linear(bod, bod)
        self.norm1 = nn.LayerNorm(bod)
        self.pishkhor = nn.Sequential(nn.Linear(bod, 2 * bod), nn.ReLU(), nn.Linear(2 * bod, bod))
        self.norm2 = nn.LayerNorm(bod)

    def forward(self, x, maske_joft):
        b, n, d = x.shape
        q, k, v = self.qkv(x).view(b, n, 3, self.sar, d // self.sar).permute(2, 0, 3, 1, 4)
        y = tavajoh(q, k, v, maske_joft).transpose(1, 2).reshape(b, n, d)
        x = self.norm1(x + self.khoruji(y))
        return self.norm2(x + self.pishkhor(x))


class BarchasbzanEzafe(nn.Module):
    def __init__(self, t):
        super().__init__()
        self.jasazi = nn.Embedding(t["andaze_vajegan"], t["bod"], padding_idx=POR_KONANDE)
        self.mogheiyat = nn.Embedding(t["tool_bishine"], t["bod"])
        self.layeha = nn.ModuleList([LayeTavajoh(t["bod"], t["tedad_sar"]) for _ in range(t["tedad_laye"])])
        self.sar_barchasb = nn.Linear(t["bod"], 2)

    def forward(self, ids):
        maske = ids != POR_KONANDE
        maske_joft = maske[:, :, None] & maske[:, None, :]
        h = self.jasazi(ids) + self.mogheiyat(torch.arange(ids.shape[1]))
        for laye in self.layeha:
            h = laye(h, maske_joft)
        return self.sar_barchasb(h)


def amuzesh():
    torch.manual_seed(0)
    rng = random.Random(0)
    model = BarchasbzanEzafe(TANZIMAT)
    behine_saz = torch.optim.Adam(model.parameters(), lr=TANZIMAT["nerkh_yadgiri"])
    for gam in range(TANZIMAT["gam"]):
        ids, hadaf = daste_besaz([jomle_besaz(rng) for _ in range(32)])
        zian = F.cross_entropy(model(ids).reshape(-1, 2), hadaf.reshape(-1), ignore_index=NADIDE)
        behine_saz.zero_grad()
        zian.backward()
        behine_saz.step()
        if gam % 50 == 0:
            print(f"گام {gam}: زیان {zian.item():.3f}")
    ids, hadaf = daste_besaz([jomle_besaz(random.Random(8_000 + i)) for i in range(200)])
    with torch.no_grad():
        pishbini = model(ids).argmax(-1)
    motabar = hadaf != NADIDE
    print(f"دقت برچسب اضافه: {(pishbini[motabar] == hadaf[motabar]).float().mean().item():.3f}")


if __name__ == "__main__":
    amuzesh()
