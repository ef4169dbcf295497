"""TarMAC-style targeted communication for the traffic-junction task.

IC3Net-style layout: every car encodes its local view, keeps a recurrent state,
and broadcasts a signed message (key, value); receivers attend over the messages
for a few communication passes before choosing gas or brake.  Cars enter and
leave the junction, so each step comes with an ``alive_mask`` from the
environment.

Source: conventions.md section 1 (direction cheat-sheet; nn.MultiheadAttention
row), section 5 item 1; seed self_attention_mask_guide.txt sections 2 and 7 (Q1).
"""
import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F


def get_args(argv=None):
    parser = argparse.ArgumentParser("tarmac")
    parser.add_argument("--nagents", type=int, default=5)
    parser.add_argument("--obs_dim", type=int, default=29)
    parser.add_argument("--hid_size", type=int, default=64)
    parser.add_argument("--msg_heads", type=int, default=4)
    parser.add_argument("--comm_passes", type=int, default=2)
    parser.add_argument("--naction", type=int, default=2)
    parser.add_argument("--gamma", type=float, default=1.0)
    parser.add_argument("--value_coeff", type=float, default=0.01)
    parser.add_argument("--lrate", type=float, default=1e-3)
    return parser.parse_args(argv)


class TarMAC(nn.Module):
    def __init__(self, args):
        super().__init__()
        self.args = args
        self.nagents = args.nagents
        self.hid_size = args.hid_size
        self.encoder = nn.Linear(args.obs_dim, args.hid_size)
        self.lstm_cell = nn.LSTMCell(args.hid_size, args.hid_size)
        self.comm_attn = nn.MultiheadAttention(args.hid_size, args.msg_heads, batch_first=True)
        self.msg_proj = nn.ModuleList([nn.Linear(args.hid_size, args.hid_size) for _ in range(args.comm_passes)])
        self.gate = nn.Linear(2 * args.hid_size, args.hid_size)
        self.action_head = nn.Linear(args.hid_size, args.naction)
        self.value_head = nn.Linear(args.hid_size, 1)

    def init_hidden(self, batch_size):
        shape = (batch_size * self.nagents, self.hid_size)
        return torch.zeros(shape), torch.zeros(shape)

    def communicate(self, hidden, alive_mask):
        out = hidden
        attn_log = []
        for proj in self.msg_proj:
            message = torch.tanh(proj(out)) * alive_mask.unsqueeze(-1)
            comm, weights = self.comm_attn(out, message, message, key_padding_mask=alive_mask == 0)
            comm = comm * alive_mask.unsqueeze(-1)
            g = torch.sigmoid(self.gate(torch.cat([out, comm], dim=-1)))
            out = g * out + (1.0 - g) * comm
            attn_log.append(weights)
        return out, attn_log

    def forward(self, obs, hidden_state, alive_mask):
        batch_size, n, _ = obs.shape
        x = torch.tanh(self.encoder(obs)).reshape(batch_size * n, -1)
        h, c = self.lstm_cell(x, hidden_state)
        h = h.reshape(batch_size, n, -1)
        h, attn_log = self.communicate(h, alive_mask)
        logits = self.action_head(h)
        values = self.value_head(h).squeeze(-1)
        return F.log_softmax(logits, dim=-1), values, (h.reshape(batch_size * n, -1), c), attn_log


class TrafficJunctionStub:
    def __init__(self, nagents, obs_dim, add_rate=0.4, seed=0):
        self.nagents = nagents
        self.obs_dim = obs_dim
        self.add_rate = add_rate
        self.gen = torch.Generator().manual_seed(seed)

    def reset(self, batch_size):
        self.alive = torch.zeros(batch_size, self.nagents)
        self.alive[:, 0] = 1.0
        return self._obs()

    def _obs(self):
        obs = torch.randn(self.alive.size(0), self.nagents, self.obs_dim, generator=self.gen)
        return obs * self.alive.unsqueeze(-1)

    def step(self, actions):
        enter = (torch.rand(self.alive.shape, generator=self.gen) < self.add_rate).float()
        self.alive = torch.clamp(self.alive + enter, max=1.0)
        crash = ((actions == 0).float() * self.alive).sum(-1, keepdim=True) > 2
        reward = -0.01 * self.alive - 10.0 * crash.float() * self.alive
        return self._obs(), reward


def run_episode(policy, env, batch_size, max_steps):
    obs = env.reset(batch_size)
    hidden = policy.init_hidden(batch_size)
    log_probs, values, rewards, masks = [], [], [], []
    for _ in range(max_steps):
        alive_mask = env.alive.clone()
        action_logp, value, hidden, _ = policy(obs, hidden, alive_mask)
        gumbel = -torch.log(-torch.log(torch.rand_like(action_logp).clamp_min(1e-10)))
        actions = (action_logp.detach() + gumbel).argmax(dim=-1)
        obs, reward = env.step(actions)
        log_probs.append(action_logp.gather(-1, actions.unsqueeze(-1)).squeeze(-1))
        values.append(value)
        rewards.append(reward)
        masks.append(alive_mask)
    return log_probs, values, rewards, masks


def reinforce_loss(args, log_probs, values, rewards, masks):
    returns = torch.zeros_like(rewards[0])
    policy_loss, value_loss = 0.0, 0.0
    n_alive = torch.stack(masks).sum().clamp(min=1.0)
    for t in reversed(range(len(rewards))):
        returns = rewards[t] + args.gamma * returns
        advantage = returns - values[t].detach()
        policy_loss = policy_loss - (log_probs[t] * advantage * masks[t]).sum()
        value_loss = value_loss + ((values[t] - returns).pow(2) * masks[t]).sum()
    return (policy_loss + args.value_coeff * value_loss) / n_alive


if __name__ == "__main__":
    torch.manual_seed(0)
    args = get_args([])
    policy = TarMAC(args)
    env = TrafficJunctionStub(args.nagents, args.obs_dim)
    optimizer = torch.optim.RMSprop(policy.parameters(), lr=args.lrate)
    for epoch in range(2):
        batch = run_episode(policy, env, batch_size=4, max_steps=6)
        loss = reinforce_loss(args, *batch)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        print(f"epoch {epoch} loss {loss.item():.4f}")
