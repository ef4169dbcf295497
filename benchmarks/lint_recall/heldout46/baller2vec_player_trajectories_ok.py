"""Multi-entity trajectory modelling of basketball players, after baller2vec.

Imitates airalcorn2/baller2vec (Alcorn and Nguyen, "baller2vec: A Multi-Entity Transformer For
Multi-Agent Spatiotemporal Modeling"): every (time step, player) pair is one token built by
`player_mlp` from the player's identity embedding, court position and hoop side; a
sequence-first `nn.TransformerEncoder` runs over the flattened tokens with a registered
self-attention mask in which a player at step t sees every player at steps up to t; the
classifier predicts each player's binned trajectory (displacement) at the next step. The
synthetic "games" below (pick-and-roll-like drift towards the hoop plus noise) stand in for
the SportVU tracking data; `get_train_valid_test` and `train_model` follow the repository's
training script.

Source: seed self_attention_mask_guide.txt section 6 (create_block_mask).
"""

import math
import random

import numpy as np
import torch
import torch.nn as nn

COURT_LENGTH = 94.0
COURT_WIDTH = 50.0
N_PLAYERS = 10
GRID_BINS = 11
MAX_STEP = 3.0


class Baller2Vec(nn.Module):
    def __init__(
        self,
        n_player_ids,
        embedding_dim,
        sigmoid,
        seq_len,
        mlp_layers,
        n_player_labels,
        n_players,
        nhead,
        dim_feedforward,
        num_layers,
        dropout,
    ):
        super().__init__()
        self.sigmoid = sigmoid
        self.seq_len = seq_len
        self.n_players = n_players
        self.player_embedding = nn.Embedding(n_player_ids, embedding_dim)

        player_mlp = nn.Sequential()
        in_feats = embedding_dim + 3
        for layer_idx, out_feats in enumerate(mlp_layers):
            player_mlp.add_module(f"layer{layer_idx}", nn.Linear(in_feats, out_feats))
            if layer_idx < len(mlp_layers) - 1:
                player_mlp.add_module(f"relu{layer_idx}", nn.ReLU())
            in_feats = out_feats
        self.player_mlp = player_mlp

        d_model = mlp_layers[-1]
        self.d_model = d_model
        encoder_layer = nn.TransformerEncoderLayer(d_model, nhead, dim_feedforward, dropout)
        self.transformer = nn.TransformerEncoder(encoder_layer, num_layers, enable_nested_tensor=False)
        self.register_buffer("mask", self.generate_self_mask(seq_len, n_players))
        self.player_classifier = nn.Linear(d_model, n_player_labels)
        self.init_weights()

    def init_weights(self):
        init_range = 0.1
        self.player_embedding.weight.data.uniform_(-init_range, init_range)
        self.player_classifier.bias.data.zero_()
        self.player_classifier.weight.data.uniform_(-init_range, init_range)

    def generate_self_mask(self, seq_len, n_players):
        sz = seq_len * n_players
        mask = torch.zeros((sz, sz))
        seen = torch.zeros((sz, sz), dtype=torch.bool)
        for step in range(seq_len):
            start = step * n_players
            stop = start + n_players
            mask[start:stop, :stop] = 0.0
            seen[start:stop, :stop] = True
        mask[~seen] = float("-inf")
        return mask

    def forward(self, tensors):
        device = list(self.player_mlp.parameters())[0].device
        player_embeddings = self.player_embedding(tensors["player_idxs"].flatten().to(device))
        if self.sigmoid == "logistic":
            player_embeddings = torch.sigmoid(player_embeddings)
        elif self.sigmoid == "tanh":
            player_embeddings = torch.tanh(player_embeddings)

        player_xs = tensors["player_xs"].flatten().unsqueeze(1).to(device)
        player_ys = tensors["player_ys"].flatten().unsqueeze(1).to(device)
        player_hoop_sides = tensors["player_hoop_sides"].flatten().unsqueeze(1).to(device)
        player_pos = torch.cat([player_embeddings, player_xs, player_ys, player_hoop_sides], dim=1)
        player_pos_feats = self.player_mlp(player_pos) * math.sqrt(self.d_model)

        outputs = self.transformer(player_pos_feats.unsqueeze(1), self.mask)
        preds = self.player_classifier(outputs.squeeze(1))
        return preds


def get_player_traj_label(dx, dy):
    x_bin = int(np.clip(np.round((dx + MAX_STEP) / (2 * MAX_STEP) * (GRID_BINS - 1)), 0, GRID_BINS - 1))
    y_bin = int(np.clip(np.round((dy + MAX_STEP) / (2 * MAX_STEP) * (GRID_BINS - 1)), 0, GRID_BINS - 1))
    return x_bin * GRID_BINS + y_bin


