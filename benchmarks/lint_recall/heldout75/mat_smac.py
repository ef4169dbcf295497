"""Multi-Agent Transformer (MAT) for SMAC micromanagement (3m-sized toy map).

The encoder reads every agent's local observation and predicts per-agent
values; the decoder emits the joint action agent by agent, each agent reading
the actions already chosen by the agents before it.  Training is PPO over the
joint action with dead agents removed through ``active_masks``, and illegal
actions are removed with the map's ``available_actions``.

Source: seed masked_fill_inplace.txt (作用, 区别: masked_fill returns a new tensor
and leaves the original unchanged).
"""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F


class SelfAttention(nn.Module):
    def __init__(self, n_embd, n_head, n_agent, masked=False):
        super().__init__()
        self.n_head, self.masked = n_head, masked
        self.key, self.query, self.value = (nn.Linear(n_embd, n_embd) for _ in range(3))
        self.proj = nn.Linear(n_embd, n_embd)
        self.register_buffer("mask", torch.tril(torch.ones(n_agent + 1, n_agent + 1)).view(1, 1, n_agent + 1, n_agent + 1))

    def forward(self, key, value, query):
        B, L, D = query.size()
        k = self.key(key).view(B, L, self.n_head, D // self.n_head).transpose(1, 2)
        q = self.query(query).view(B, L, self.n_head, D // self.n_head).transpose(1, 2)
        v = self.value(value).view(B, L, self.n_head, D // self.n_head).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        if self.masked:
            att.masked_fill(self.mask[:, :, :L, :L] == 0, float("-inf"))  # expect: MC525 discarded
        att = F.softmax(att, dim=-1)
        y = (att @ v).transpose(1, 2).contiguous().view(B, L, D)
        return self.proj(y)


class EncodeBlock(nn.Module):
    def __init__(self, n_embd, n_head, n_agent):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(n_embd), nn.LayerNorm(n_embd)
        self.attn = SelfAttention(n_embd, n_head, n_agent, masked=False)
        self.mlp = nn.Sequential(nn.Linear(n_embd, n_embd), nn.GELU(), nn.Linear(n_embd, n_embd))

    def forward(self, x):
        x = self.ln1(x + self.attn(x, x, x))
        return self.ln2(x + self.mlp(x))


class DecodeBlock(nn.Module):
    def __init__(self, n_embd, n_head, n_agent):
        super().__init__()
        self.ln1, self.ln2, self.ln3 = nn.LayerNorm(n_embd), nn.LayerNorm(n_embd), nn.LayerNorm(n_embd)
        self.attn1 = SelfAttention(n_embd, n_head, n_agent, masked=True)
        self.attn2 = SelfAttention(n_embd, n_head, n_agent, masked=True)
        self.mlp = nn.Sequential(nn.Linear(n_embd, n_embd), nn.GELU(), nn.Linear(n_embd, n_embd))

    def forward(self, x, rep_enc):
        x = self.ln1(x + self.attn1(x, x, x))
        x = self.ln2(rep_enc + self.attn2(key=x, value=x, query=rep_enc))
        return self.ln3(x + self.mlp(x))


class MultiAgentTransformer(nn.Module):
    def __init__(self, obs_dim, action_dim, n_agent, n_block=1, n_embd=32, n_head=2):
        super().__init__()
        self.n_agent, self.action_dim = n_agent, action_dim
        self.obs_encoder = nn.Sequential(nn.LayerNorm(obs_dim), nn.Linear(obs_dim, n_embd), nn.GELU())
        self.enc_blocks = nn.Sequential(*[EncodeBlock(n_embd, n_head, n_agent) for _ in range(n_block)])
        self.value_head = nn.Sequential(nn.Linear(n_embd, n_embd), nn.GELU(), nn.Linear(n_embd, 1))
        self.action_encoder = nn.Sequential(nn.Linear(action_dim + 1, n_embd, bias=False), nn.GELU())
        self.dec_blocks = nn.ModuleList([DecodeBlock(n_embd, n_head, n_agent) for _ in range(n_block)])
        self.head = nn.Sequential(nn.Linear(n_embd, n_embd), nn.GELU(), nn.Linear(n_embd, action_dim))

    def encode(self, obs):
        rep = self.enc_blocks(self.obs_encoder(obs))
        return self.value_head(rep), rep

    def decode(self, shifted_action, obs_rep, available_actions):
        x = self.action_encoder(shifted_action)
        for block in self.dec_blocks:
            x = block(x, obs_rep)
        logit = self.head(x)
        return logit.masked_fill(available_actions == 0, torch.finfo(logit.dtype).min)

    def shift(self, action):
        B = action.size(0)
        shifted = torch.zeros(B, self.n_agent, self.action_dim + 1)
        shifted[:, 0, 0] = 1.0
        shifted[:, 1:, 1:] = F.one_hot(action[:, :-1], self.action_dim).float()
        return shifted

    def evaluate_actions(self, obs, action, available_actions):
        values, obs_rep = self.encode(obs)
        logit = self.decode(self.shift(action), obs_rep, available_actions)
        dist = torch.distributions.Categorical(logits=logit)
        return values.squeeze(-1), dist.log_prob(action), dist.entropy()

    @torch.no_grad()
    def act(self, obs, available_actions, deterministic=False):
        values, obs_rep = self.encode(obs)
        B = obs.size(0)
        shifted = torch.zeros(B, self.n_agent, self.action_dim + 1)
        shifted[:, 0, 0] = 1.0
        actions = torch.zeros(B, self.n_agent, dtype=torch.long)
        for i in range(self.n_agent):
            logit = self.decode(shifted, obs_rep, available_actions)[:, i]
            dist = torch.distributions.Categorical(logits=logit)
            actions[:, i] = logit.argmax(-1) if deterministic else dist.sample()
            if i + 1 < self.n_agent:
                shifted[:, i + 1, 1:] = F.one_hot(actions[:, i], self.action_dim).float()
        return actions, values.squeeze(-1)


def ppo_loss(policy, batch, old_logp, clip=0.2):
    values, logp, entropy = policy.evaluate_actions(batch["obs"], batch["actions"], batch["available_actions"])
    active = batch["active_masks"]
    ratio = torch.exp(logp - old_logp)
    adv = batch["advantages"]
    surr = torch.min(ratio * adv, ratio.clamp(1 - clip, 1 + clip) * adv)
    policy_loss = -(surr * active).sum() / active.sum()
    value_loss = (((values - batch["returns"]) ** 2) * active).sum() / active.sum()
    return policy_loss + value_loss - 0.01 * (entropy * active).sum() / active.sum()


if __name__ == "__main__":
    torch.manual_seed(0)
    n_agent, obs_dim, action_dim, B = 3, 12, 9, 4
    policy = MultiAgentTransformer(obs_dim, action_dim, n_agent)
    obs = torch.randn(B, n_agent, obs_dim)
    active_masks = torch.ones(B, n_agent)
    active_masks[0, 2] = 0.0
    available_actions = (torch.rand(B, n_agent, action_dim) < 0.7).float()
    available_actions[..., 1] = 1.0
    available_actions[0, 2] = 0.0
    available_actions[0, 2, 0] = 1.0
    obs[0, 2] = 0.0
    actions, values = policy.act(obs, available_actions)
    batch = {"obs": obs, "actions": actions, "available_actions": available_actions, "active_masks": active_masks,
             "advantages": torch.randn(B, n_agent), "returns": values + torch.randn(B, n_agent) * 0.1}
    with torch.no_grad():
        _, old_logp, _ = policy.evaluate_actions(obs, actions, available_actions)
    loss = ppo_loss(policy, batch, old_logp)
    loss.backward()
    print("actions", actions.tolist(), "loss", round(loss.item(), 4))
