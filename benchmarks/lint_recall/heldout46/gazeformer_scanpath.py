"""Predicting human visual-search scanpaths (eye-tracking fixations), after Gazeformer.

Imitates cvlab-stonybrook/Gazeformer (Mondal et al., CVPR 2023) in its own layout: the
`gazeformer` module with `querypos_embed`, `patchpos_embed` from `PositionEmbeddingSine2d`,
`firstfix_linear` on the pixel encoding of the initial fixation, `token_predictor`
(fixation or padding) and the Gaussian heads `generator_y_mu` / `generator_x_mu` /
`generator_t_mu` with their log-variances sampled by the reparameterisation trick, all
`max_len` fixations decoded in parallel; `train` with the token NLL and L1 losses on
fixations that are not padding; and the scanpath generation of `test.py`. Here the search
target (COCO-Search18 objects such as "potted plant" or "stop sign") is kept as one
embedding per word of its name and the image patches attend to it. Scenes are synthetic
6 x 8 patch grids with the target somewhere in them; subjects fixate towards it.

Source: huggingface/transformers#32195 (conventions.md section 3 item 25) and conventions.md
section 1 (HF 4.x AttentionMaskConverter row).
"""

import argparse
import math

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

TASKS = ["bottle", "bowl", "car", "chair", "clock", "cup", "fork", "keyboard", "knife", "laptop",
         "microwave", "mouse", "oven", "potted plant", "sink", "stop sign", "toilet", "tv"]
WORDS = ["<pad>"] + sorted({w for t in TASKS for w in t.split()})
PAD_ID = 0
GRID_H, GRID_W, PATCH = 6, 8, 16