def simulate_possession(rng, n_player_ids, seq_len):
    player_idxs = rng.choice(n_player_ids, N_PLAYERS, replace=False)
    hoop_side = rng.integers(0, 2)
    hoop_x = COURT_LENGTH - 5.25 if hoop_side == 1 else 5.25
    xs = np.zeros((seq_len + 1, N_PLAYERS))
    ys = np.zeros((seq_len + 1, N_PLAYERS))
    xs[0] = rng.uniform(20, 74, N_PLAYERS)
    ys[0] = rng.uniform(5, 45, N_PLAYERS)
    speed = 0.5 + (player_idxs % 5) / 4.0
    for t in range(1, seq_len + 1):
        direction_x = np.sign(hoop_x - xs[t - 1])
        offence = np.arange(N_PLAYERS) < 5
        follow = xs[t - 1, :5].mean() - xs[t - 1]
        dx = np.where(offence, direction_x * speed, 0.4 * follow) + rng.normal(0, 0.3, N_PLAYERS)
        dy = 0.2 * (COURT_WIDTH / 2 - ys[t - 1]) + rng.normal(0, 0.3, N_PLAYERS)
        xs[t] = np.clip(xs[t - 1] + dx, 0, COURT_LENGTH)
        ys[t] = np.clip(ys[t - 1] + dy, 0, COURT_WIDTH)

    labels = np.zeros((seq_len, N_PLAYERS), dtype=np.int64)
    for t in range(seq_len):
        for p in range(N_PLAYERS):
            labels[t, p] = get_player_traj_label(xs[t + 1, p] - xs[t, p], ys[t + 1, p] - ys[t, p])

    return {
        "player_idxs": torch.tensor(np.tile(player_idxs, (seq_len, 1)), dtype=torch.long),
        "player_xs": torch.tensor(xs[:seq_len] / COURT_LENGTH, dtype=torch.float32),
        "player_ys": torch.tensor(ys[:seq_len] / COURT_WIDTH, dtype=torch.float32),
        "player_hoop_sides": torch.full((seq_len, N_PLAYERS), float(hoop_side)),
        "player_trajs": torch.tensor(labels),
    }


def get_train_valid_test(opts, seed=2021):
    rng = np.random.default_rng(seed)
    games = [simulate_possession(rng, opts["n_player_ids"], opts["seq_len"]) for _ in range(opts["n_games"])]
    n_valid = n_test = opts["n_games"] // 10
    return games[n_valid + n_test:], games[:n_valid], games[n_valid:n_valid + n_test]


def run_epoch(model, optimizer, criterion, games, train):
    model.train(train)
    total_loss = 0.0
    correct = 0
    n_tokens = 0
    order = list(range(len(games)))
    if train:
        random.shuffle(order)
    for idx in order:
        tensors = games[idx]
        labels = tensors["player_trajs"].flatten()
        with torch.set_grad_enabled(train):
            preds = model(tensors)
            loss = criterion(preds, labels)
        if train:
            optimizer.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
        total_loss += loss.item() * len(labels)
        correct += (preds.argmax(dim=1) == labels).sum().item()
        n_tokens += len(labels)
    return total_loss / n_tokens, correct / n_tokens


def train_model(opts):
    train_games, valid_games, test_games = get_train_valid_test(opts)
    model = Baller2Vec(
        n_player_ids=opts["n_player_ids"],
        embedding_dim=opts["embedding_dim"],
        sigmoid=opts["sigmoid"],
        seq_len=opts["seq_len"],
        mlp_layers=opts["mlp_layers"],
        n_player_labels=GRID_BINS * GRID_BINS,
        n_players=N_PLAYERS,
        nhead=opts["nhead"],
        dim_feedforward=opts["dim_feedforward"],
        num_layers=opts["num_layers"],
        dropout=opts["dropout"],
    )
    criterion = nn.CrossEntropyLoss()
    optimizer = torch.optim.Adam(model.parameters(), lr=opts["learning_rate"])
    best_valid_loss = float("inf")
    for epoch in range(opts["epochs"]):
        train_loss, train_acc = run_epoch(model, optimizer, criterion, train_games, True)
        valid_loss, valid_acc = run_epoch(model, optimizer, criterion, valid_games, False)
        if valid_loss < best_valid_loss:
            best_valid_loss = valid_loss
        print(f"epoch {epoch}: train_loss {train_loss:.4f} acc {train_acc:.3f} "
              f"valid_loss {valid_loss:.4f} acc {valid_acc:.3f}")
    test_loss, test_acc = run_epoch(model, optimizer, criterion, test_games, False)
    print(f"test_loss {test_loss:.4f} test_acc {test_acc:.3f} (best valid {best_valid_loss:.4f})")
    return model


if __name__ == "__main__":
    random.seed(2021)
    torch.manual_seed(2021)
    opts = {
        "n_player_ids": 40,
        "n_games": 40,
        "seq_len": 8,
        "embedding_dim": 16,
        "sigmoid": "none",
        "mlp_layers": [64, 64],
        "nhead": 4,
        "dim_feedforward": 128,
        "num_layers": 2,
        "dropout": 0.0,
        "learning_rate": 1e-3,
        "epochs": 3,
    }
    train_model(opts)
