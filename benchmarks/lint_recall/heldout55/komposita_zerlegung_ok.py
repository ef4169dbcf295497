"""Zerlegung deutscher Komposita auf Zeichenebene (Seq2Seq mit nn.Transformer).

Eingabe ist das Kompositum als Zeichenfolge (z. B. ``donaudampfschiff``), Ausgabe dieselbe
Zeichenfolge mit ``+`` an den Fugen (``donau+dampf+schiff``). Fugenelemente wie ``s`` oder
``en`` bleiben am Erstglied. Hyperparameter stehen im Wörterbuch ``EINSTELLUNGEN``;
Trainingsdaten werden aus einer kleinen Lexemliste gebildet.

Source: pytorch/pytorch#29546 (conventions.md §3 Nr. 9); rasbt/LLMs-from-scratch#1061 (§3 Nr. 14); seed self_attention_mask_guide.txt §3
"""

import random

import torch
import torch.nn as nn
import torch.nn.functional as F

EINSTELLUNGEN = {
    "modell_dim": 64,
    "koepfe": 4,
    "schichten": 2,
    "max_laenge": 40,
    "lernrate": 1e-3,
    "schritte": 300,
    "stapel": 32,
}
LEXEME = ["donau", "dampf", "schiff", "haus", "tuer", "schluessel", "kinder", "garten", "apfel",
          "baum", "wasser", "flasche", "hand", "schuh", "zeit", "schrift", "bahn", "hof", "rad",
          "arbeits", "amts", "gerichts", "welt", "meister", "schaft", "stadt", "plan", "wetter"]
ZEICHEN = ["<pad>", "<bos>", "<eos>", "+"] + sorted({z for w in LEXEME for z in w})
ZI = {z: i for i, z in enumerate(ZEICHEN)}
PAD, BOS, EOS = 0, 1, 2


def kodieren(text):
    return [ZI[z] for z in text]


def beispiel(rng):
    teile = rng.sample(LEXEME, rng.randint(2, 3))
    return "".join(teile), "+".join(teile)


def stapel_bauen(paare):
    def auffuellen(folgen):
        n = max(len(f) for f in folgen)
        return torch.tensor([f + [PAD] * (n - len(f)) for f in folgen])

    quelle = auffuellen([kodieren(q) for q, _ in paare])
    ziel = auffuellen([[BOS] + kodieren(z) + [EOS] for _, z in paare])
    return quelle, ziel


class Zerleger(nn.Module):
    def __init__(self, e):
        super().__init__()
        d = e["modell_dim"]
        self.einbettung = nn.Embedding(len(ZEICHEN), d, padding_idx=PAD)
        self.position = nn.Embedding(e["max_laenge"], d)
        self.transformer = nn.Transformer(d, e["koepfe"], e["schichten"], e["schichten"], 2 * d,
                                          dropout=0.0, batch_first=True)
        self.ausgabe = nn.Linear(d, len(ZEICHEN))

    @staticmethod
    def kausale_maske(n, geraet):
        return torch.triu(torch.ones(n, n, dtype=torch.bool, device=geraet), diagonal=1)

    def einbetten(self, ids):
        return self.einbettung(ids) + self.position(torch.arange(ids.shape[1], device=ids.device))

    def forward(self, quelle, ziel_ein):
        maske = self.kausale_maske(ziel_ein.shape[1], ziel_ein.device)
        h = self.transformer(self.einbetten(quelle), self.einbetten(ziel_ein), tgt_mask=maske,
                             src_key_padding_mask=quelle == PAD, tgt_key_padding_mask=ziel_ein == PAD,
                             memory_key_padding_mask=quelle == PAD)
        return self.ausgabe(h)

    @torch.no_grad()
    def zerlegen(self, wort):
        quelle = torch.tensor([kodieren(wort)])
        ausgabe = [BOS]
        for _ in range(EINSTELLUNGEN["max_laenge"] - 1):
            logits = self(quelle, torch.tensor([ausgabe]))
            naechstes = int(logits[0, -1].argmax())
            if naechstes == EOS:
                break
            ausgabe.append(naechstes)
        return "".join(ZEICHEN[i] for i in ausgabe[1:])


def trainieren():
    torch.manual_seed(0)
    rng = random.Random(0)
    modell = Zerleger(EINSTELLUNGEN)
    opt = torch.optim.Adam(modell.parameters(), lr=EINSTELLUNGEN["lernrate"])
    for schritt in range(EINSTELLUNGEN["schritte"]):
        modell.train()
        quelle, ziel = stapel_bauen([beispiel(rng) for _ in range(EINSTELLUNGEN["stapel"])])
        logits = modell(quelle, ziel[:, :-1])
        verlust = F.cross_entropy(logits.reshape(-1, len(ZEICHEN)), ziel[:, 1:].reshape(-1), ignore_index=PAD)
        opt.zero_grad()
        verlust.backward()
        opt.step()
        if schritt % 100 == 0:
            print(f"Schritt {schritt}: Verlust {verlust.item():.3f}")
    return modell


if __name__ == "__main__":
    modell = trainieren()
    modell.eval()
    test = [beispiel(random.Random(9_000 + i)) for i in range(40)]
    treffer = sum(modell.zerlegen(w) == z for w, z in test)
    print(f"exakte Zerlegungen: {treffer}/{len(test)}")
    print("donaudampfschiff ->", modell.zerlegen("donaudampfschiff"))
