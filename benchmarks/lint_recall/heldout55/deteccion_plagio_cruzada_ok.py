"""Detección de plagio en trabajos universitarios mediante atención cruzada
entre el párrafo sospechoso y el párrafo fuente candidato.

Cada par (sospechoso, fuente) se tokeniza por separado; el modelo alinea cada palabra del
párrafo sospechoso con la fuente y clasifica el par como plagio o no plagio.
Los hiperparámetros están en ``PARAMETROS``; el corpus de la demostración es sintético.

Source: seed self_attention_mask_guide.txt §3 y §7 Q3; pytorch/pytorch#103963 (conventions.md §3 punto 6)
"""

import math
import random

import torch
import torch.nn as nn
import torch.nn.functional as F

PARAMETROS = {
    "vocabulario": 200,
    "dimension": 64,
    "longitud_maxima": 30,
    "tasa": 2e-3,
    "pasos": 250,
    "lote": 32,
}
RELLENO = 0


def tokenizar_par(pares):
    def rellenar(secuencias):
        n = max(len(s) for s in secuencias)
        ids = torch.tensor([s + [RELLENO] * (n - len(s)) for s in secuencias])
        return ids, (ids != RELLENO).long()

    ids_s, mascara_s = rellenar([p[0] for p in pares])
    ids_f, mascara_f = rellenar([p[1] for p in pares])
    return {"ids_sospechoso": ids_s, "mascara_sospechoso": mascara_s,
            "ids_fuente": ids_f, "mascara_fuente": mascara_f}


class DetectorPlagio(nn.Module):
    def __init__(self, p):
        super().__init__()
        d = p["dimension"]
        self.incrustacion = nn.Embedding(p["vocabulario"], d, padding_idx=RELLENO)
        self.contexto = nn.Sequential(nn.Linear(d, d), nn.Tanh(), nn.Linear(d, d))
        self.proyeccion_q = nn.Linear(d, d)
        self.proyeccion_k = nn.Linear(d, d)
        self.comparador = nn.Sequential(nn.Linear(4 * d, d), nn.ReLU(), nn.Linear(d, 1))
        self.escala = math.sqrt(d)

    def codificar(self, ids):
        return self.contexto(self.incrustacion(ids))

    def forward(self, ids_sospechoso, mascara_sospechoso, ids_fuente, mascara_fuente):
        hs = self.codificar(ids_sospechoso)
        hf = self.codificar(ids_fuente)

        def atender(consulta, claves, mascara_claves):
            puntuaciones = self.proyeccion_q(consulta) @ self.proyeccion_k(claves).transpose(1, 2) / self.escala
            puntuaciones = puntuaciones.masked_fill(mascara_claves[:, None, :] == 0, float("-inf"))
            return torch.softmax(puntuaciones, dim=-1) @ claves

        alineado = atender(hs, hf, mascara_fuente)
        rasgos = torch.cat([hs, alineado, hs * alineado, (hs - alineado).abs()], dim=-1)
        logit_palabra = self.comparador(rasgos).squeeze(-1)
        logit_palabra = logit_palabra.masked_fill(mascara_sospechoso == 0, float("-inf"))
        return torch.logsumexp(logit_palabra, dim=-1) - torch.log(mascara_sospechoso.sum(-1).float())


def generar_par(rng):
    n = rng.randint(5, PARAMETROS["longitud_maxima"])
    fuente = [rng.randrange(1, PARAMETROS["vocabulario"]) for _ in range(n)]
    plagio = rng.random() < 0.5
    if plagio:
        ini = rng.randrange(0, max(1, n - 4))
        sospechoso = fuente[ini: ini + 4] + [rng.randrange(1, 200) for _ in range(rng.randint(1, 8))]
    else:
        sospechoso = [rng.randrange(1, PARAMETROS["vocabulario"]) for _ in range(rng.randint(5, 12))]
    rng.shuffle(sospechoso)
    texto_extra = [rng.randrange(1, 200) for _ in range(rng.randint(0, 10))]
    return (sospechoso, fuente + texto_extra), float(plagio)


def entrenar_y_evaluar():
    torch.manual_seed(0)
    rng = random.Random(0)
    modelo = DetectorPlagio(PARAMETROS)
    opt = torch.optim.Adam(modelo.parameters(), lr=PARAMETROS["tasa"])
    for paso in range(PARAMETROS["pasos"]):
        ejemplos = [generar_par(rng) for _ in range(PARAMETROS["lote"])]
        entrada = tokenizar_par([e for e, _ in ejemplos])
        etiquetas = torch.tensor([y for _, y in ejemplos])
        perdida = F.binary_cross_entropy_with_logits(modelo(**entrada), etiquetas)
        opt.zero_grad()
        perdida.backward()
        opt.step()
        if paso % 50 == 0:
            print(f"paso {paso}: pérdida {perdida.item():.3f}")
    prueba = [generar_par(random.Random(50_000 + i)) for i in range(300)]
    with torch.no_grad():
        puntaje = modelo(**tokenizar_par([e for e, _ in prueba]))
    exactitud = ((puntaje > 0).float() == torch.tensor([y for _, y in prueba])).float().mean().item()
    print(f"exactitud en prueba: {exactitud:.3f}")


if __name__ == "__main__":
    entrenar_y_evaluar()