class PositionEmbeddingSine2d(nn.Module):
    def __init__(self, spatial_dim, hidden_dim=64, temperature=10000, normalize=True, flatten=True):
        super().__init__()
        h, w = spatial_dim
        num_pos_feats = hidden_dim // 2
        y_embed = torch.arange(1, h + 1, dtype=torch.float32)[:, None].expand(h, w)
        x_embed = torch.arange(1, w + 1, dtype=torch.float32)[None, :].expand(h, w)
        if normalize:
            y_embed = y_embed / h * 2 * math.pi
            x_embed = x_embed / w * 2 * math.pi
        dim_t = temperature ** (2 * (torch.arange(num_pos_feats) // 2) / num_pos_feats)
        pos_x = x_embed[:, :, None] / dim_t
        pos_y = y_embed[:, :, None] / dim_t
        pos_x = torch.stack((pos_x[:, :, 0::2].sin(), pos_x[:, :, 1::2].cos()), dim=3).flatten(2)
        pos_y = torch.stack((pos_y[:, :, 0::2].sin(), pos_y[:, :, 1::2].cos()), dim=3).flatten(2)
        pos = torch.cat((pos_y, pos_x), dim=2)
        self.register_buffer("pos", pos.flatten(0, 1).unsqueeze(1) if flatten else pos)


class Transformer(nn.Module):
    def __init__(self, d_model=64, nhead=4, num_encoder_layers=2, num_decoder_layers=2, dim_feedforward=128,
                 dropout=0.1, n_words=len(WORDS)):
        super().__init__()
        self.d_model = d_model
        self.word_embed = nn.Embedding(n_words, d_model, padding_idx=PAD_ID)
        self.task_attn = nn.MultiheadAttention(d_model, nhead, dropout=dropout)
        self.task_norm = nn.LayerNorm(d_model)
        enc = nn.TransformerEncoderLayer(d_model, nhead, dim_feedforward, dropout)
        dec = nn.TransformerDecoderLayer(d_model, nhead, dim_feedforward, dropout)
        self.encoder = nn.TransformerEncoder(enc, num_encoder_layers, enable_nested_tensor=False)
        self.decoder = nn.TransformerDecoder(dec, num_decoder_layers)

    def forward(self, src, tgt, task, task_pad, querypos_embed, patchpos_embed):
        words = self.word_embed(task).transpose(0, 1)
        src = src + patchpos_embed
        fused, _ = self.task_attn(src, words, words, key_padding_mask=task_pad.bool(), need_weights=False)
        memory = self.encoder(self.task_norm(src + fused))
        return self.decoder(tgt + querypos_embed, memory)


class gazeformer(nn.Module):
    def __init__(self, transformer, spatial_dim, feat_dim, dropout=0.2, max_len=7, patch_size=PATCH):
        super().__init__()
        self.spatial_dim = spatial_dim
        self.transformer = transformer
        self.hidden_dim = transformer.d_model
        self.input_proj = nn.Linear(feat_dim, self.hidden_dim)
        self.querypos_embed = nn.Embedding(max_len, self.hidden_dim)
        self.patchpos_embed = PositionEmbeddingSine2d(spatial_dim, hidden_dim=self.hidden_dim).pos
        self.queryfix_embed = PositionEmbeddingSine2d((spatial_dim[0] * patch_size, spatial_dim[1] * patch_size),
                                                      hidden_dim=self.hidden_dim, flatten=False).pos
        self.token_predictor = nn.Linear(self.hidden_dim, 2)
        self.generator_y_mu = nn.Linear(self.hidden_dim, 1)
        self.generator_x_mu = nn.Linear(self.hidden_dim, 1)
        self.generator_t_mu = nn.Linear(self.hidden_dim, 1)
        self.generator_y_logvar = nn.Linear(self.hidden_dim, 1)
        self.generator_x_logvar = nn.Linear(self.hidden_dim, 1)
        self.generator_t_logvar = nn.Linear(self.hidden_dim, 1)
        self.max_len = max_len
        self.activation = F.relu
        self.dropout = nn.Dropout(dropout)
        self.softmax = nn.LogSoftmax(dim=-1)
        self.firstfix_linear = nn.Linear(self.hidden_dim, self.hidden_dim)

    def get_sample(self, mu, logvar):
        if self.training:
            return mu + torch.randn_like(mu) * torch.exp(0.5 * logvar)
        return mu

    def forward(self, src, tgt, task, task_pad):
        src = self.input_proj(src).transpose(0, 1)
        tgt_input = torch.zeros(self.max_len, src.size(1), self.hidden_dim)
        tgt_input[0] = self.firstfix_linear(self.queryfix_embed[tgt[:, 0], tgt[:, 1], :])
        outs = self.transformer(src, tgt_input, task, task_pad, self.querypos_embed.weight.unsqueeze(1),
                                self.patchpos_embed)
        outs = self.dropout(outs)
        y = self.get_sample(self.generator_y_mu(outs), self.generator_y_logvar(outs))
        x = self.get_sample(self.generator_x_mu(outs), self.generator_x_logvar(outs))
        t = self.get_sample(self.generator_t_mu(outs), self.generator_t_logvar(outs))
        return self.softmax(self.token_predictor(outs)), self.activation(y), self.activation(x), self.activation(t)


def make_trial(rng, feat_dim):
    task = int(rng.integers(len(TASKS)))
    ty, tx = int(rng.integers(GRID_H)), int(rng.integers(GRID_W))
    feats = rng.normal(0, 0.5, (GRID_H * GRID_W, feat_dim)).astype(np.float32)
    feats[ty * GRID_W + tx, task] += 3.0
    for _ in range(3):
        feats[int(rng.integers(GRID_H * GRID_W)), int(rng.integers(len(TASKS)))] += 3.0
    n_fix = int(rng.integers(2, 7))
    start = np.array([GRID_H * PATCH / 2, GRID_W * PATCH / 2])
    goal = np.array([(ty + 0.5) * PATCH, (tx + 0.5) * PATCH])
    fixations = []
    for i in range(1, n_fix + 1):
        p = start + (goal - start) * min(1.0, i / (n_fix - 0.5)) + rng.normal(0, 3, 2)
        fixations.append([p[0] / (GRID_H * PATCH), p[1] / (GRID_W * PATCH), rng.uniform(0.15, 0.35)])
    return feats, task, fixations, (int(start[0]), int(start[1]))


def collate_fn(trials, max_len=7):
    b = len(trials)
    imgs = torch.tensor(np.stack([t[0] for t in trials]))
    task_ids = torch.zeros(b, 2, dtype=torch.long)
    task_pad = torch.zeros(b, 2)
    tgt = torch.zeros(b, max_len, 3)
    tgt_padding_mask = torch.ones(b, max_len, dtype=torch.bool)
    for i, (_, task, fixations, _) in enumerate(trials):
        words = [WORDS.index(w) for w in TASKS[task].split()]
        task_ids[i, :len(words)] = torch.tensor(words)
        task_pad[i, len(words):] = 1.0
        tgt[i, :len(fixations)] = torch.tensor(fixations)
        tgt_padding_mask[i, :len(fixations)] = False
    firstfix = torch.tensor([t[3] for t in trials])
    return imgs, tgt, tgt_padding_mask, task_ids, task_pad, firstfix


def train(epoch, model, optimizer, trials, batch_size=32):
    model.train()
    perm = np.random.permutation(len(trials))
    for start in range(0, len(trials), batch_size):
        batch = [trials[i] for i in perm[start:start + batch_size]]
        imgs, tgt, tgt_padding_mask, task_ids, task_pad, firstfix = collate_fn(batch)
        out_token, out_y, out_x, out_t = model(imgs, firstfix, task_ids, task_pad)
        keep = ~tgt_padding_mask
        out_y, out_x, out_t = [o.squeeze(-1).permute(1, 0)[keep] for o in (out_y, out_x, out_t)]
        token_loss = F.nll_loss(out_token.permute(1, 0, 2).reshape(-1, 2), tgt_padding_mask.long().view(-1))
        reg_loss = (F.l1_loss(out_y, tgt[:, :, 0][keep]) + F.l1_loss(out_x, tgt[:, :, 1][keep])
                    + F.l1_loss(out_t, tgt[:, :, 2][keep]))
        loss = token_loss + reg_loss
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    print(f"epoch {epoch}: token loss {token_loss.item():.3f}  fixation L1 {reg_loss.item():.3f}")


def predict_scanpaths(model, trials):
    model.eval()
    imgs = torch.tensor(np.stack([t[0] for t in trials]))
    firstfix = torch.tensor([t[3] for t in trials])
    task_ids = torch.zeros(len(trials), 2, dtype=torch.long)
    for i, t in enumerate(trials):
        words = [WORDS.index(w) for w in TASKS[t[1]].split()]
        task_ids[i, :len(words)] = torch.tensor(words)
    task_keep = task_ids != PAD_ID
    task_pad = 1 - task_keep  # expect: MC512 inference
    with torch.no_grad():
        out_token, out_y, out_x, out_t = model(imgs, firstfix, task_ids, task_pad)
    scanpaths = []
    for i in range(len(trials)):
        path = []
        for j in range(model.max_len):
            if out_token[j, i].argmax().item() == 1:
                break
            path.append((out_y[j, i, 0].item() * GRID_H * PATCH, out_x[j, i, 0].item() * GRID_W * PATCH,
                         out_t[j, i, 0].item()))
        scanpaths.append(path)
    return scanpaths


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument("--generate", action="store_true")
    args = parser.parse_args()
    torch.manual_seed(3)
    np.random.seed(3)
    rng = np.random.default_rng(3)
    feat_dim = 24
    trials = [make_trial(rng, feat_dim) for _ in range(448)]
    train_trials, test_trials = trials[:384], trials[384:]
    model = gazeformer(Transformer(), (GRID_H, GRID_W), feat_dim)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    for epoch in range(args.epochs):
        train(epoch, model, optimizer, train_trials)
    if args.generate:
        paths = predict_scanpaths(model, test_trials)
        errors = []
        for path, (_, _, fixations, _) in zip(paths, test_trials):
            if path:
                errors.append(math.hypot(path[-1][0] - fixations[-1][0] * GRID_H * PATCH,
                                         path[-1][1] - fixations[-1][1] * GRID_W * PATCH))
        print(f"mean scanpath length {np.mean([len(p) for p in paths]):.2f}, "
              f"last-fixation error {np.mean(errors) if errors else float('nan'):.1f} px")
