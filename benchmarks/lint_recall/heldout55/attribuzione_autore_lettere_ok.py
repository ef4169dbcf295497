"""Attribuzione d'autore di lettere cinquecentesche (Machiavelli, Guicciardini, Bembo,
Aretino, Castiglione) a partire dalle parole funzionali, per il laboratorio di stilometria.

Le lettere trascritte sono ridotte a sequenze di parole funzionali e segni di interpunzione;
il modello è un piccolo encoder con attenzione scritta a mano e pooling medio. I lotti sono
riempiti con ``RIEMPITIVO`` fino alla lettera più lunga. Iperparametri nel dizionario
``IMPOSTAZIONI``; il corpus della dimostrazione è generato da profili sintetici.

Source: seed masked_fill_inplace.txt
"""

import math
import random

import torch
import torch.nn as nn
import torch.nn.functional as F

IMPOSTAZIONI = {
    "vocabolario": 40,
    "dimensione": 48,
    "teste": 4,
    "strati": 2,
    "lunghezza_massima": 48,
    "tasso_apprendimento": 2e-3,
    "passi": 200,
}
RIEMPITIVO = 0
AUTORI = ["machiavelli", "guicciardini", "bembo", "aretino", "castiglione"]


def profilo(indice_autore):
    gen = random.Random(100 + indice_autore)
    pesi = [gen.random() ** 3 for _ in range(IMPOSTAZIONI["vocabolario"] - 1)]
    return [p / sum(pesi) for p in pesi]


PROFILI = [profilo(i) for i in range(len(AUTORI))]


def lettera(rng):
    autore = rng.randrange(len(AUTORI))
    n = rng.randint(8, IMPOSTAZIONI["lunghezza_massima"])
    parole = rng.choices(range(1, IMPOSTAZIONI["vocabolario"]), weights=PROFILI[autore], k=n)
    return parole, autore


def collaziona(lettere):
    n = max(len(p) for p, _ in lettere)
    ids = torch.tensor([p + [RIEMPITIVO] * (n - len(p)) for p, _ in lettere])
    return ids, torch.tensor([a for _, a in lettere])


class AttenzioneStilometrica(nn.Module):
    def __init__(self, dimensione, teste):
        super().__init__()
        self.teste = teste
        self.scala = math.sqrt(dimensione // teste)
        self.proiezione = nn.Linear(dimensione, 3 * dimensione)
        self.uscita = nn.Linear(dimensione, dimensione)

    def forward(self, x, maschera):
        b, n, d = x.shape
        q, k, v = self.proiezione(x).view(b, n, 3, self.teste, d // self.teste).permute(2, 0, 3, 1, 4)
        punteggi = q @ k.transpose(-2, -1) / self.scala
        punteggi = punteggi.masked_fill(~maschera[:, None, None, :], float("-inf"))
        pesi = punteggi.softmax(dim=-1)
        return self.uscita((pesi @ v).transpose(1, 2).reshape(b, n, d))


class StratoEncoder(nn.Module):
    def __init__(self, dimensione, teste):
        super().__init__()
        self.attenzione = AttenzioneStilometrica(dimensione, teste)
        self.norma1 = nn.LayerNorm(dimensione)
        self.avanti = nn.Sequential(nn.Linear(dimensione, 2 * dimensione), nn.GELU(), nn.Linear(2 * dimensione, dimensione))
        self.norma2 = nn.LayerNorm(dimensione)

    def forward(self, x, maschera):
        x = x + self.attenzione(self.norma1(x), maschera)
        return x + self.avanti(self.norma2(x))


class AttributoreAutore(nn.Module):
    def __init__(self, imp):
        super().__init__()
        d = imp["dimensione"]
        self.incorporamento = nn.Embedding(imp["vocabolario"], d, padding_idx=RIEMPITIVO)
        self.strati = nn.ModuleList([StratoEncoder(d, imp["teste"]) for _ in range(imp["strati"])])
        self.classificatore = nn.Linear(d, len(AUTORI))

    def forward(self, ids):
        maschera = ids != RIEMPITIVO
        h = self.incorporamento(ids)
        for strato in self.strati:
            h = strato(h, maschera)
        peso = maschera.unsqueeze(-1).float()
        return self.classificatore((h * peso).sum(1) / peso.sum(1))


def addestra():
    torch.manual_seed(0)
    rng = random.Random(0)
    modello = AttributoreAutore(IMPOSTAZIONI)
    ottimizzatore = torch.optim.Adam(modello.parameters(), lr=IMPOSTAZIONI["tasso_apprendimento"])
    for passo in range(IMPOSTAZIONI["passi"]):
        ids, autori = collaziona([lettera(rng) for _ in range(32)])
        perdita = F.cross_entropy(modello(ids), autori)
        ottimizzatore.zero_grad()
        perdita.backward()
        ottimizzatore.step()
        if passo % 50 == 0:
            print(f"passo {passo}: perdita {perdita.item():.3f}")
    return modello


if __name__ == "__main__":
    modello = addestra()
    ids, autori = collaziona([lettera(random.Random(60_000 + i)) for i in range(300)])
    with torch.no_grad():
        accuratezza = (modello(ids).argmax(-1) == autori).float().mean().item()
    print(f"accuratezza di attribuzione: {accuratezza:.3f}")
