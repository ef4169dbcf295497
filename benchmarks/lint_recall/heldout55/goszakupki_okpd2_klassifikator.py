"""Классификатор закупок по разделам ОКПД2 по тексту извещения (44-ФЗ).

Название объекта закупки токенизируется собственным словарным токенизатором,
кодировщик — nn.TransformerEncoder, сверху пулинг вниманием по токенам.
Параметры — в словаре ``NASTROYKI``; данные в демонстрации синтетические.

Source: seed masked_fill_inplace.txt; seed self_attention_mask_guide.txt §7 Q1; conventions.md §1
"""

import random

import torch
import torch.nn as nn
import torch.nn.functional as F

NASTROYKI = {
    "razmer_slovarya": 120,
    "razmernost": 64,
    "golovy": 4,
    "sloi": 2,
    "maks_dlina": 24,
    "skorost_obucheniya": 2e-3,
    "shagi": 200,
}

RAZDELY = {
    "C": ["лекарственные", "препараты", "таблетки", "раствор", "ампулы"],
    "F": ["ремонт", "кровли", "фасада", "капитальный", "здания"],
    "J": ["программное", "обеспечение", "лицензии", "сопровождение", "системы"],
    "Q": ["медицинские", "услуги", "обследование", "диагностика", "пациентов"],
}
OBSHCHIE = ["поставка", "для", "нужд", "учреждения", "на", "год", "оказание", "выполнение", "работ", "муниципального"]


class TokenizatorZakupok:
    def __init__(self):
        slova = sorted({s for v in RAZDELY.values() for s in v} | set(OBSHCHIE))
        self.slovar = {"[PAD]": 0, "[UNK]": 1}
        for s in slova:
            self.slovar[s] = len(self.slovar)

    def __call__(self, teksty):
        ids = [[self.slovar.get(s, 1) for s in t.lower().split()][: NASTROYKI["maks_dlina"]] for t in teksty]
        dlina = max(len(x) for x in ids)
        input_ids = torch.tensor([x + [0] * (dlina - len(x)) for x in ids])
        attention_mask = torch.tensor([[1] * len(x) + [0] * (dlina - len(x)) for x in ids])
        return {"input_ids": input_ids, "attention_mask": attention_mask}


def sozdat_izveshchenie(rng):
    kod = rng.choice(sorted(RAZDELY))
    slova = rng.sample(OBSHCHIE, rng.randint(2, 8)) + rng.sample(RAZDELY[kod], 2)
    rng.shuffle(slova)
    return " ".join(slova), kod


class PulingVnimaniya(nn.Module):
    def __init__(self, razmernost):
        super().__init__()
        self.proekciya = nn.Linear(razmernost, 1)

    def forward(self, h, maska):
        ochki = self.proekciya(h).squeeze(-1)
        ochki = ochki.masked_fill(maska.bool(), float("-inf"))  # expect: MC519 pooling
        vesa = torch.softmax(ochki, dim=-1)
        return torch.einsum("bn,bnd->bd", vesa, h)


class KlassifikatorOKPD2(nn.Module):
    def __init__(self, n, chislo_klassov):
        super().__init__()
        d = n["razmernost"]
        self.vlozheniya = nn.Embedding(n["razmer_slovarya"], d, padding_idx=0)
        self.poziciya = nn.Embedding(n["maks_dlina"], d)
        sloy = nn.TransformerEncoderLayer(d, n["golovy"], 2 * d, dropout=0.1, batch_first=True)
        self.koder = nn.TransformerEncoder(sloy, n["sloi"], enable_nested_tensor=False)
        self.puling = PulingVnimaniya(d)
        self.golova = nn.Linear(d, chislo_klassov)

    def forward(self, input_ids, attention_mask):
        h = self.vlozheniya(input_ids) + self.poziciya(torch.arange(input_ids.shape[1]))
        h = self.koder(h, src_key_padding_mask=attention_mask == 0)
        return self.golova(self.puling(h, attention_mask))


def obuchit(model, tokenizator, klassy, rng):
    opt = torch.optim.AdamW(model.parameters(), lr=NASTROYKI["skorost_obucheniya"])
    for shag in range(NASTROYKI["shagi"]):
        model.train()
        partiya = [sozdat_izveshchenie(rng) for _ in range(32)]
        vkhod = tokenizator([t for t, _ in partiya])
        metki = torch.tensor([klassy.index(k) for _, k in partiya])
        poteri = F.cross_entropy(model(**vkhod), metki)
        opt.zero_grad()
        poteri.backward()
        opt.step()
        if shag % 50 == 0:
            print(f"шаг {shag}: потери {poteri.item():.3f}")


@torch.no_grad()
def tochnost(model, tokenizator, klassy, rng):
    model.eval()
    partiya = [sozdat_izveshchenie(rng) for _ in range(200)]
    vkhod = tokenizator([t for t, _ in partiya])
    prognoz = model(**vkhod).argmax(-1)
    return (prognoz == torch.tensor([klassy.index(k) for _, k in partiya])).float().mean().item()


if __name__ == "__main__":
    torch.manual_seed(0)
    klassy = sorted(RAZDELY)
    tokenizator = TokenizatorZakupok()
    model = KlassifikatorOKPD2(NASTROYKI, len(klassy))
    obuchit(model, tokenizator, klassy, random.Random(0))
    print(f"точность на отложенной выборке: {tochnost(model, tokenizator, klassy, random.Random(5)):.3f}")
