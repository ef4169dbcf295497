"""Prognoza stężenia metanu w rejonie ściany wydobywczej na kolejną godzinę.

Dane pochodzą z metanomierzy i anemometrów systemu gazometrii kopalni (CH4 %, prędkość
powietrza, odchylenie ciśnienia barometrycznego, postęp urabiania kombajnu), agregowane co 15 minut.
Okna mają różną długość, bo przerwy w transmisji ucinają zapis; krótsze okna są dopełniane
zerami, a ich długości trafiają do ``dlugosci``. Parametry w słowniku ``USTAWIENIA``.

Source: conventions.md §2.6, §5 pkt 6 i §1
"""

import math
import random

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset

USTAWIENIA = {
    "liczba_cech": 4,
    "wymiar": 32,
    "glowy": 4,
    "warstwy": 2,
    "okno": 16,
    "rozmiar_partii": 16,
    "wspolczynnik_uczenia": 3e-3,
    "epoki": 5,
}


class OknaMetanu(Dataset):
    def __init__(self, liczba, ziarno):
        rng = random.Random(ziarno)
        self.probki = []
        for _ in range(liczba):
            dl = rng.randint(4, USTAWIENIA["okno"])
            ch4 = rng.uniform(0.2, 0.8)
            wiersze = []
            for _ in range(dl):
                postep = rng.random()
                ch4 = max(0.0, ch4 + 0.15 * postep - 0.08 + rng.gauss(0, 0.03))
                wiersze.append([ch4, rng.uniform(1.5, 3.0), rng.gauss(0, 3), postep])
            self.probki.append((wiersze, ch4 + 0.1 * wiersze[-1][3]))

    def __len__(self):
        return len(self.probki)

    def __getitem__(self, i):
        return self.probki[i]


def zloz_partie(partia):
    x = torch.zeros(len(partia), USTAWIENIA["okno"], USTAWIENIA["liczba_cech"])
    for i, (w, _) in enumerate(partia):
        x[i, : len(w)] = torch.tensor(w)
    dlugosci = torch.tensor([len(w) for w, _ in partia])
    y = torch.tensor([c for _, c in partia])
    return x, dlugosci, y


class WarstwaUwagi(nn.Module):
    def __init__(self, wymiar, glowy):
        super().__init__()
        self.glowy = glowy
        self.qkv = nn.Linear(wymiar, 3 * wymiar)
        self.wyjscie = nn.Linear(wymiar, wymiar)
        self.norma = nn.LayerNorm(wymiar)

    def forward(self, x, maska):
        b, t, d = x.shape
        q, k, v = self.qkv(self.norma(x)).view(b, t, 3, self.glowy, d // self.glowy).permute(2, 0, 3, 1, 4)
        y = F.scaled_dot_product_attention(q, k, v, maska[:, None, None, :])
        return x + self.wyjscie(y.transpose(1, 2).reshape(b, t, d))


class PrognozaMetanu(nn.Module):
    def __init__(self, u):
        super().__init__()
        self.wejscie = nn.Linear(u["liczba_cech"], u["wymiar"])
        self.pozycja = nn.Parameter(torch.zeros(1, u["okno"], u["wymiar"]))
        self.warstwy = nn.ModuleList([WarstwaUwagi(u["wymiar"], u["glowy"]) for _ in range(u["warstwy"])])
        self.glowica = nn.Linear(u["wymiar"], 1)

    def forward(self, x, dlugosci):
        t = x.shape[1]
        maska = torch.arange(t, device=x.device)[None, :] < dlugosci[:, None]
        h = self.wejscie(x) + self.pozycja[:, :t]
        for warstwa in self.warstwy:
            h = warstwa(h, maska)
        ostatni = h[torch.arange(x.shape[0]), dlugosci - 1]
        return self.glowica(ostatni).squeeze(-1)


def trenuj():
    torch.manual_seed(0)
    ladowacz = DataLoader(OknaMetanu(640, 1), batch_size=USTAWIENIA["rozmiar_partii"], shuffle=True,
                          collate_fn=zloz_partie, drop_last=True)
    walidacja = DataLoader(OknaMetanu(160, 2), batch_size=USTAWIENIA["rozmiar_partii"],
                           collate_fn=zloz_partie, drop_last=True)
    model = PrognozaMetanu(USTAWIENIA)
    opt = torch.optim.Adam(model.parameters(), lr=USTAWIENIA["wspolczynnik_uczenia"])
    for epoka in range(USTAWIENIA["epoki"]):
        model.train()
        for x, dl, y in ladowacz:
            strata = F.mse_loss(model(x, dl), y)
            opt.zero_grad()
            strata.backward()
            opt.step()
        model.eval()
        with torch.no_grad():
            bledy = [F.mse_loss(model(x, dl), y).item() for x, dl, y in walidacja]
        print(f"epoka {epoka}: RMSE walidacja {math.sqrt(sum(bledy) / len(bledy)):.4f} % CH4")


if __name__ == "__main__":
    trenuj()
