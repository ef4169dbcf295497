"""Classificação do tipo de ato (portaria, decreto, resolução, extrato de contrato) em
publicações do Diário Oficial, com atenção local em janela deslizante para textos longos.

Os atos são tokenizados por palavra; cada lote é preenchido com ``PREENCHIMENTO`` até o
maior ato. Configuração no dicionário ``CONFIGURACAO`` (chaves em português, como no resto
do projeto).

Source: seed self_attention_mask_guide.txt §3 e §6; conventions.md §2.3
"""

import random

import torch
import torch.nn as nn
import torch.nn.functional as F

CONFIGURACAO = {
    "tamanho_vocabulario": 60,
    "dimensao": 48,
    "cabecas": 4,
    "camadas": 2,
    "janela": 3,
    "comprimento_maximo": 64,
    "taxa_aprendizado": 3e-3,
    "passos": 150,
}
PREENCHIMENTO = 0
TIPOS = ["portaria", "decreto", "resolucao", "extrato"]


def mascara_janela_local(n, janela, dispositivo):
    pos = torch.arange(n, device=dispositivo)
    fora = ((pos[None, :] - pos[:, None]).abs() > janela).float()
    return torch.zeros(n, n, device=dispositivo).masked_fill(fora.bool(), float("-inf"))


class AtencaoLocal(nn.Module):
    def __init__(self, dimensao, cabecas):
        super().__init__()
        self.cabecas = cabecas
        self.entrada = nn.Linear(dimensao, 3 * dimensao)
        self.saida = nn.Linear(dimensao, dimensao)

    def forward(self, x, vies):
        b, n, d = x.shape
        q, k, v = self.entrada(x).view(b, n, 3, self.cabecas, -1).permute(2, 0, 3, 1, 4)
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=vies)
        return self.saida(y.transpose(1, 2).reshape(b, n, d))


class BlocoAto(nn.Module):
    def __init__(self, dimensao, cabecas):
        super().__init__()
        self.norma1 = nn.LayerNorm(dimensao)
        self.atencao = AtencaoLocal(dimensao, cabecas)
        self.norma2 = nn.LayerNorm(dimensao)
        self.mlp = nn.Sequential(nn.Linear(dimensao, 2 * dimensao), nn.ReLU(), nn.Linear(2 * dimensao, dimensao))

    def forward(self, x, vies):
        x = x + self.atencao(self.norma1(x), vies)
        return x + self.mlp(self.norma2(x))


class ClassificadorAto(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        self.incorporacao = nn.Embedding(cfg["tamanho_vocabulario"], cfg["dimensao"], padding_idx=PREENCHIMENTO)
        self.posicao = nn.Embedding(cfg["comprimento_maximo"], cfg["dimensao"])
        self.blocos = nn.ModuleList([BlocoAto(cfg["dimensao"], cfg["cabecas"]) for _ in range(cfg["camadas"])])
        self.cabeca = nn.Linear(cfg["dimensao"], len(TIPOS))

    def forward(self, tokens):
        n = tokens.shape[1]
        valido = tokens != PREENCHIMENTO
        local = mascara_janela_local(n, self.cfg["janela"], tokens.device)
        preench = torch.zeros(valido.shape, device=tokens.device).masked_fill(~valido, float("-inf"))
        vies = local[None, None] + preench[:, None, None, :]
        h = self.incorporacao(tokens) + self.posicao(torch.arange(n, device=tokens.device))
        for bloco in self.blocos:
            h = bloco(h, vies)
        peso = valido.unsqueeze(-1).float()
        return self.cabeca((h * peso).sum(1) / peso.sum(1))


def gerar_ato(rng):
    tipo = rng.randrange(len(TIPOS))
    n = rng.randint(8, 40)
    palavras = [rng.randrange(10, 60) for _ in range(n)]
    inicio = rng.randrange(0, n - 2)
    palavras[inicio: inicio + 2] = [2 + 2 * tipo, 3 + 2 * tipo]
    return palavras, tipo


def montar_lote(atos):
    n = max(len(p) for p, _ in atos)
    tokens = torch.tensor([p + [PREENCHIMENTO] * (n - len(p)) for p, _ in atos])
    return tokens, torch.tensor([t for _, t in atos])


def treinar():
    torch.manual_seed(0)
    rng = random.Random(0)
    modelo = ClassificadorAto(CONFIGURACAO)
    otimizador = torch.optim.Adam(modelo.parameters(), lr=CONFIGURACAO["taxa_aprendizado"])
    for passo in range(CONFIGURACAO["passos"]):
        tokens, rotulos = montar_lote([gerar_ato(rng) for _ in range(32)])
        perda = F.cross_entropy(modelo(tokens), rotulos)
        otimizador.zero_grad()
        perda.backward()
        otimizador.step()
        if passo % 50 == 0:
            print(f"passo {passo}: perda {perda.item():.3f}")
    tokens, rotulos = montar_lote([gerar_ato(random.Random(10_000 + i)) for i in range(200)])
    with torch.no_grad():
        acuracia = (modelo(tokens).argmax(-1) == rotulos).float().mean().item()
    print(f"acurácia de validação: {acuracia:.3f}")


if __name__ == "__main__":
    treinar()
