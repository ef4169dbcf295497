"""Prévision d'épisodes de mortalité des huîtres creuses à partir des sondes des parcs.

Chaque parc envoie une série journalière (température, salinité, oxygène dissous,
chlorophylle a) de longueur variable ; le modèle prédit un épisode de mortalité dans les
sept jours. L'entraînement se fait en float32, l'inférence sur la passerelle du laboratoire
côtier en bfloat16 (clé ``precision_inference`` de la configuration ``PARAMETRES``).

Source: NVIDIA/apex#1052 et huggingface/lerobot PR #710 (conventions.md §3 points 18 et 19), §2.3
"""

import copy
import math
import random

import torch
import torch.nn as nn
import torch.nn.functional as F

PARAMETRES = {
    "nb_variables": 4,
    "dim_modele": 32,
    "nb_tetes": 4,
    "nb_couches": 2,
    "jours_max": 60,
    "taux_apprentissage": 3e-3,
    "iterations": 150,
    "precision_inference": torch.bfloat16,
}
VALEUR_MASQUEE = torch.finfo(torch.bfloat16).min


def serie_parc(rng):
    jours = rng.randint(15, PARAMETRES["jours_max"])
    temp = rng.uniform(12, 20)
    chaleur = 0
    serie = []
    for _ in range(jours):
        temp += rng.gauss(0.1, 0.5)
        chaleur = chaleur + 1 if temp > 19 else 0
        serie.append([temp, 33 + rng.gauss(0, 1), 7 - 0.1 * chaleur + rng.gauss(0, 0.3), rng.uniform(1, 5)])
    return serie, float(chaleur >= 5)


def assembler(lot):
    n = max(len(s) for s, _ in lot)
    x = torch.zeros(len(lot), n, PARAMETRES["nb_variables"])
    masque = torch.zeros(len(lot), n, dtype=torch.bool)
    for i, (s, _) in enumerate(lot):
        x[i, : len(s)] = torch.tensor(s)
        masque[i, : len(s)] = True
    return x, masque, torch.tensor([y for _, y in lot])


class AttentionSonde(nn.Module):
    def __init__(self, dim, tetes):
        super().__init__()
        self.tetes = tetes
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x, masque):
        b, n, d = x.shape
        q, k, v = self.qkv(x).view(b, n, 3, self.tetes, -1).permute(2, 0, 3, 1, 4)
        scores = q @ k.transpose(-2, -1) / math.sqrt(d // self.tetes)
        scores = scores.masked_fill(~masque[:, None, None, :], VALEUR_MASQUEE)
        poids = scores.softmax(dim=-1)
        return self.proj((poids @ v).transpose(1, 2).reshape(b, n, d))


class ModeleMortalite(nn.Module):
    def __init__(self, p):
        super().__init__()
        d = p["dim_modele"]
        self.normalisation = nn.LayerNorm(p["nb_variables"])
        self.entree = nn.Linear(p["nb_variables"], d)
        self.position = nn.Parameter(torch.randn(1, p["jours_max"], d) * 0.02)
        self.attentions = nn.ModuleList([AttentionSonde(d, p["nb_tetes"]) for _ in range(p["nb_couches"])])
        self.normes = nn.ModuleList([nn.LayerNorm(d) for _ in range(p["nb_couches"])])
        self.sortie = nn.Linear(d, 1)

    def forward(self, x, masque):
        h = self.entree(self.normalisation(x)) + self.position[:, : x.shape[1]]
        for attention, norme in zip(self.attentions, self.normes):
            h = norme(h + attention(h, masque))
        poids = masque.unsqueeze(-1).to(h.dtype)
        return self.sortie((h * poids).sum(1) / poids.sum(1)).squeeze(-1)


def entrainer(modele, rng):
    opt = torch.optim.Adam(modele.parameters(), lr=PARAMETRES["taux_apprentissage"])
    for it in range(PARAMETRES["iterations"]):
        x, masque, y = assembler([serie_parc(rng) for _ in range(32)])
        perte = F.binary_cross_entropy_with_logits(modele(x, masque), y)
        opt.zero_grad()
        perte.backward()
        opt.step()
        if it % 50 == 0:
            print(f"itération {it} : perte {perte.item():.3f}")


@torch.no_grad()
def inference_passerelle(modele, lot):
    dtype = PARAMETRES["precision_inference"]
    copie = copy.deepcopy(modele).to(dtype).eval()
    x, masque, y = assembler(lot)
    proba = torch.sigmoid(copie(x.to(dtype), masque).float())
    return ((proba > 0.5).float() == y).float().mean().item()


if __name__ == "__main__":
    torch.manual_seed(0)
    modele = ModeleMortalite(PARAMETRES)
    entrainer(modele, random.Random(0))
    test = [serie_parc(random.Random(777 + i)) for i in range(200)]
    print(f"exactitude sur la passerelle ({PARAMETRES['precision_inference']}) : {inference_passerelle(modele, test):.3f}")
