"""ACT (Action Chunking with Transformers) for bimanual ALOHA insertion.

A CVAE encoder reads [CLS, joint positions, action chunk] and gives the style
variable z; the decoder maps z, the joint positions and camera features to a
chunk of ``chunk_size`` future joint targets.  Chunks sampled near the end of a
demonstration run past the episode and are padded.  At rollout time the
overlapping chunks predicted for the current step are averaged with
exponential weights (temporal ensembling).

Source: hyunwoongko/transformer PR #40; bentrevett/pytorch-seq2seq#96 (conventions.md
section 3 item 21).
"""
import math
from types import SimpleNamespace

import torch
import torch.nn as nn
import torch.nn.functional as F

args = SimpleNamespace(chunk_size=8, hidden_dim=64, nheads=4, enc_layers=2, dec_layers=2,
                       latent_dim=16, state_dim=14, n_cam_tokens=6, kl_weight=10.0, ensemble_k=0.01)


class EncoderLayer(nn.Module):
    def __init__(self, d, nheads):
        super().__init__()
        self.nheads = nheads
        self.qkv = nn.Linear(d, 3 * d)
        self.out = nn.Linear(d, d)
        self.norm1, self.norm2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.ff = nn.Sequential(nn.Linear(d, 4 * d), nn.ReLU(), nn.Linear(4 * d, d))

    def forward(self, x, enc_mask):
        B, N, D = x.shape
        q, k, v = self.qkv(x).view(B, N, 3, self.nheads, D // self.nheads).permute(2, 0, 3, 1, 4)
        scores = q @ k.transpose(-2, -1) / math.sqrt(D // self.nheads)
        scores = scores.masked_fill(enc_mask == 0, torch.finfo(scores.dtype).min)
        attn = scores.softmax(dim=-1)
        x = self.norm1(x + self.out((attn @ v).transpose(1, 2).reshape(B, N, D)))
        return self.norm2(x + self.ff(x))


class ACTPolicy(nn.Module):
    def __init__(self, cfg=args):
        super().__init__()
        d = cfg.hidden_dim
        self.cfg = cfg
        self.cls_embed = nn.Embedding(1, d)
        self.encoder_joint_proj = nn.Linear(cfg.state_dim, d)
        self.encoder_action_proj = nn.Linear(cfg.state_dim, d)
        self.enc_pos = nn.Parameter(torch.randn(1, cfg.chunk_size + 2, d) * 0.02)
        self.cvae_encoder = nn.ModuleList([EncoderLayer(d, cfg.nheads) for _ in range(cfg.enc_layers)])
        self.latent_proj = nn.Linear(d, 2 * cfg.latent_dim)
        self.latent_out_proj = nn.Linear(cfg.latent_dim, d)
        self.input_proj_robot_state = nn.Linear(cfg.state_dim, d)
        self.cam_proj = nn.Linear(32, d)
        self.transformer = nn.Transformer(d, cfg.nheads, cfg.enc_layers, cfg.dec_layers, 4 * d,
                                          dropout=0.0, batch_first=True)
        self.query_embed = nn.Embedding(cfg.chunk_size, d)
        self.action_head = nn.Linear(d, cfg.state_dim)

    def encode_style(self, qpos, actions, steps_left):
        B = qpos.size(0)
        action_keep = torch.arange(self.cfg.chunk_size, device=qpos.device)[None, :] < steps_left[:, None]
        keep = torch.cat([torch.ones(B, 2, dtype=torch.bool, device=qpos.device), action_keep], dim=1)
        enc_mask = keep.unsqueeze(1).unsqueeze(2)
        x = torch.cat([self.cls_embed.weight.expand(B, 1, -1), self.encoder_joint_proj(qpos).unsqueeze(1),
                       self.encoder_action_proj(actions)], dim=1) + self.enc_pos
        for layer in self.cvae_encoder:
            x = layer(x, enc_mask)
        mu, logvar = self.latent_proj(x[:, 0]).chunk(2, dim=-1)
        return mu, logvar

    def forward(self, qpos, cam_features, actions=None, steps_left=None):
        B = qpos.size(0)
        if actions is not None:
            mu, logvar = self.encode_style(qpos, actions, steps_left)
            z = mu + torch.randn_like(mu) * (0.5 * logvar).exp()
        else:
            mu = logvar = None
            z = torch.zeros(B, self.cfg.latent_dim, device=qpos.device)
        src = torch.cat([self.latent_out_proj(z).unsqueeze(1), self.input_proj_robot_state(qpos).unsqueeze(1),
                         self.cam_proj(cam_features)], dim=1)
        tgt = self.query_embed.weight.expand(B, -1, -1)
        hs = self.transformer(src, tgt)
        return self.action_head(hs), mu, logvar


def act_loss(policy, batch):
    a_hat, mu, logvar = policy(batch["qpos"], batch["cam"], batch["actions"], batch["steps_left"])
    is_pad = torch.arange(policy.cfg.chunk_size)[None, :] >= batch["steps_left"][:, None]
    l1 = (F.l1_loss(a_hat, batch["actions"], reduction="none") * ~is_pad.unsqueeze(-1)).mean()
    kl = (-0.5 * (1 + logvar - mu.pow(2) - logvar.exp())).sum(-1).mean()
    return l1 + policy.cfg.kl_weight * kl, l1, kl


class TemporalEnsembler:
    def __init__(self, max_steps, chunk_size, action_dim, k):
        self.all_actions = torch.zeros(max_steps, max_steps + chunk_size, action_dim)
        self.populated = torch.zeros(max_steps, max_steps + chunk_size, dtype=torch.bool)
        self.chunk_size, self.k = chunk_size, k

    def step(self, t, chunk):
        self.all_actions[t, t:t + self.chunk_size] = chunk
        self.populated[t, t:t + self.chunk_size] = True
        valid = self.populated[:, t]
        candidates = self.all_actions[:, t][valid]
        weights = torch.exp(-self.k * torch.arange(len(candidates), dtype=torch.float))
        return (candidates * (weights / weights.sum()).unsqueeze(-1)).sum(0)


if __name__ == "__main__":
    torch.manual_seed(0)
    policy = ACTPolicy()
    B = 4
    batch = {"qpos": torch.randn(B, args.state_dim), "cam": torch.randn(B, args.n_cam_tokens, 32),
             "actions": torch.randn(B, args.chunk_size, args.state_dim),
             "steps_left": torch.tensor([8, 5, 8, 3])}
    optimizer = torch.optim.AdamW(policy.parameters(), lr=1e-5)
    loss, l1, kl = act_loss(policy, batch)
    loss.backward()
    optimizer.step()
    policy.eval()
    ensembler = TemporalEnsembler(5, args.chunk_size, args.state_dim, args.ensemble_k)
    with torch.no_grad():
        for t in range(5):
            chunk, _, _ = policy(torch.randn(1, args.state_dim), torch.randn(1, args.n_cam_tokens, 32))
            action = ensembler.step(t, chunk[0])
    print("loss", round(loss.item(), 4), "l1", round(l1.item(), 4), "kl", round(kl.item(), 4), "action", action.shape)
