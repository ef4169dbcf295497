"""Transformer noise-prediction network for Diffusion Policy on Push-T (low-dim keypoints).

The condition sequence is the diffusion timestep token followed by
``n_obs_steps`` observation tokens; the noisy action trajectory of length
``horizon`` is decoded against it with causal self-attention, and each action
step may only read observations up to its own time.  DDPM training on
(observation window, action chunk) pairs and a short reverse-diffusion loop
for inference.

Source: seed self_attention_mask_guide.txt sections 3 and 7 (Q3); conventions.md
section 1 (direction cheat-sheet, additive masks) and section 2.3.
"""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F


class SinusoidalPosEmb(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.dim = dim

    def forward(self, x):
        half = self.dim // 2
        emb = torch.exp(torch.arange(half, device=x.device) * -(math.log(10000) / (half - 1)))
        emb = x[:, None].float() * emb[None, :]
        return torch.cat((emb.sin(), emb.cos()), dim=-1)


class TransformerForDiffusion(nn.Module):
    def __init__(self, input_dim, output_dim, horizon, n_obs_steps, cond_dim,
                 n_layer=2, n_head=4, n_emb=64, causal_attn=True):
        super().__init__()
        T, T_cond = horizon, 1 + n_obs_steps
        self.input_emb = nn.Linear(input_dim, n_emb)
        self.pos_emb = nn.Parameter(torch.zeros(1, T, n_emb))
        self.time_emb = SinusoidalPosEmb(n_emb)
        self.cond_obs_emb = nn.Linear(cond_dim, n_emb)
        self.cond_pos_emb = nn.Parameter(torch.zeros(1, T_cond, n_emb))
        self.encoder = nn.Sequential(nn.Linear(n_emb, 4 * n_emb), nn.Mish(), nn.Linear(4 * n_emb, n_emb))
        layer = nn.TransformerDecoderLayer(n_emb, n_head, 4 * n_emb, dropout=0.0, activation="gelu",
                                           batch_first=True, norm_first=True)
        self.decoder = nn.TransformerDecoder(layer, num_layers=n_layer)
        if causal_attn:
            mask = (torch.triu(torch.ones(T, T)) == 1).transpose(0, 1)
            mask = mask.float().masked_fill(mask == 0, float("-inf")).masked_fill(mask == 1, float(0.0))
            self.register_buffer("mask", mask)
            t, s = torch.meshgrid(torch.arange(T), torch.arange(T_cond), indexing="ij")
            memory_mask = torch.zeros(T, T_cond).masked_fill(t < (s - 1), float("-inf"))
            self.register_buffer("memory_mask", memory_mask)
        else:
            self.mask = None
            self.memory_mask = None
        self.ln_f = nn.LayerNorm(n_emb)
        self.head = nn.Linear(n_emb, output_dim)

    def forward(self, sample, timestep, cond):
        time_emb = self.time_emb(timestep).unsqueeze(1)
        cond_embeddings = torch.cat([time_emb, self.cond_obs_emb(cond)], dim=1)
        memory = self.encoder(cond_embeddings + self.cond_pos_emb[:, : cond_embeddings.shape[1]])
        x = self.input_emb(sample) + self.pos_emb[:, : sample.shape[1]]
        x = self.decoder(tgt=x, memory=memory, tgt_mask=self.mask, memory_mask=self.memory_mask)
        return self.head(self.ln_f(x))


class DDPMScheduler:
    def __init__(self, num_train_timesteps=100, beta_start=1e-4, beta_end=0.02):
        self.betas = torch.linspace(beta_start, beta_end, num_train_timesteps)
        self.alphas_cumprod = torch.cumprod(1.0 - self.betas, dim=0)
        self.num_train_timesteps = num_train_timesteps

    def add_noise(self, x0, noise, t):
        a = self.alphas_cumprod[t].view(-1, 1, 1)
        return a.sqrt() * x0 + (1 - a).sqrt() * noise

    def step(self, eps, t, x):
        alpha_t = 1.0 - self.betas[t]
        a_bar = self.alphas_cumprod[t]
        mean = (x - self.betas[t] / (1 - a_bar).sqrt() * eps) / alpha_t.sqrt()
        if t > 0:
            mean = mean + self.betas[t].sqrt() * torch.randn_like(x)
        return mean


class DiffusionTransformerLowdimPolicy(nn.Module):
    def __init__(self, obs_dim=20, action_dim=2, horizon=10, n_obs_steps=2, n_action_steps=8):
        super().__init__()
        self.horizon, self.n_obs_steps, self.n_action_steps = horizon, n_obs_steps, n_action_steps
        self.action_dim = action_dim
        self.model = TransformerForDiffusion(action_dim, action_dim, horizon, n_obs_steps, obs_dim)
        self.noise_scheduler = DDPMScheduler()

    def compute_loss(self, batch):
        obs, action = batch["obs"][:, : self.n_obs_steps], batch["action"]
        noise = torch.randn_like(action)
        t = torch.randint(0, self.noise_scheduler.num_train_timesteps, (action.shape[0],))
        noisy = self.noise_scheduler.add_noise(action, noise, t)
        pred = self.model(noisy, t, obs)
        loss = F.mse_loss(pred, noise, reduction="none")
        loss = loss * batch["action_valid"].unsqueeze(-1)
        return loss.sum() / (batch["action_valid"].sum() * self.action_dim)

    @torch.no_grad()
    def predict_action(self, obs, num_inference_steps=10):
        B = obs.shape[0]
        trajectory = torch.randn(B, self.horizon, self.action_dim)
        stride = self.noise_scheduler.num_train_timesteps // num_inference_steps
        for t in reversed(range(0, self.noise_scheduler.num_train_timesteps, stride)):
            eps = self.model(trajectory, torch.full((B,), t), obs[:, : self.n_obs_steps])
            trajectory = self.noise_scheduler.step(eps, t, trajectory)
        start = self.n_obs_steps - 1
        return trajectory[:, start:start + self.n_action_steps]


if __name__ == "__main__":
    torch.manual_seed(0)
    policy = DiffusionTransformerLowdimPolicy()
    B = 4
    action_valid = torch.ones(B, policy.horizon)
    action_valid[1, 7:] = 0.0
    batch = {"obs": torch.randn(B, policy.n_obs_steps, 20), "action": torch.randn(B, policy.horizon, 2),
             "action_valid": action_valid}
    optimizer = torch.optim.AdamW(policy.parameters(), lr=1e-4, weight_decay=1e-3)
    loss = policy.compute_loss(batch)
    loss.backward()
    optimizer.step()
    policy.eval()
    actions = policy.predict_action(batch["obs"])
    print("loss", round(loss.item(), 4), "actions", tuple(actions.shape), "finite", bool(torch.isfinite(actions).all()))
