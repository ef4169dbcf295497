"""Win probability of a Dota 2 captains-mode draft, served as a Gradio app.

Ten picks and a [CLS] token: the first encoder layers let each hero see only its own team (lane
synergies), the later ones see the whole match; open slots use the `(open)` hero so a draft can
be scored while it is being picked. `python dota_draft_gradio.py` trains on simulated matches if
no checkpoint is found and launches the app.

Source: seed self_attention_mask_guide.txt (section 6).
"""

import functools
import os
import random

import gradio as gr
import torch
import torch.nn as nn
import torch.nn.functional as F

HEROES = ["Anti-Mage", "Axe", "Bane", "Bristleback", "Crystal Maiden", "Dazzle", "Earthshaker", "Enigma", "Invoker",
          "Juggernaut", "Lina", "Lion", "Luna", "Mirana", "Phantom Assassin", "Pudge", "Queen of Pain", "Rubick",
          "Shadow Fiend", "Slark", "Sniper", "Spectre", "Storm Spirit", "Sven", "Tidehunter", "Tiny", "Ursa",
          "Viper", "Witch Doctor", "Zeus"]
OPEN = 0
TEAM_SIZE = 5
CHECKPOINT = "draft_model.pt"


@functools.lru_cache(maxsize=None)
def team_block_mask(team_size: int) -> torch.Tensor:
    n = 1 + 2 * team_size
    mask = torch.full((n, n), float("-inf"))
    mask[:, 0] = 0.0
    for start in (1, 1 + team_size):
        mask[start:start + team_size, start:start + team_size] = 0.0
    return mask


class DraftModel(nn.Module):
    def __init__(self, n_heroes=len(HEROES), d_model=64, n_heads=4, team_layers=2, match_layers=2):
        super().__init__()
        self.hero = nn.Embedding(n_heroes + 1, d_model)
        self.side = nn.Embedding(3, d_model)
        self.cls = nn.Parameter(torch.zeros(1, 1, d_model))
        self.register_buffer("side_ids", torch.tensor([0] + [1] * TEAM_SIZE + [2] * TEAM_SIZE))

        def layer():
            return nn.TransformerEncoderLayer(d_model, n_heads, 2 * d_model, dropout=0.1, batch_first=True, norm_first=True)

        self.team_encoder = nn.TransformerEncoder(layer(), team_layers, enable_nested_tensor=False)
        self.match_encoder = nn.TransformerEncoder(layer(), match_layers, enable_nested_tensor=False)
        self.head = nn.Linear(d_model, 1)

    def forward(self, radiant, dire):
        b = radiant.size(0)
        x = torch.cat([self.cls.expand(b, -1, -1), self.hero(radiant), self.hero(dire)], dim=1) + self.side(self.side_ids)
        x = self.team_encoder(x, mask=team_block_mask(radiant.size(1)).to(x.device))
        x = self.match_encoder(x)
        return self.head(x[:, 0]).squeeze(-1)


def simulate_matches(n, seed=0):
    g = torch.Generator().manual_seed(1234)
    strength = 0.3 * torch.randn(len(HEROES) + 1, generator=g)
    synergy = torch.randn(len(HEROES) + 1, len(HEROES) + 1, generator=g)
    synergy = 0.4 * (synergy + synergy.T)
    strength[OPEN] = 0.0
    synergy[OPEN] = synergy[:, OPEN] = 0.0
    rng = random.Random(seed)
    radiant, dire, wins = [], [], []
    for _ in range(n):
        picks = [h + 1 for h in rng.sample(range(len(HEROES)), 2 * TEAM_SIZE)]
        r, d = torch.tensor(picks[:TEAM_SIZE]), torch.tensor(picks[TEAM_SIZE:])
        score = strength[r].sum() - strength[d].sum() + synergy[r][:, r].triu(1).sum() - synergy[d][:, d].triu(1).sum()
        radiant.append(r)
        dire.append(d)
        wins.append(float(torch.rand(1, generator=g) < torch.sigmoid(score)))
    return torch.stack(radiant), torch.stack(dire), torch.tensor(wins)


def train_draft_model(epochs=30, batch_size=128, seed=0):
    torch.manual_seed(seed)
    radiant, dire, wins = simulate_matches(20000, seed)
    model = DraftModel()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01)
    for epoch in range(epochs):
        model.train()
        perm = torch.randperm(len(wins))
        for i in range(0, len(perm), batch_size):
            idx = perm[i:i + batch_size]
            loss = F.binary_cross_entropy_with_logits(model(radiant[idx], dire[idx]), wins[idx])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
    return model.eval()


def load_model():
    if os.path.exists(CHECKPOINT):
        model = DraftModel()
        model.load_state_dict(torch.load(CHECKPOINT, map_location="cpu"))
        return model.eval()
    model = train_draft_model()
    torch.save(model.state_dict(), CHECKPOINT)
    return model


def encode_picks(picks):
    ids = [HEROES.index(name) + 1 for name in (picks or [])][:TEAM_SIZE]
    return torch.tensor([ids + [OPEN] * (TEAM_SIZE - len(ids))])


def predict(radiant_picks, dire_picks):
    with torch.inference_mode():
        p = torch.sigmoid(MODEL(encode_picks(radiant_picks), encode_picks(dire_picks))).item()
    return {"Radiant": p, "Dire": 1.0 - p}


with gr.Blocks(title="Draft win probability") as demo:
    gr.Markdown("## Captains mode draft helper\nPick up to five heroes per side.")
    with gr.Row():
        radiant_box = gr.Dropdown(HEROES, multiselect=True, max_choices=TEAM_SIZE, label="Radiant picks")
        dire_box = gr.Dropdown(HEROES, multiselect=True, max_choices=TEAM_SIZE, label="Dire picks")
    verdict = gr.Label(num_top_classes=2, label="Win probability")
    gr.Button("Predict").click(predict, inputs=[radiant_box, dire_box], outputs=verdict)
    radiant_box.change(predict, inputs=[radiant_box, dire_box], outputs=verdict)
    dire_box.change(predict, inputs=[radiant_box, dire_box], outputs=verdict)


if __name__ == "__main__":
    MODEL = load_model()
    demo.queue().launch(server_name="0.0.0.0", server_port=7860)
