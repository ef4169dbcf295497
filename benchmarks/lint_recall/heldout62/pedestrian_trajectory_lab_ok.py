"""Autonomous Driving Systems, Lab 4: pedestrian trajectory prediction with social attention.

ETH/UCY-style scenes: every scene has a variable number of pedestrians (at most
``MAX_AGENTS``), each observed for 8 frames (3.2 s) and to be predicted for the next
12 frames (4.8 s). The lab's model encodes each pedestrian's past displacements
with an MLP, lets pedestrians of the same scene exchange information with
multi-head attention ("social attention"), and decodes 12 future offsets. Scenes
are padded to ``MAX_AGENTS`` and carry the number of real pedestrians. We report
ADE/FDE in metres against a constant-velocity baseline, as in the lecture.

Source: conventions.md §2.6, §1 (SDPA row), §5 item 6
"""
import math
import random

import torch
import torch.nn as nn
import torch.nn.functional as F

OBS, PRED = 8, 12
MAX_AGENTS = 8
BATCH_SCENES = 8
DT = 0.4


def make_scene(rng):
    n = rng.randint(2, MAX_AGENTS)
    flow = rng.uniform(0, 2 * math.pi)
    turn = rng.uniform(-0.6, 0.6)
    rows = []
    for i in range(n):
        heading = flow + rng.gauss(0, 0.3)
        speed = rng.uniform(0.8, 1.6)
        x, y, row = rng.uniform(-5, 5), rng.uniform(-5, 5), []
        for t in range(OBS + PRED):
            if t == OBS:
                heading += turn
            x, y = x + DT * speed * math.cos(heading), y + DT * speed * math.sin(heading)
            row.append((x + rng.gauss(0, 0.02), y + rng.gauss(0, 0.02)))
        rows.append(row)
    traj = torch.zeros(MAX_AGENTS, OBS + PRED, 2)
    traj[:n] = torch.tensor(rows)
    return traj, n


def batches(scenes, shuffle, rng):
    order = list(range(len(scenes)))
    if shuffle:
        rng.shuffle(order)
    for s in range(0, len(order) - BATCH_SCENES + 1, BATCH_SCENES):
        chunk = [scenes[i] for i in order[s : s + BATCH_SCENES]]
        traj = torch.stack([t for t, _ in chunk])
        num_agents = torch.tensor([n for _, n in chunk])
        yield traj[:, :, :OBS], traj[:, :, OBS:], num_agents


class SocialAttention(nn.Module):
    def __init__(self, d_model, n_heads):
        super().__init__()
        self.n_heads = n_heads
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.out = nn.Linear(d_model, d_model)
        self.norm = nn.LayerNorm(d_model)


class SocialTransformer(nn.Module):
    def __init__(self, d_model=64, n_heads=4, n_layers=2):
        super().__init__()
        self.encoder = nn.Sequential(nn.Linear((OBS - 1) * 2 + 2, d_model), nn.ReLU(), nn.Linear(d_model, d_model))
        self.social = nn.ModuleList(SocialAttention(d_model, n_heads) for _ in range(n_layers))
        self.decoder = nn.Sequential(nn.Linear(d_model, d_model), nn.ReLU(), nn.Linear(d_model, PRED * 2))

    def forward(self, past, num_agents):
        B, N = past.shape[:2]
        agent_keep = torch.arange(N, device=past.device)[None, :] < num_agents[:, None]
        origin = past[:, :, -1:]
        disp = past[:, :, 1:] - past[:, :, :-1]
        centre = (origin[:, :, 0] * agent_keep[..., None]).sum(1, keepdim=True) / num_agents[:, None, None]
        h = self.encoder(torch.cat([disp.flatten(2), origin[:, :, 0] - centre], dim=-1))
        for layer in self.social:
            q, k, v = layer.qkv(layer.norm(h)).view(B, N, 3, layer.n_heads, -1).permute(2, 0, 3, 1, 4)
            a = F.scaled_dot_product_attention(q, k, v, attn_mask=agent_keep[:, None, None, :])
            h = h + layer.out(a.transpose(1, 2).reshape(B, N, -1))
        offsets = self.decoder(h).view(B, N, PRED, 2).cumsum(dim=2)
        return origin + offsets


def constant_velocity(past):
    v = past[:, :, -1:] - past[:, :, -2:-1]
    steps = torch.arange(1, PRED + 1, dtype=past.dtype)[None, None, :, None]
    return past[:, :, -1:] + steps * v


def ade_fde(pred, future, num_agents):
    keep = torch.arange(pred.size(1))[None, :] < num_agents[:, None]
    err = (pred - future).norm(dim=-1)[keep]
    return err.mean().item(), err[:, -1].mean().item()


def main():
    rng = random.Random(0)
    torch.manual_seed(0)
    train = [make_scene(rng) for _ in range(480)]
    test = [make_scene(rng) for _ in range(96)]
    past, future, num_agents = next(batches(train, False, rng))
    print("past", tuple(past.shape), "future", tuple(future.shape), "agents per scene", num_agents.tolist())
    assert past.shape == (BATCH_SCENES, MAX_AGENTS, OBS, 2)

    model = SocialTransformer()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    for epoch in range(10):
        model.train()
        total, count = 0.0, 0
        for past, future, num_agents in batches(train, True, rng):
            keep = torch.arange(MAX_AGENTS)[None, :] < num_agents[:, None]
            pred = model(past, num_agents)
            loss = F.mse_loss(pred[keep], future[keep])
            opt.zero_grad()
            loss.backward()
            opt.step()
            total, count = total + loss.item(), count + 1
        print(f"epoch {epoch}: train mse {total / count:.4f}")

    model.eval()
    scores = {"model": [], "constant velocity": []}
    with torch.no_grad():
        for past, future, num_agents in batches(test, False, rng):
            scores["model"].append(ade_fde(model(past, num_agents), future, num_agents))
            scores["constant velocity"].append(ade_fde(constant_velocity(past), future, num_agents))
    for name, vals in scores.items():
        ade = sum(a for a, _ in vals) / len(vals)
        fde = sum(f for _, f in vals) / len(vals)
        print(f"{name:18s} ADE {ade:.3f} m  FDE {fde:.3f} m")

    past, future, num_agents = next(batches(test, False, rng))
    with torch.no_grad():
        in_batch = model(past, num_agents)[0]
        alone = model(past[:1], num_agents[:1])[0]
    print("scene 0 predicted alone vs in its batch, max difference:", (in_batch - alone)[: num_agents[0]].abs().max().item())


if __name__ == "__main__":
    main()
